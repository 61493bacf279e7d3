//! The retry loop: [`Retry`], the future returned by [`RetryPolicy::retry`].
//!
//! The loop runs the operation with the attempt number (1-based), and after a failure either
//! returns that error (attempts exhausted, the predicate said no, a limit hit) or waits and
//! tries again. It is a hand-written state machine rather than an `async` block so that its
//! type can be named, configured with builder methods, and cost no allocation.
//!
//! Where each question is answered:
//! - `mod.rs`: the [`Retry`] type, its builder methods, and what a loop counts (`Progress`).
//! - `future.rs`: the loop's states and its `poll`, side by side.
//! - `decide.rs`: what follows an attempt — the rules, written once for `Retry` and for the
//!   `#[retry]` driver.
//! - `limits.rs`: deadline, attempt timeout and cancellation, and all the type-level
//!   machinery that lets a loop without limits return the operation's own error type.
//! - `hooks.rs`: the caller's predicate, observer, hint reader and the operation itself.
//! - `protect.rs`: the shared retry budget and circuit breaker, as the loop consults them,
//!   and the builder methods that add them.
//! - `driver.rs`: the plain loop behind `#[retry]`; `error.rs`: [`RetryError`] and
//!   [`LimitExceeded`].
//! - `value.rs`: retrying a value judged a failure ([`Retry::when_ok`]); `adjust.rs`: a hook
//!   on every computed wait ([`Retry::adjust`]); `summary.rs`: what a finished loop did
//!   ([`Retry::summarize`]); `blocking.rs`: the same loop for blocking code
//!   ([`RetryPolicy::retry_blocking`], [`Retry::call`]).

mod adjust;
mod blocking;
mod decide;
mod driver;
mod error;
mod future;
mod hooks;
mod limits;
mod metered;
mod protect;
mod stops;
mod summary;
mod value;

use std::future::Future;
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::backoff::FromPolicy;
use crate::policy::{Plan, RetryPolicy};
use crate::schedule::{Follow, Kept, Schedule};
use crate::time::Clock;

pub use adjust::Adjusted;
pub use blocking::Blocking;
#[doc(hidden)]
pub use blocking::{Inline, Preemptible};
#[doc(hidden)]
pub use driver::{
    AsBreaker, AsBudget, Attempt, Driver, DriverGuard, DriverLimits, FromCircuitOpen, FromLimit,
    WithLimits,
};
pub use error::{ChainedRetryError, LimitExceeded, RetryError};
use future::State;
pub use hooks::{
    Always, Hooks, LoopHooks, NamedOp, NoHint, OnRetry, Operation, RetryAfter, ShouldRetry, Silent,
};

pub(crate) use limits::Timer;
#[doc(hidden)]
pub use limits::{IntoLimited, Memory, TimerSlot};
pub use limits::{Limited, Limits, Unlimited};
pub use protect::Unprotected;
pub use protect::{
    BreakerSlot, BudgetSlot, Chosen, Counts, Ends, EveryError, Handle, IntoProtected, NoBreaker,
    NoBudget, Protected, Protection, Slot, Typed,
};
pub use stops::{EarlyStop, LoopStops};
pub use summary::{RetrySummary, Summarized};
pub use value::WhenOk;
#[doc(hidden)]
pub use value::{JudgeOk, Unjudged};

/// The counter and memories of one loop. Kept small: it lives inside every retry future,
/// next to the policy's `Plan`.
#[derive(Debug)]
struct Progress<M, K> {
    /// The number of the attempt running or last run (0 before the first).
    attempt: u32,
    /// What the loop's schedule needs kept (its generator, the previous wait): see
    /// [`Follow::Kept`].
    kept: K,
    /// What the loop's limits need remembered: see [`Memory`].
    memory: M,
}

impl<M, K> Progress<M, K> {
    /// A loop's start under `policy`, following `B`: its plan and a fresh progress.
    #[inline]
    fn start<E, C, B>(policy: RetryPolicy<C>) -> (Plan<C>, Self)
    where
        M: Memory<E>,
        B: Follow<E, Kept = K>,
    {
        let (plan, start) = policy.into_parts();
        let progress = Progress {
            attempt: 0,
            kept: B::kept(start),
            memory: M::empty(),
        };
        (plan, progress)
    }

    /// The same loop, not started yet, remembering what other limits need.
    fn remembering<E, M2: Memory<E>>(self) -> Progress<M2, K> {
        Progress {
            attempt: self.attempt,
            kept: self.kept,
            memory: M2::empty(),
        }
    }

