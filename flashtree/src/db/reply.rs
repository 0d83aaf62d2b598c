//! A one-shot reply from a worker to a caller, usable both by blocking
//! (`wait`) and as a `Future` from any async runtime (a real `Waker`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

struct Shared<T> {
    slot: Mutex<Slot<T>>,
    ready: Condvar,
}

/// The sending half; sending consumes it.
pub(crate) struct ReplySender<T>(Arc<Shared<T>>);

/// The receiving half: blocks in [`Reply::wait`] or is awaited.
pub struct Reply<T>(Arc<Shared<T>>);

pub(crate) fn reply_pair<T>() -> (ReplySender<T>, Reply<T>) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            value: None,
            waker: None,
        }),
        ready: Condvar::new(),
    });
    (ReplySender(shared.clone()), Reply(shared))
}

impl<T> ReplySender<T> {
    pub(crate) fn send(self, value: T) {
        let waker = {
            let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
            slot.value = Some(value);
            slot.waker.take()
        };
        self.0.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Reply<T> {
    /// Blocks the calling thread until the value arrives.
    pub fn wait(self) -> T {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = slot.value.take() {
                return v;
            }
            slot = self.0.ready.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<T> Future for Reply<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
        match slot.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
