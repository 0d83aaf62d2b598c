//! The per-worker task executor: lightweight tasks (Rust futures) that run
//! cooperatively on one worker thread and never migrate.
//!
//! A task runs until it must wait. It then returns `Pending` either
//! *parked* (it registered for a wake-up, e.g. its page read, or another
//! task's read of a page it needs, is in flight: the worker loop wakes it
//! when the page is there) or *yielding* (it goes to the back of the ready
//! queue): taking turns ([`yield_now`]) or busy-waiting ([`yield_busy`],
//! e.g. a latch conflict). Tasks find out which they are
//! through [`current_task`] and [`park_current`], valid while the executor
//! polls them. Wakers are not used inside the engine: every wake-up comes
//! from this worker's own loop, so no cross-thread signalling is needed.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// Index of a task in its worker's task table.
pub type TaskId = u32;

thread_local! {
    static CURRENT_TASK: Cell<Option<TaskId>> = const { Cell::new(None) };
    static PARKED: Cell<bool> = const { Cell::new(false) };
    static BUSY_WAIT: Cell<bool> = const { Cell::new(false) };
    /// Timers of this thread's executor, earliest first.
    static TIMERS: RefCell<BinaryHeap<Reverse<Timer>>> = const { RefCell::new(BinaryHeap::new()) };
    static NEXT_TIMER_TOKEN: Cell<u64> = const { Cell::new(0) };
}

/// A task parked until `deadline`; `live` is cleared when the timer fired
/// or its future was dropped.
struct Timer {
    deadline: Instant,
    token: u64,
    task: TaskId,
    live: Rc<Cell<bool>>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Timer) -> bool {
        (self.deadline, self.token) == (other.deadline, other.token)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Timer) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    fn cmp(&self, other: &Timer) -> std::cmp::Ordering {
        (self.deadline, self.token).cmp(&(other.deadline, other.token))
    }
}

/// Parks the running task until `deadline` (the worker loop wakes it, and
/// meanwhile sleeps or waits for I/O instead of polling it). The wake may
/// come late by up to one I/O completion's wait when I/O is in flight.
pub fn sleep_until(deadline: Instant) -> SleepUntil {
    SleepUntil {
        deadline,
        live: None,
    }
}

/// See [`sleep_until`].
pub struct SleepUntil {
    deadline: Instant,
    live: Option<Rc<Cell<bool>>>,
}

impl Future for SleepUntil {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            if let Some(live) = self.live.take() {
                live.set(false);
            }
            return Poll::Ready(());
        }
        let task = current_task().expect("sleep_until polled outside a task");
        if !self.live.as_ref().is_some_and(|live| live.get()) {
            let live = Rc::new(Cell::new(true));
            let token = NEXT_TIMER_TOKEN.with(|t| {
                let token = t.get();
                t.set(token + 1);
                token
            });
            TIMERS.with(|timers| {
                timers.borrow_mut().push(Reverse(Timer {
                    deadline: self.deadline,
                    token,
                    task,
                    live: live.clone(),
                }))
            });
            self.live = Some(live);
        }
        park_current();
        Poll::Pending
    }
}

impl Drop for SleepUntil {
    fn drop(&mut self) {
        if let Some(live) = &self.live {
            live.set(false);
        }
    }
}

/// The task being polled on this thread (None outside of a task).
#[inline]
pub fn current_task() -> Option<TaskId> {
    CURRENT_TASK.with(|c| c.get())
}

/// Marks the running task as waiting for an explicit wake-up: the executor
/// will not poll it again until [`Executor::wake`] names it.
#[inline]
pub fn park_current() {
    PARKED.with(|p| p.set(true));
}

/// A future that yields once: the task goes to the back of the ready queue.
pub fn yield_now() -> YieldNow {
    YieldNow {
        yielded: false,
        busy: false,
    }
}

/// Marks the running task's `Pending` as a busy wait: it is ready again at
/// once but waits for another task (a latch, a lock, a free frame), so
/// polling it again achieves nothing until something else happens. See
/// [`Executor::only_busy_waiters_ready`].
#[inline]
pub fn mark_busy_wait() {
    BUSY_WAIT.with(|b| b.set(true));
}