    /// The same loop, not started yet, following a schedule that keeps `K2`.
    fn following<K2>(self, switch: impl FnOnce(K) -> K2) -> Progress<M, K2> {
        Progress {
            attempt: self.attempt,
            kept: switch(self.kept),
            memory: self.memory,
        }
    }

    /// The loop decided to wait `delay`: what the schedule and the limits keep of it.
    #[inline]
    fn waited<E>(&mut self, delay: Duration)
    where
        M: Memory<E>,
        K: Kept,
    {
        metered::retried();
        self.kept.waited(delay);
        self.memory.waited(delay);
    }
}

/// What a loop under stops `S` remembers for its limits.
type MemoryOf<S, E> = <<S as LoopStops>::Limits as Limits>::Memory<E>;
/// What a loop with hooks `K` keeps for its schedule.
type KeptOf<K, E> = <<K as LoopHooks<E>>::Schedule as Follow<E>>::Kept;
/// The timer racing each attempt of a loop under stops `S` on clock `C`.
type TimerOf<S, C> = <<S as LoopStops>::Limits as Limits>::Timer<<C as Clock>::Sleep>;
/// What a loop under stops `S` resolves to.
type OutputOf<S, T, E> = <<S as LoopStops>::Limits as Limits>::Output<T, E>;
/// The limits that a loop under limits `L` has once a deadline, a timeout or a signal is
/// added.
type LimitedBy<L> = Limited<<L as IntoLimited>::Signal>;

pin_project! {
    /// A retry loop in progress: the future returned by [`RetryPolicy::retry`].
    ///
    /// Resolves to `Result<T, E>` — the value, or the **last** error — until a limit is added
    /// with [`deadline`](Retry::deadline), [`attempt_timeout`](Retry::attempt_timeout) or
    /// [`cancel_on`](Retry::cancel_on); then to `Result<T, RetryError<E>>`.
    ///
    /// Dropping it cancels the loop: no work is left running in the background. A loop around
    /// blocking code ([`RetryPolicy::retry_blocking`]) is run with [`call`](Retry::call)
    /// instead of `.await`.
    #[must_use = "a retry loop does nothing unless `.await`ed"]
    pub struct Retry<Op, Fut, E, C: Clock, K: LoopHooks<E> = Hooks, S: LoopStops = EarlyStop> {
        plan: Plan<C>,
        op: Op,
        hooks: K,
        progress: Progress<MemoryOf<S, E>, KeptOf<K, E>>,
        #[pin]
        stops: S,
        #[pin]
        state: State<Fut, C::Sleep, TimerOf<S, C>>,
    }
}

