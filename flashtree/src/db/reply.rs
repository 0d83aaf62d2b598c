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

/// The sending half; sending consumes it. Dropped without sending (the
/// task that held it panicked), it sends its `abandoned` value instead, so
/// that the receiver never waits forever.
pub(crate) struct ReplySender<T> {
    shared: Option<Arc<Shared<T>>>,
    abandoned: fn() -> T,
}

/// The receiving half: blocks in [`Reply::wait`] or is awaited.
pub struct Reply<T>(Arc<Shared<T>>);

/// A connected pair; `abandoned` makes the value delivered when the sender
/// is dropped without sending.
pub(crate) fn reply_pair<T>(abandoned: fn() -> T) -> (ReplySender<T>, Reply<T>) {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot {
            value: None,
            waker: None,
        }),
        ready: Condvar::new(),
    });
    (
        ReplySender {
            shared: Some(shared.clone()),
            abandoned,
        },
        Reply(shared),
    )
}

fn deliver<T>(shared: &Shared<T>, value: T) {
    let waker = {
        let mut slot = shared.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.value = Some(value);
        slot.waker.take()
    };
    shared.ready.notify_all();
    if let Some(w) = waker {
        w.wake();
    }
}

impl<T> ReplySender<T> {
    pub(crate) fn send(mut self, value: T) {
        if let Some(shared) = self.shared.take() {
            deliver(&shared, value);
        }
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            deliver(&shared, (self.abandoned)());
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
