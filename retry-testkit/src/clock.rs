//! [`MockClock`]: virtual time that moves only when the code under test waits for it.
//!
//! A retry test that really sleeps is slow, and one that replaces sleeps with no-ops cannot
//! tell a 200 ms wait from a 3 s one. The mock clock keeps time as a number that starts at
//! zero: every sleep is recorded, and completes when virtual time reaches its deadline, which
//! happens at once in wall time. Every clone of a clock is a handle to the same timeline, and
//! nothing is process-global, so parallel tests each keep their own.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use retry_toolkit::{Clock, Scope};

use crate::drive::{self, Driver};
use crate::io::InFlight;

/// The latest instant virtual time can reach: a hundred years after the clock started.
///
/// Longer sleeps saturate here, so that converting virtual time to an [`Instant`] never
/// overflows (an `Instant` cannot hold `Duration::MAX`).
pub const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Virtual time for tests: sleeps finish instantly in wall time, are recorded in
/// order, and move the clock forward by exactly what was asked.
///
/// The clock implements [`retry_toolkit::Clock`], so it can be given to a policy or a single loop;
/// [`run`](MockClock::run) and [`block_on`](MockClock::block_on) also install it as the scoped
/// clock ([`Scope`]) so that loops the test cannot reach — a function expanded from
/// `#[retry]`, a loop deep inside a library — use it too. A blocking retry
/// ([`retry_blocking`](retry_toolkit::RetryPolicy::retry_blocking)) given this clock waits
/// without sleeping as well: each wait moves virtual time at once and is recorded.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Jitter, RetryPolicy};
/// use retry_testkit::MockClock;
///
/// let clock = MockClock::new();
/// let result: Result<(), &str> = clock
///     .block_on(RetryPolicy::DEFAULT.with_jitter(Jitter::None).retry(|_| async { Err("down") }))
///     .unwrap();
/// assert_eq!(result, Err("down"));
/// assert_eq!(clock.sleeps(), [Duration::from_millis(200), Duration::from_millis(400)]);
/// assert_eq!(clock.elapsed(), Duration::from_millis(600));
/// ```
#[derive(Clone)]
pub struct MockClock {
    shared: Arc<Shared>,
    seed: Option<u64>,
    idle_yields: u32,
}

/// What every handle of one clock shares.
struct Shared {
    /// The real instant that virtual time zero maps to.
    origin: Instant,
    state: Mutex<State>,
    /// The wall time virtual time zero maps to (set by `with_wall_time`, shared by clones).
    wall: Mutex<SystemTime>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    /// Virtual time since the clock was created.
    now: Duration,
    /// Sleeps waiting for time to reach their deadline, by (deadline, index in `log`): equal
    /// deadlines fire in the order the sleeps were requested.
    pending: BTreeMap<(Duration, usize), Option<Waker>>,
    /// Every sleep ever requested, in order.
    log: Vec<SleepRecord>,
}

/// One sleep requested on a [`MockClock`], as [`MockClock::sleep_log`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SleepRecord {
    /// Virtual time when the sleep was requested.
    pub start: Duration,
    /// The duration asked for.
    pub duration: Duration,
    /// How the sleep ended, if it did.
    pub status: SleepStatus,
}

/// How a recorded sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SleepStatus {
    /// Still waiting for virtual time to reach its deadline.
    Pending,
    /// Virtual time reached the deadline (`start + duration`).
    Fired,
    /// Dropped before its deadline — the loop was cancelled, or a race was won by something
    /// else — at this virtual time.
    Dropped {
        /// Virtual time of the drop.
        at: Duration,
    },
}

impl SleepRecord {
    /// The virtual time at which the sleep fires (or would have).
    pub fn deadline(&self) -> Duration {
        deadline_after(self.start, self.duration)
    }
}

fn deadline_after(now: Duration, duration: Duration) -> Duration {
    now.saturating_add(duration).min(FAR_FUTURE.max(now))
}

impl Default for MockClock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MockClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MockClock")
            .field("elapsed", &state.now)
            .field("pending", &state.pending.len())
            .field("sleeps", &state.log.len())
            .field("seed", &self.seed)
            .field("idle_yields", &self.idle_yields)
            .finish()
    }
}