impl<C: Clock> RetryPolicy<C> {
    /// Retries `op` under this policy. `op` receives the attempt number, starting at 1.
    ///
    /// The returned future resolves to the operation's value or its **last** error; configure
    /// it first with [`Retry::when`], [`Retry::notify`], [`Retry::retry_after`],
    /// [`Retry::deadline`] and friends.
    ///
    /// ```
    /// use retry_toolkit::RetryPolicy;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let result: Result<(), String> = RetryPolicy::DEFAULT
    ///     .retry(|attempt| async move { Err(format!("attempt {attempt} failed")) })
    ///     .await;
    /// assert_eq!(result.unwrap_err(), "attempt 3 failed");
    /// # }
    /// ```
    #[inline]
    pub fn retry<Op, Fut, T, E>(&self, op: Op) -> Retry<Op, Fut, E, C>
    where
        C: Clock + Clone,
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        Retry::new(self.clone(), op)
    }

    /// Retries `op`, an [`Operation`] of a type of its own, under this policy: the same loop
    /// as [`retry`](RetryPolicy::retry), for adapters whose future type must be named.
    ///
    /// A closure's type has no name, so a loop around one cannot be the associated `Future`
    /// type of a trait impl (a tower `Service`, say) without boxing it. An adapter implements
    /// [`Operation`] for a struct of its own instead, and its loop is then a nameable
    /// `Retry<MyOperation, …>`.
    ///
    /// ```
    /// use std::future::{Ready, ready};
    /// use retry_toolkit::{NamedOp, Operation, Retry, RetryPolicy};
    ///
    /// /// Fails until attempt `succeed_at`.
    /// struct Flaky { succeed_at: u32 }
    ///
    /// impl Operation for Flaky {
    ///     type Attempt = Ready<Result<u32, String>>;
    ///     fn start(&mut self, attempt: u32) -> Self::Attempt {
    ///         ready(if attempt < self.succeed_at { Err(format!("try {attempt}")) } else { Ok(attempt) })
    ///     }
    /// }
    ///
    /// // A type that a trait impl can name.
    /// type FlakyLoop = Retry<NamedOp<Flaky>, Ready<Result<u32, String>>, String, retry_toolkit::DefaultClock>;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let run: FlakyLoop = RetryPolicy::DEFAULT.retry_operation(Flaky { succeed_at: 2 });
    /// assert_eq!(run.await, Ok(2));
    /// # }
    /// ```
    #[inline]
    pub fn retry_operation<Op, T, E>(&self, op: Op) -> Retry<NamedOp<Op>, Op::Attempt, E, C>
    where
        C: Clock + Clone,
        Op: Operation,
        Op::Attempt: Future<Output = Result<T, E>>,
    {
        Retry::new(self.clone(), NamedOp(op))
    }

    /// [`retry`](RetryPolicy::retry) (a closure) or [`retry_operation`](RetryPolicy::retry_operation)
    /// (a [`NamedOp`]) with its [`Hooks`] and its [`EarlyStop`] given at once, for adapters
    /// that set all of them on every call (an HTTP client's middleware): each builder method
    /// moves the whole loop, and a loop around a large operation (a request and its spare
    /// copy) would pay for each move on its success path.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::{EarlyStop, FromPolicy, Hooks, Limited, NoHint, RetryError, RetryPolicy, Silent};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let hooks = Hooks::new(FromPolicy, |e: &&str, _| *e == "503", Silent, NoHint);
    /// let stops = EarlyStop::new(
    ///     Limited::new(Some(Duration::from_secs(5)), None::<std::future::Pending<()>>),
    ///     retry_toolkit::Unprotected,
    /// );
    /// let result: Result<(), RetryError<&str>> = RetryPolicy::DEFAULT
    ///     .retry_with(|_| async { Err("404") }, hooks, stops)
    ///     .await;
    /// assert!(matches!(result, Err(RetryError::Operation("404"))));
    /// # }
    /// ```
    #[inline]
    pub fn retry_with<Op, T, E, K, S>(
        &self,
        op: Op,
        hooks: K,
        stops: S,
    ) -> Retry<Op, Op::Attempt, E, C, K, S>
    where
        C: Clock + Clone,
        Op: Operation,
        Op::Attempt: Future<Output = Result<T, E>>,
        K: LoopHooks<E>,
        S: LoopStops,
    {
        let (plan, progress) = Progress::start::<E, C, K::Schedule>(self.clone());
        Retry {
            plan,
            op,
            hooks,
            progress,
            stops,
            state: State::Start,
        }
    }
}

impl<Op, Fut, E, C: Clock> Retry<Op, Fut, E, C> {
    #[inline]
    pub(crate) fn new(policy: RetryPolicy<C>, op: Op) -> Self {
        let (plan, progress) = Progress::start::<E, C, FromPolicy>(policy);
        Retry {
            plan,
            op,
            hooks: Hooks::new(FromPolicy, Always, Silent, NoHint),
            progress,
            stops: EarlyStop::new(Unlimited, Unprotected),
            state: State::Start,
        }
    }
}

impl<Op, Fut, E, C: Clock, K: LoopHooks<E>> Retry<Op, Fut, E, C, K> {
    /// A loop with all four hooks given at once, for adapters inside the crate (the retry
    /// middleware) whose hooks are not closures.
    #[cfg(feature = "middleware")]
    pub(crate) fn with_every_hook(policy: RetryPolicy<C>, op: Op, hooks: K) -> Self {
        let (plan, progress) = Progress::start::<E, C, K::Schedule>(policy);
        Retry {
            plan,
            op,
            hooks,
            progress,
            stops: EarlyStop::new(Unlimited, Unprotected),
            state: State::Start,
        }
    }
}