/// Yields once as a busy wait (see [`mark_busy_wait`]).
pub fn yield_busy() -> YieldNow {
    YieldNow {
        yielded: false,
        busy: true,
    }
}

/// See [`yield_now`] and [`yield_busy`].
pub struct YieldNow {
    yielded: bool,
    busy: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        if self.busy {
            mark_busy_wait();
        }
        Poll::Pending
    }
}

type BoxedTask = Pin<Box<dyn Future<Output = ()>>>;

/// One worker's tasks.
pub struct Executor {
    tasks: Vec<Option<BoxedTask>>,
    /// Per task id: parked, waiting for a wake.
    parked: Vec<bool>,
    /// Every task the last `run_ready` round polled busy-waited, and none
    /// was spawned or woken since: the ready queue holds only those
    /// waiters, and nothing they could wait for has moved.
    idle: bool,
    free_ids: Vec<TaskId>,
    ready: VecDeque<TaskId>,
    /// Tasks parked, waiting for a wake.
    parked_count: usize,
    /// Tasks that panicked; their ids are retired, never reused.
    panicked_count: usize,
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}

impl Executor {
    /// An executor with no tasks.
    pub fn new() -> Executor {
        Executor {
            tasks: Vec::new(),
            parked: Vec::new(),
            idle: false,
            free_ids: Vec::new(),
            ready: VecDeque::new(),
            parked_count: 0,
            panicked_count: 0,
        }
    }