impl MockClock {
    /// A clock at virtual time zero, with no sleeps and no seed.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                origin: Instant::now(),
                state: Mutex::new(State::default()),
                wall: Mutex::new(SystemTime::now()),
            }),
            seed: None,
            idle_yields: drive::IDLE_YIELDS,
        }
    }

    /// This clock (the same timeline) with a jitter seed that [`run`](MockClock::run),
    /// [`block_on`](MockClock::block_on) and [`scope`](MockClock::scope) install for every
    /// retry loop inside them. Loops given a seed of their own keep theirs.
    ///
    /// ```
    /// use retry_toolkit::RetryPolicy;
    /// use retry_testkit::MockClock;
    ///
    /// let waits = |seed| {
    ///     let clock = MockClock::new().with_seed(seed);
    ///     let _ = clock.block_on(RetryPolicy::DEFAULT.retry(|_| async { Err::<(), _>("down") }));
    ///     clock.sleeps()
    /// };
    /// assert_eq!(waits(7), waits(7)); // same seed, same timeline
    /// assert_ne!(waits(7), waits(8));
    /// ```
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// This clock (the same timeline) with [`run`](MockClock::run) yielding `yields` times to
    /// the executor, with nothing waking the future, before it moves time. The default, 16,
    /// gives a spawned task the future waits on 16 scheduler turns to answer; raise it for
    /// tasks that need more, or set 0 when the future waits on nothing but the clock.
    pub fn with_idle_yields(mut self, yields: u32) -> Self {
        self.idle_yields = yields;
        self
    }

    /// This clock (the same timeline) reading `wall` as its wall-clock time at virtual time
    /// zero; from there its wall time moves with its virtual time. By default it starts at
    /// the real time the clock was created. What an HTTP `Retry-After` date is measured
    /// from, for a loop on this clock ([`Clock::wall_now`]).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use retry_toolkit::Clock;
    /// use retry_testkit::MockClock;
    ///
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
    /// let clock = MockClock::new().with_wall_time(start);
    /// clock.advance(Duration::from_secs(3));
    /// assert_eq!(clock.wall_now(), start + Duration::from_secs(3));
    /// ```
    pub fn with_wall_time(self, wall: SystemTime) -> Self {
        *self
            .shared
            .wall
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = wall;
        self
    }

    /// The seed set with [`with_seed`](MockClock::with_seed), if any.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Virtual time since the clock was created.
    pub fn elapsed(&self) -> Duration {
        self.state().now
    }

    /// The current virtual instant, as an [`Instant`] (what [`Clock::now`] returns).
    pub fn now(&self) -> Instant {
        self.instant_at(self.elapsed())
    }

    fn instant_at(&self, elapsed: Duration) -> Instant {
        // `elapsed` never exceeds FAR_FUTURE, which every platform's Instant can hold past
        // the origin; fall back to the origin rather than panic if one cannot.
        self.shared
            .origin
            .checked_add(elapsed)
            .unwrap_or(self.shared.origin)
    }

    /// A sleep of `duration` on this clock, recorded at once; it completes when virtual time
    /// reaches `elapsed() + duration`. A zero sleep is complete from the start.
    pub fn sleep(&self, duration: Duration) -> MockSleep {
        let mut state = self.state();
        let start = state.now;
        let deadline = deadline_after(start, duration);
        let index = state.log.len();
        let status = if deadline <= start {
            SleepStatus::Fired
        } else {
            state.pending.insert((deadline, index), None);
            SleepStatus::Pending
        };
        state.log.push(SleepRecord {
            start,
            duration,
            status,
        });
        MockSleep {
            shared: Arc::clone(&self.shared),
            key: (deadline, index),
            done: false,
        }
    }

    /// The duration of every sleep requested so far, in the order requested.
    ///
    /// Every sleep counts: the waits between attempts, and also the timers that a loop with a
    /// [deadline](retry_toolkit::Retry::deadline) or an
    /// [attempt timeout](retry_toolkit::Retry::attempt_timeout) starts for each attempt. To see
    /// the waits alone in such a loop, record them with a [`Timeline`](crate::Timeline);
    /// [`sleep_log`](MockClock::sleep_log) tells timers from waits by how they ended. A
    /// blocking loop ([`call`](retry_toolkit::Retry::call)) starts no timers: its sleeps are its
    /// waits.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.state().log.iter().map(|r| r.duration).collect()
    }

    /// Every sleep requested so far, with when it started and how it ended.
    pub fn sleep_log(&self) -> Vec<SleepRecord> {
        self.state().log.clone()
    }

    /// The number of sleeps waiting for virtual time to move.
    pub fn pending(&self) -> usize {
        self.state().pending.len()
    }

    /// The virtual time at which the earliest pending sleep fires, if any is pending.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.state()
            .pending
            .keys()
            .next()
            .map(|(deadline, _)| *deadline)
    }

    /// Moves virtual time forward by `duration` in one step, firing every sleep whose
    /// deadline is reached (earliest first); returns how many fired.
    ///
    /// The tasks woken run afterwards, and see the new time. To let each of several tasks
    /// react at its own deadline, step with [`advance_to_next`](MockClock::advance_to_next)
    /// and let the tasks run between steps, or drive them with [`run`](MockClock::run).
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_testkit::MockClock;
    ///
    /// let clock = MockClock::new();
    /// let _short = clock.sleep(Duration::from_millis(10));
    /// let _long = clock.sleep(Duration::from_millis(50));
    /// assert_eq!(clock.pending(), 2);
    /// assert_eq!(clock.advance(Duration::from_millis(20)), 1);
    /// assert_eq!((clock.elapsed(), clock.pending()), (Duration::from_millis(20), 1));
    /// ```
    pub fn advance(&self, duration: Duration) -> usize {
        let wakers = {
            let mut state = self.state();
            let target = deadline_after(state.now, duration);
            let wakers = fire_until(&mut state, target);
            state.now = target;
            wakers
        };
        let fired = wakers.len();
        wakers.into_iter().flatten().for_each(Waker::wake);
        fired
    }

    /// Moves virtual time to the earliest pending deadline and fires every sleep due then;
    /// returns the new virtual time, or `None` (and leaves time alone) when nothing is
    /// pending.
    pub fn advance_to_next(&self) -> Option<Duration> {
        let (now, wakers) = {
            let mut state = self.state();
            let (deadline, _) = *state.pending.keys().next()?;
            let target = deadline.max(state.now);
            let wakers = fire_until(&mut state, target);
            state.now = target;
            (target, wakers)
        };
        wakers.into_iter().flatten().for_each(Waker::wake);
        Some(now)
    }

    /// Runs `future` with this clock (and seed, if set) installed as the [`Scope`] override,
    /// without moving time: for tasks spawned by a test whose time is driven elsewhere, by
    /// [`advance`](MockClock::advance) or by a [`run`](MockClock::run) on the same clock.
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        let scope = Scope::new().clock(self.clone());
        match self.seed {
            Some(seed) => scope.seed(seed),
            None => scope,
        }
        .run(future)
    }

    /// Runs `future` on this clock inside an async runtime and returns its output.
    ///
    /// The clock is installed as the [`Scope`] override (see [`scope`](MockClock::scope)),
    /// and virtual time advances by itself: whenever the future is waiting and nothing has
    /// woken it, the runner first yields to the executor
    /// ([a few times](MockClock::with_idle_yields)) — so that tasks it waits on get to run —
    /// then moves time to the next pending deadline. Time never moves while the future has
    /// work to do.
    ///
    /// On a current-thread runtime (the default of `#[tokio::test]`) this is deterministic.
    /// On a multi-thread runtime, time may move while a task on another worker is still
    /// busy; drive such tests by hand with [`advance`](MockClock::advance).
    ///
    /// **Waiting on the outside world.** The runner cannot see what else the future waits
    /// for. If it waits on real I/O (a socket, a child process, a channel fed by a thread)
    /// for longer than the idle yields take, virtual time moves on to the next mock sleep —
    /// for example a loop's deadline timer, which then fires although only microseconds of
    /// real time passed. Keep real I/O out of futures run this way, or use
    /// [`scope`](MockClock::scope) and move time yourself with
    /// [`advance`](MockClock::advance).
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::{Jitter, RetryOptions};
    /// use retry_testkit::MockClock;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), retry_toolkit::OptionsError> {
    /// let policy = RetryOptions::new().with_max_attempts(4).with_jitter(Jitter::None).resolve()?;
    /// let clock = MockClock::new();
    /// let out: Result<u32, String> = clock
    ///     .run(policy.retry(|n| async move { if n < 4 { Err(format!("try {n}")) } else { Ok(n) } }))
    ///     .await;
    /// assert_eq!(out, Ok(4));
    /// assert_eq!(clock.elapsed(), Duration::from_millis(200 + 400 + 800));
    /// # Ok(()) }
    /// ```
    pub fn run<F: Future>(&self, future: F) -> impl Future<Output = F::Output> + use<F> {
        Driver::new(self.clone(), self.scope(future), self.idle_yields)
    }

    /// Runs `future` on this clock like [`run`](MockClock::run), but moves time only when
    /// the future is idle *and* `io` has nothing in flight: how a test with real sockets runs
    /// on virtual time.
    ///
    /// The test's server takes an [`InFlight`] guard while it has work under way (a request
    /// accepted, an answer being written) and drops it when it is done or means to stall.
    /// While any guard is alive time stands still, so an attempt timeout fires only when the
    /// server really went quiet, never because a reply was still on its way through the
    /// socket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_testkit::{InFlight, MockClock};
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
    /// let (clock, io) = (MockClock::new(), InFlight::new());
    /// let (mut client, mut server) = tokio::io::duplex(64);
    /// // The "server" answers from another task; its guard holds time until it has.
    /// let guard = io.guard();
    /// tokio::spawn(async move {
    ///     let mut request = [0u8; 4];
    ///     let _ = server.read_exact(&mut request).await;
    ///     let _ = server.write_all(b"pong").await;
    ///     drop(guard);
    /// });
    /// let call = {
    ///     let clock = clock.clone();
    ///     async move {
    ///         client.write_all(b"ping").await?;
    ///         let mut answer = [0u8; 4];
    ///         tokio::select! {
    ///             read = client.read_exact(&mut answer) => read.map(|_| answer),
    ///             () = clock.sleep(Duration::from_secs(1)) => Err(std::io::ErrorKind::TimedOut.into()),
    ///         }
    ///     }
    /// };
    /// assert_eq!(&clock.run_watching(&io, call).await?, b"pong");
    /// assert_eq!(clock.elapsed(), Duration::ZERO); // the timeout never fired
    /// # Ok(()) }
    /// ```
    pub fn run_watching<F: Future>(
        &self,
        io: &InFlight,
        future: F,
    ) -> impl Future<Output = F::Output> + use<F> {
        Driver::new(self.clone(), self.scope(future), self.idle_yields).watching(io.clone())
    }

    /// Runs `future` to completion on the current thread, without any async runtime, moving
    /// virtual time whenever the future waits.
    ///
    /// Nothing else runs meanwhile, so the result is fully deterministic. Use
    /// [`join_all`](crate::join_all) to run several tasks together.
    ///
    /// # Errors
    /// [`Stalled`] when the future waits for something other than this clock's sleeps (a
    /// channel no one will send on, tokio's own timer, …): nothing could ever wake it.
    pub fn block_on<F: Future>(&self, future: F) -> Result<F::Output, Stalled> {
        drive::block_on(Driver::new(self.clone(), self.scope(future), 0))
            .map_err(|()| Stalled { at: self.elapsed() })
    }
}