// The return types name what each builder changes: one hook.
impl<Op, Fut, T, E, C, B, W, N, H, S> Retry<Op, Fut, E, C, Hooks<B, W, N, H>, S>
where
    Op: Operation<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    B: Follow<E>,
    S: LoopStops,
{
    /// Retries only errors for which `predicate(&error, next_attempt)` is true.
    ///
    /// Consulted only when another attempt would follow: never after the final one. `false`
    /// stops at once, without waiting, and returns that error.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// #[derive(Debug, PartialEq)]
    /// enum ApiError { Busy, NotFound }
    ///
    /// let result: Result<(), ApiError> = retry_toolkit::RetryPolicy::DEFAULT.retry(|attempt| async move {
    ///     Err(if attempt == 1 { ApiError::Busy } else { ApiError::NotFound })
    /// })
    /// .when(|e, _next_attempt| *e == ApiError::Busy)
    /// .await;
    /// assert_eq!(result, Err(ApiError::NotFound)); // attempt 2; not retried
    /// # }
    /// ```
    pub fn when<F>(self, predicate: F) -> Retry<Op, Fut, E, C, Hooks<B, F, N, H>, S>
    where
        F: FnMut(&E, u32) -> bool,
    {
        self.with_hooks(|_, notify, hint| (predicate, notify, hint))
    }

    /// Calls `observer(&error, failed_attempt, delay)` before each wait.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let mut seen = Vec::new();
    /// let _: Result<(), &str> = retry_toolkit::RetryPolicy::DEFAULT.retry(|_| async { Err("down") })
    ///     .notify(|e, attempt, delay| seen.push((attempt, *e, delay)))
    ///     .await;
    /// assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2]); // 3 attempts, 2 waits
    /// # }
    /// ```
    pub fn notify<F>(self, observer: F) -> Retry<Op, Fut, E, C, Hooks<B, W, F, H>, S>
    where
        F: FnMut(&E, u32, Duration),
    {
        self.with_hooks(|when, _, hint| (when, observer, hint))
    }

    /// Reads a server's hint from each error: `Some(wait)` replaces the computed delay.
    ///
    /// A hint longer than the policy's [`max_retry_after`](RetryPolicy::max_retry_after), or
    /// than what is left of the deadline, ends the loop with that error at once: a server must
    /// not be able to park a client indefinitely.
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// #[derive(Debug)]
    /// struct Throttled { retry_after: Duration }
    ///
    /// let mut waits = Vec::new();
    /// let _: Result<(), Throttled> = retry_toolkit::RetryPolicy::DEFAULT.retry(|_| async {
    ///     Err(Throttled { retry_after: Duration::from_secs(2) })
    /// })
    /// .retry_after(|e| Some(e.retry_after))
    /// .notify(|_, _, delay| waits.push(delay))
    /// .await;
    /// assert_eq!(waits, [Duration::from_secs(2); 2]);
    /// # }
    /// ```
    pub fn retry_after<F>(self, hint: F) -> Retry<Op, Fut, E, C, Hooks<B, W, N, F>, S>
    where
        F: FnMut(&E) -> Option<Duration>,
    {
        self.with_hooks(|when, notify, _| (when, notify, hint))
    }

    /// Replaces the policy's schedule with `backoff` (e.g. an
    /// [`ExponentialBackoff`](crate::ExponentialBackoff), a [`Constant`](crate::Constant)).
    /// Its delays are still clamped to the policy's `max_delay`. The loop's generator (and
    /// its seed) carries over to a schedule that draws.
    pub fn backoff<B2: Schedule<E>>(
        self,
        backoff: B2,
    ) -> Retry<Op, Fut, E, C, Hooks<B2, W, N, H>, S> {
        let progress = self
            .progress
            .following(|kept| B2::kept_after(kept.into_rng()));
        let Hooks {
            when, notify, hint, ..
        } = self.hooks;
        Retry {
            hooks: Hooks::new(backoff.within(self.plan.max_delay()), when, notify, hint),
            plan: self.plan,
            op: self.op,
            progress,
            stops: self.stops,
            state: State::Start,
        }
    }

    /// Replaces the hooks, keeping everything else; every hook builder is one call of this.
    fn with_hooks<W2, N2, H2>(
        self,
        replace: impl FnOnce(W, N, H) -> (W2, N2, H2),
    ) -> Retry<Op, Fut, E, C, Hooks<B, W2, N2, H2>, S> {
        let Hooks {
            schedule,
            when,
            notify,
            hint,
        } = self.hooks;
        let (when, notify, hint) = replace(when, notify, hint);
        Retry {
            plan: self.plan,
            op: self.op,
            hooks: Hooks::new(schedule, when, notify, hint),
            progress: self.progress,
            stops: self.stops,
            state: State::Start,
        }
    }
}

impl<Op, Fut, E, C: Clock, K: LoopHooks<E>, S: LoopStops> Retry<Op, Fut, E, C, K, S> {
    /// Runs this loop on `clock` instead of the policy's.
    pub fn clock<C2: Clock>(self, clock: C2) -> Retry<Op, Fut, E, C2, K, S> {
        Retry {
            plan: self.plan.with_clock(clock),
            op: self.op,
            hooks: self.hooks,
            progress: self.progress,
            stops: self.stops,
            state: State::Start,
        }
    }

    /// Seeds this loop's jitter, for a reproducible sequence of delays.
    pub fn seed(mut self, seed: u64) -> Self {
        self.progress.kept.seed(seed);
        self
    }
}