    /// Adds a task, ready to run.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + 'static) -> TaskId {
        let boxed: BoxedTask = Box::pin(task);
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.tasks[id as usize] = Some(boxed);
                id
            }
            None => {
                self.tasks.push(Some(boxed));
                self.parked.push(false);
                (self.tasks.len() - 1) as TaskId
            }
        };
        self.ready.push_back(id);
        self.idle = false;
        id
    }

    /// Makes a parked task ready. A wake for a task that is not parked is
    /// ignored: a task with several reads in flight is woken by the first
    /// completion and may be ready or running when the next one arrives,
    /// and a task that panicked (a read it started completed afterwards)
    /// never runs again (its id is never reused).
    pub fn wake(&mut self, id: TaskId) {
        debug_assert!(
            (id as usize) < self.tasks.len(),
            "wake of unknown task {id}"
        );
        if !self.parked.get(id as usize).copied().unwrap_or(false) {
            return;
        }
        self.parked[id as usize] = false;
        self.parked_count -= 1;
        // First in line: its page was just loaded and should be used before
        // eviction can take it again.
        self.ready.push_front(id);
        self.idle = false;
    }

    /// Live tasks.
    pub fn task_count(&self) -> usize {
        self.tasks.len() - self.free_ids.len() - self.panicked_count
    }

    /// Tasks ready to run.
    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// True when tasks are ready but every one of them is busy-waiting
    /// ([`yield_busy`]) and the last round did nothing else (a task that
    /// moved may have released what a waiter polled before it waits for):
    /// polling them again only spins until another task (maybe one waiting
    /// for I/O) moves, so the worker may block for I/O.
    pub fn only_busy_waiters_ready(&self) -> bool {
        !self.ready.is_empty() && self.idle
    }

    /// Wakes the tasks whose [`sleep_until`] deadline has passed; returns
    /// how many.
    pub fn fire_timers(&mut self) -> usize {
        let mut due = Vec::new();
        TIMERS.with(|timers| {
            let mut timers = timers.borrow_mut();
            if timers.is_empty() {
                return; // every loop iteration: no clock read, no allocation
            }
            let now = Instant::now();
            while timers.peek().is_some_and(|t| t.0.deadline <= now) {
                let Reverse(timer) = timers.pop().expect("peeked");
                if timer.live.get() {
                    timer.live.set(false);
                    due.push(timer.task);
                }
            }
        });
        for &task in &due {
            self.wake(task);
        }
        due.len()
    }

    /// The earliest pending [`sleep_until`] deadline of this thread.
    pub fn next_timer(&self) -> Option<Instant> {
        TIMERS.with(|timers| {
            let mut timers = timers.borrow_mut();
            while timers.peek().is_some_and(|t| !t.0.live.get()) {
                timers.pop();
            }
            timers.peek().map(|t| t.0.deadline)
        })
    }

    /// Tasks waiting for a wake.
    pub fn parked_count(&self) -> usize {
        self.parked_count
    }

    /// Tasks that panicked so far.
    pub fn panicked_count(&self) -> usize {
        self.panicked_count
    }

    /// Polls each task that is ready now once (tasks that yield are polled
    /// again in the next round, after the loop has done its I/O work).
    /// Returns how many were polled. A task that panics is dropped (whoever
    /// waits for its result gets an error from the dropped reply) and the
    /// other tasks go on; its id is retired, because a read it started may
    /// still complete and name it.
    pub fn run_ready(&mut self) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        let round = self.ready.len();
        let mut progress = false;
        for _ in 0..round {
            let Some(id) = self.ready.pop_front() else {
                break;
            };
            let Some(task) = self.tasks[id as usize].as_mut() else {
                continue;
            };
            CURRENT_TASK.with(|c| c.set(Some(id)));
            PARKED.with(|p| p.set(false));
            BUSY_WAIT.with(|b| b.set(false));
            let poll = std::panic::catch_unwind(AssertUnwindSafe(|| task.as_mut().poll(&mut cx)));
            CURRENT_TASK.with(|c| c.set(None));
            match poll {
                Ok(Poll::Ready(())) => {
                    self.tasks[id as usize] = None;
                    self.free_ids.push(id);
                    progress = true;
                }
                Ok(Poll::Pending) if PARKED.with(|p| p.get()) => {
                    self.parked[id as usize] = true;
                    self.parked_count += 1;
                    progress = true;
                }
                Ok(Poll::Pending) => {
                    progress |= !BUSY_WAIT.with(|b| b.get());
                    self.ready.push_back(id);
                }
                Err(_panic) => {
                    // The panic hook has printed the message. Dropping the
                    // future may panic again: that one is not caught.
                    self.tasks[id as usize] = None;
                    self.panicked_count += 1;
                    progress = true;
                }
            }
        }
        // The tasks ready now are the ones this round put back (spawns and
        // wakes come between rounds and clear `idle`).
        self.idle = !progress;
        round
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn sleeping_tasks_wake_at_their_deadlines_in_order() {
        let mut exec = Executor::new();
        let log = Rc::new(std::cell::RefCell::new(Vec::new()));
        let start = Instant::now();
        for (i, ms) in [(0u32, 30u64), (1, 10), (2, 20)] {
            let log = log.clone();
            exec.spawn(async move {
                sleep_until(start + std::time::Duration::from_millis(ms)).await;
                log.borrow_mut().push(i);
            });
        }
        exec.run_ready();
        assert_eq!(exec.parked_count(), 3);
        assert_eq!(exec.ready_count(), 0);
        let mut rounds = 0;
        while exec.task_count() > 0 {
            let next = exec.next_timer().expect("a timer is pending");
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            exec.fire_timers();
            exec.run_ready();
            rounds += 1;
            assert!(rounds < 100, "timers never fired");
        }
        assert_eq!(*log.borrow(), vec![1, 2, 0]);
        assert!(start.elapsed() >= std::time::Duration::from_millis(30));
        assert_eq!(exec.next_timer(), None);
    }

    #[test]
    fn tasks_yield_park_and_finish() {
        let mut exec = Executor::new();
        let log = Rc::new(std::cell::RefCell::new(Vec::new()));
        for i in 0..3 {
            let log = log.clone();
            exec.spawn(async move {
                log.borrow_mut().push((i, 0));
                yield_now().await;
                log.borrow_mut().push((i, 1));
            });
        }
        let parked_log = log.clone();
        let parked = exec.spawn(async move {
            let mut first = true;
            std::future::poll_fn(|_| {
                if first {
                    first = false;
                    park_current();
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            parked_log.borrow_mut().push((9, 9));
        });
        exec.run_ready();
        assert_eq!(exec.parked_count(), 1);
        assert_eq!(exec.ready_count(), 3, "yielded tasks are ready again");
        exec.run_ready();
        assert_eq!(exec.task_count(), 1, "only the parked task is left");
        assert_eq!(exec.run_ready(), 0, "a parked task is not polled");
        exec.wake(parked);
        exec.run_ready();
        assert_eq!(exec.task_count(), 0);
        let log = log.borrow();
        assert_eq!(log.len(), 7);
        assert_eq!(log[..3], [(0, 0), (1, 0), (2, 0)], "round robin");
        assert_eq!(*log.last().unwrap(), (9, 9));
        // Task ids are reused.
        let id = exec.spawn(async {});
        assert!(id < 4);
    }

    #[test]
    fn the_executor_tells_when_only_busy_waiters_are_ready() {
        let mut exec = Executor::new();
        let lock = Rc::new(Cell::new(true));
        let waiter_lock = lock.clone();
        exec.spawn(async move {
            while waiter_lock.get() {
                yield_busy().await;
            }
        });
        exec.spawn(async {
            yield_now().await;
        });
        assert!(!exec.only_busy_waiters_ready(), "new tasks are not waiting");
        exec.run_ready();
        assert!(
            !exec.only_busy_waiters_ready(),
            "one of the two ready tasks takes turns, it does not wait"
        );
        exec.run_ready();
        assert_eq!(exec.task_count(), 1);
        assert!(
            !exec.only_busy_waiters_ready(),
            "a task finished in the last round: the waiter may go on now"
        );
        exec.run_ready();
        assert!(exec.only_busy_waiters_ready(), "a round of waiting only");
        exec.run_ready();
        assert!(exec.only_busy_waiters_ready(), "still waiting");
        lock.set(false);
        exec.run_ready();
        assert_eq!(exec.task_count(), 0);
        assert!(!exec.only_busy_waiters_ready(), "nothing is ready");
    }

    #[test]
    fn a_panicking_task_is_dropped_and_the_others_run() {
        let mut exec = Executor::new();
        let done = Rc::new(Cell::new(0));
        let finished = done.clone();
        let parked = exec.spawn(async move {
            std::future::poll_fn(|_| {
                park_current();
                Poll::<()>::Pending
            })
            .await;
        });
        let doomed = exec.spawn(async {
            yield_now().await;
            panic!("task fails on purpose");
        });
        exec.spawn(async move {
            yield_now().await;
            yield_now().await;
            finished.set(finished.get() + 1);
        });
        for _ in 0..4 {
            exec.run_ready();
        }
        assert_eq!(done.get(), 1, "the other task finished");
        assert_eq!(exec.panicked_count(), 1);
        assert_eq!(exec.task_count(), 1, "only the parked task is left");
        // A late wake of the panicked task is ignored; its id is not reused.
        exec.wake(doomed);
        assert_eq!(exec.ready_count(), 0);
        assert_ne!(exec.spawn(async {}), doomed);
        assert_eq!(exec.parked_count(), 1);
        exec.wake(parked);
        assert_eq!(exec.ready_count(), 2);
    }

    #[test]
    fn a_wake_of_a_task_that_is_not_parked_is_ignored() {
        let mut exec = Executor::new();
        let polls = Rc::new(Cell::new(0));
        let counted = polls.clone();
        // Parks twice, as a task waiting for two reads does.
        let id = exec.spawn(async move {
            std::future::poll_fn(|_| {
                counted.set(counted.get() + 1);
                if counted.get() < 3 {
                    park_current();
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
        });
        exec.run_ready();
        assert_eq!(exec.parked_count(), 1);
        // Two completions before the task runs again: one wake counts.
        exec.wake(id);
        exec.wake(id);
        assert_eq!(exec.ready_count(), 1, "queued once");
        assert_eq!(exec.parked_count(), 0);
        exec.run_ready();
        assert_eq!(polls.get(), 2);
        assert_eq!(exec.parked_count(), 1, "parked again");
        exec.wake(id);
        exec.run_ready();
        assert_eq!(exec.task_count(), 0);
        // A wake after the task finished changes nothing.
        exec.wake(id);
        assert_eq!((exec.ready_count(), exec.parked_count()), (0, 0));
    }
}
