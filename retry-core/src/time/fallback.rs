//! A sleep that needs no async runtime: the fallback of [`DefaultClock`](crate::DefaultClock)
//! when a retry loop runs outside tokio (under another executor, or `block_on` of a small
//! executor), or inside a tokio runtime built without its timer.
//!
//! Every such wait is an entry in one shared timer: a single thread, started on the first
//! wait and kept for the life of the process, that sleeps until the earliest deadline and
//! wakes the waits that are due. A dropped wait removes its entry, so nothing outlives it.
//! When the thread cannot be started (no memory, a thread limit), a wait does not complete
//! early: it keeps asking its executor to poll it again, tries to start the thread each time,
//! and completes once its deadline has passed.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The timer of every [`ThreadSleep`] in the process.
static TIMER: Timer = Timer::new(spawn_timer_thread);

/// Starts the thread that runs `timer`.
fn spawn_timer_thread(timer: &'static Timer) -> io::Result<()> {
    std::thread::Builder::new()
        .name("retry-core-timer".into())
        .spawn(move || timer.run())
        .map(drop)
}

/// One timer thread and its queue of deadlines.
pub(crate) struct Timer {
    state: Mutex<State>,
    /// Signalled when a wait becomes the earliest, so the thread sleeps less.
    changed: Condvar,
    /// Starts the thread; a parameter so that tests can refuse or count.
    spawn: fn(&'static Timer) -> io::Result<()>,
    /// Whether the failure to start the thread was already logged.
    warned: AtomicBool,
}

#[derive(Default)]
struct State {
    /// The waits not yet due, earliest first; the id tells equal deadlines apart.
    waits: BTreeMap<(Instant, u64), Waker>,
    next_id: u64,
    /// Whether the thread runs (it never stops once started).
    running: bool,
    /// How many threads were started: one at most, except in tests.
    started: u32,
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer").finish_non_exhaustive()
    }
}

impl Timer {
    pub(crate) const fn new(spawn: fn(&'static Timer) -> io::Result<()>) -> Self {
        Timer {
            state: Mutex::new(State {
                waits: BTreeMap::new(),
                next_id: 0,
                running: false,
                started: 0,
            }),
            changed: Condvar::new(),
            spawn,
            warned: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the thread unless it runs; `false` if it could not be started.
    fn ensure_running(&'static self, state: &mut State) -> bool {
        if state.running {
            return true;
        }
        match (self.spawn)(self) {
            Ok(()) => {
                state.running = true;
                state.started = state.started.saturating_add(1);
                true
            }
            Err(error) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        target: "retry_toolkit",
                        %error,
                        "could not start the timer thread; waits poll until their deadline instead"
                    );
                }
                false
            }
        }
    }