/// Removes every pending sleep due at or before `target`, marks it fired, and returns the
/// wakers to call once the lock is released.
fn fire_until(state: &mut State, target: Duration) -> Vec<Option<Waker>> {
    let mut wakers = Vec::new();
    while let Some(entry) = state.pending.first_entry() {
        if entry.key().0 > target {
            break;
        }
        let ((_, index), waker) = entry.remove_entry();
        if let Some(record) = state.log.get_mut(index) {
            record.status = SleepStatus::Fired;
        }
        wakers.push(waker);
    }
    wakers
}

impl Clock for MockClock {
    type Sleep = MockSleep;

    fn now(&self) -> Instant {
        MockClock::now(self)
    }

    fn sleep(&self, duration: Duration) -> MockSleep {
        MockClock::sleep(self, duration)
    }

    /// The wall time at virtual time zero ([`with_wall_time`](MockClock::with_wall_time)),
    /// plus the virtual time elapsed since.
    fn wall_now(&self) -> SystemTime {
        let start = *self
            .shared
            .wall
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        start.checked_add(self.elapsed()).unwrap_or(start)
    }

    /// Records the sleep and moves virtual time to its deadline at once, firing every sleep
    /// due by then: a blocking retry on this clock takes no wall time, and its waits appear
    /// in [`sleeps`](MockClock::sleeps) like any other.
    fn sleep_blocking(&self, duration: Duration) {
        let sleep = MockClock::sleep(self, duration);
        let deadline = sleep.deadline();
        let now = self.elapsed();
        self.advance(deadline.saturating_sub(now));
        drop(sleep);
    }
}