// The return types name what each builder changes: the limits (`protect.rs`: the
// protection).
impl<Op, Fut, T, E, C, K, L, G> Retry<Op, Fut, E, C, K, EarlyStop<L, G>>
where
    Op: Operation<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    K: LoopHooks<E>,
    L: Limits,
{
    fn limited<S: Future>(
        self,
        f: impl FnOnce(L) -> Limited<S>,
    ) -> Retry<Op, Fut, E, C, K, EarlyStop<Limited<S>, G>> {
        // Limits remember more (start instant, last error); nothing has run yet.
        self.protected(f, |g| g)
    }

    /// The same loop under other limits and protection (see `protect.rs`); nothing has run.
    pub(crate) fn protected<L2: Limits, G2>(
        self,
        limits: impl FnOnce(L) -> L2,
        protection: impl FnOnce(G) -> G2,
    ) -> Retry<Op, Fut, E, C, K, EarlyStop<L2, G2>> {
        let EarlyStop { limits: l, guard } = self.stops;
        Retry {
            plan: self.plan,
            op: self.op,
            hooks: self.hooks,
            progress: self.progress.remembering::<E, _>(),
            stops: EarlyStop::new(limits(l), protection(guard)),
            state: State::Start,
        }
    }

    /// Gives the whole loop — attempts and waits — a time budget on the loop's clock.
    ///
    /// The running attempt is dropped when the budget runs out, and a wait that would cross it
    /// is not started. The output becomes `Result<T, RetryError<E>>`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::RetryError;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let result: Result<(), _> = retry_toolkit::RetryPolicy::DEFAULT.retry(|_| std::future::pending::<Result<(), ()>>())
    ///     .deadline(Duration::from_millis(250))
    ///     .await;
    /// assert!(matches!(result, Err(RetryError::DeadlineExceeded { attempts: 1, last: None })));
    /// # }
    /// ```
    pub fn deadline(self, budget: Duration) -> Retry<Op, Fut, E, C, K, EarlyStop<LimitedBy<L>, G>>
    where
        L: IntoLimited,
    {
        self.limited(|l| l.into_limited().with_deadline(budget))
    }

    /// Drops an attempt that runs longer than `timeout` and retries it like a failure, with
    /// the usual backoff, while attempts remain — as `#[retry(attempt_timeout_ms = …)]` does.
    /// The last attempt timing out ends the loop with [`RetryError::AttemptTimeout`]. To stop
    /// at the first hung attempt, give the whole loop a [`deadline`](Retry::deadline) instead.
    ///
    /// A timed-out attempt has no error value, so [`when`](Retry::when) and
    /// [`notify`](Retry::notify) are not called for it; the retry is reported as a `tracing`
    /// event ("attempt timed out; retrying"). To treat timeouts as errors of your own type
    /// (seen by `when` and `notify`), time the operation inside `op` instead, e.g. with
    /// `tokio::time::timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let result = retry_toolkit::RetryPolicy::DEFAULT.retry(|attempt| async move {
    ///     if attempt == 1 {
    ///         std::future::pending::<()>().await; // hangs
    ///     }
    ///     Ok::<_, ()>(attempt)
    /// })
    /// .attempt_timeout(Duration::from_millis(100))
    /// .await;
    /// assert_eq!(result, Ok(2));
    /// # }
    /// ```
    pub fn attempt_timeout(
        self,
        timeout: Duration,
    ) -> Retry<Op, Fut, E, C, K, EarlyStop<LimitedBy<L>, G>>
    where
        L: IntoLimited,
        Op: Preemptible,
    {
        self.limited(|l| l.into_limited().with_attempt_timeout(timeout))
    }

    /// Ends the loop with [`RetryError::Cancelled`] as soon as `signal` completes — during an
    /// attempt (which is dropped) or a wait (which is cut short).
    ///
    /// Any future works: `token.cancelled_owned()` of a tokio-util `CancellationToken`, a
    /// oneshot receiver, a `Notify`.
    ///
    /// ```
    /// use retry_toolkit::RetryError;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    /// drop(cancel); // already cancelled
    /// let result = retry_toolkit::RetryPolicy::DEFAULT.retry(|_| async { Err::<(), _>("down") })
    ///     .cancel_on(cancelled)
    ///     .await;
    /// assert!(matches!(result, Err(RetryError::Cancelled { attempts: 0, .. })));
    /// # }
    /// ```
    pub fn cancel_on<S: Future>(
        self,
        signal: S,
    ) -> Retry<Op, Fut, E, C, K, EarlyStop<Limited<S>, G>>
    where
        L: IntoLimited,
    {
        self.limited(|l| l.into_limited().with_cancel(signal))
    }
}