    /// The timer thread: wakes each wait once its deadline has passed.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = state.waits.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            if !due.is_empty() {
                drop(state);
                for waker in due {
                    // A waker that panics must not stop the timer of every other wait.
                    let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
                }
                state = self.lock();
                continue;
            }
            state = match state.waits.first_key_value() {
                Some((&(deadline, _), _)) => {
                    let timeout = deadline.saturating_duration_since(now);
                    match self.changed.wait_timeout(state, timeout) {
                        Ok((state, _)) => state,
                        Err(poisoned) => poisoned.into_inner().0,
                    }
                }
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// Completes once `duration` has passed on the wall clock (counted from its creation).
#[derive(Debug)]
pub(crate) struct ThreadSleep {
    /// `None` when the deadline is beyond what an [`Instant`] can hold: never.
    deadline: Option<Instant>,
    /// The id of this wait's entry in the timer, while it has one.
    entry: Option<u64>,
    timer: &'static Timer,
}

impl ThreadSleep {
    pub(crate) fn new(duration: Duration) -> Self {
        Self::on(&TIMER, duration)
    }

    pub(crate) fn on(timer: &'static Timer, duration: Duration) -> Self {
        Self {
            deadline: Instant::now().checked_add(duration),
            entry: None,
            timer,
        }
    }
}

impl Future for ThreadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(deadline) = self.deadline else {
            // Hundreds of years away or more: never, and nothing will wake it.
            return Poll::Pending;
        };
        if Instant::now() >= deadline {
            self.deregister();
            return Poll::Ready(());
        }
        let timer = self.timer;
        let mut state = timer.lock();
        match self.entry {
            Some(id) => match state.waits.get_mut(&(deadline, id)) {
                // The timer thread took the entry out: due.
                None => {
                    self.entry = None;
                    return Poll::Ready(());
                }
                Some(waker) => {
                    if !waker.will_wake(cx.waker()) {
                        *waker = cx.waker().clone();
                    }
                }
            },
            None => {
                let id = state.next_id;
                state.next_id = state.next_id.wrapping_add(1);
                state.waits.insert((deadline, id), cx.waker().clone());
                self.entry = Some(id);
                let earliest = state.waits.first_key_value().map(|(key, _)| *key);
                if earliest == Some((deadline, id)) {
                    timer.changed.notify_one();
                }
            }
        }
        if !timer.ensure_running(&mut state) {
            // No thread, no timer: never a shorter wait. Poll again (and retry the thread)
            // until the deadline has passed.
            drop(state);
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl ThreadSleep {
    /// Takes this wait's entry out of the timer, if it still has one.
    fn deregister(&mut self) {
        if let (Some(id), Some(deadline)) = (self.entry.take(), self.deadline) {
            self.timer.lock().waits.remove(&(deadline, id));
        }
    }
}

impl Drop for ThreadSleep {
    fn drop(&mut self) {
        self.deregister();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    const HOUR: Duration = Duration::from_secs(3_600);

    fn pending_count(timer: &Timer) -> usize {
        timer.lock().waits.len()
    }

    fn started(timer: &Timer) -> u32 {
        timer.lock().started
    }

    /// A timer whose thread is never really started (its entries never fire): for tests of
    /// its structure, which never wait in wall time.
    fn counting_timer() -> &'static Timer {
        Box::leak(Box::new(Timer::new(|_| Ok(()))))
    }

    fn refusing_timer() -> &'static Timer {
        Box::leak(Box::new(Timer::new(|_| {
            Err(io::Error::new(io::ErrorKind::OutOfMemory, "no threads"))
        })))
    }

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn dropped_waits_leave_the_timer_and_share_one_thread() {
        let timer = counting_timer();
        let mut cx = Context::from_waker(Waker::noop());
        let mut waits: Vec<ThreadSleep> = (0..200).map(|_| ThreadSleep::on(timer, HOUR)).collect();
        for wait in &mut waits {
            assert!(Pin::new(wait).poll(&mut cx).is_pending());
        }
        assert_eq!(pending_count(timer), 200);
        assert_eq!(started(timer), 1, "one thread for every wait");
        drop(waits);
        assert_eq!(
            pending_count(timer),
            0,
            "a dropped wait leaves no entry behind"
        );
    }

    #[test]
    fn a_wait_polled_again_keeps_one_entry() {
        let timer = counting_timer();
        let mut cx = Context::from_waker(Waker::noop());
        let mut wait = ThreadSleep::on(timer, HOUR);
        for _ in 0..3 {
            assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        }
        assert_eq!(pending_count(timer), 1);
    }

    #[test]
    fn a_wait_whose_entry_the_timer_took_is_done() {
        let timer = counting_timer();
        let mut cx = Context::from_waker(Waker::noop());
        let mut wait = ThreadSleep::on(timer, HOUR);
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        // What the timer thread does at the deadline.
        timer.lock().waits.clear();
        assert!(Pin::new(&mut wait).poll(&mut cx).is_ready());
    }

    #[test]
    fn zero_and_endless_waits_need_no_entry() {
        let timer = counting_timer();
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            Pin::new(&mut ThreadSleep::on(timer, Duration::ZERO))
                .poll(&mut cx)
                .is_ready()
        );
        let mut endless = ThreadSleep::on(timer, Duration::MAX);
        assert!(Pin::new(&mut endless).poll(&mut cx).is_pending());
        assert_eq!(pending_count(timer), 0);
        assert_eq!(started(timer), 0);
    }

    /// Issue item 5: a wait that cannot be scheduled used to complete at once.
    #[test]
    fn item5_a_wait_without_a_timer_thread_is_never_a_zero_wait() {
        let timer = refusing_timer();
        let woken = Arc::new(CountingWaker::default());
        let waker = Waker::from(Arc::clone(&woken));
        let mut cx = Context::from_waker(&waker);
        let mut wait = ThreadSleep::on(timer, HOUR);
        for polls in 1..=3 {
            assert!(
                Pin::new(&mut wait).poll(&mut cx).is_pending(),
                "poll {polls}"
            );
            // It asks to be polled again, to retry the thread and to check its deadline.
            assert_eq!(woken.0.load(Ordering::SeqCst), polls);
        }
        drop(wait);
        assert_eq!(pending_count(timer), 0);
    }
}