/// A sleep on a [`MockClock`]: completes when the clock's virtual time reaches its deadline.
///
/// Dropping it before then records it as [`SleepStatus::Dropped`].
#[must_use = "a sleep does nothing unless `.await`ed"]
pub struct MockSleep {
    shared: Arc<Shared>,
    key: (Duration, usize),
    done: bool,
}

impl MockSleep {
    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// The virtual time at which this sleep completes.
    pub fn deadline(&self) -> Duration {
        self.key.0
    }
}

impl fmt::Debug for MockSleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockSleep")
            .field("deadline", &self.key.0)
            .field("done", &self.done)
            .finish()
    }
}

impl Future for MockSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(());
        }
        let mut state = this.state();
        if state.now >= this.key.0 {
            drop(state);
            this.done = true;
            return Poll::Ready(());
        }
        if let Some(slot) = state.pending.get_mut(&this.key) {
            match slot {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        Poll::Pending
    }
}

impl Drop for MockSleep {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.state();
        if state.pending.remove(&self.key).is_some() {
            let at = state.now;
            if let Some(record) = state.log.get_mut(self.key.1) {
                record.status = SleepStatus::Dropped { at };
            }
        }
    }
}

/// [`MockClock::block_on`] found the future waiting for something no one can deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the future stalled at {at:?} of virtual time: it waits for something other than the mock \
     clock's sleeps, and nothing can wake it inside `block_on`; run it with `MockClock::run` \
     inside an async runtime if another thread or task will wake it"
)]
pub struct Stalled {
    /// Virtual time when the future stalled.
    pub at: Duration,
}
