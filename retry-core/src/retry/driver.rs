//! The loop behind `#[retry]`: one attempt per call, decided by the same rules as [`Retry`].
//!
//! [`Retry`] owns its operation, a closure called once per attempt. That shape cannot serve
//! every function body: a body that uses `&mut self` or a `&mut` argument would have to lend
//! them to every attempt's future from inside a closure, which the borrow checker refuses. So
//! for such a body the expanded function keeps a plain `loop` around it and asks a [`Driver`],
//! once per attempt, to run the body's future and say whether to stop or go on
//! ([`Driver::attempt`]). A body that borrows nothing mutably is handed over whole, as a
//! closure building each attempt's future ([`Driver::run`]): its first attempt is then polled
//! straight from the driver's `poll`, as [`Retry`] polls its own, and the loop after a failure
//! runs out of line, so a first attempt that succeeds costs what it does in [`Retry`]. What follows each
//! attempt is decided by the shared functions of `decide.rs`, and every wait goes through
//! [`DefaultClock`], so a [`Scope`](crate::Scope) or paused tokio time reaches these
//! functions too. A plain (blocking) `fn` under `#[retry]` runs the same loop around a
//! closure instead of an `async` block ([`Driver::attempt_blocking`]), and waits with
//! [`Clock::sleep_blocking`] of the same clock (a scope's clock, else the thread sleeps).
//!
//! [`Retry`]: super::Retry

use std::convert::Infallible;
use std::future::{Future, Pending};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use super::decide::{Checks, Next, after_failure, after_timer, start_attempt, yields_after};
use super::error::LimitExceeded;
use super::limits::{Exit, IntoLimited, Limit, Limited, Limits, StopReason, TimerSlot, Unlimited};
use super::protect::{AsError, Handle, Protected, Protection, Unprotected};
use super::stops::EarlyStop;
use super::{Always, Hooks, NoHint, OnRetry, Progress, RetryAfter, ShouldRetry, Silent, Timer};
use crate::backoff::FromPolicy;
use crate::policy::{Plan, RetryPolicy};
use crate::protection::{CircuitBreaker, CircuitOpen, RetryBudget};
use crate::schedule::PolicyKept;
use crate::time::{Clock, DefaultClock, DefaultSleep};

/// Runs the attempts of one call of a `#[retry]` function. Not public API: the macro's
/// expansion is its only caller.
pub struct Driver<
    E,
    W = Always,
    N = Silent,
    L: DriverLimits<E> = Unlimited,
    H = NoHint,
    G = Unprotected,
> {
    plan: Plan<DefaultClock>,
    /// The policy's schedule and the caller's predicate, observer and hint reader.
    hooks: Hooks<FromPolicy, W, N, H>,
    /// How the limits' outcomes become the function's error.
    limits: L,
    /// The limits themselves, and the budget and breaker.
    stops: EarlyStop<L::Limits, G>,
    progress: Progress<<L::Limits as Limits>::Memory<E>, PolicyKept>,
}

/// A `#[retry]` function's predicate (`when = …`): a function, so that one of the wrong
/// signature is one type error at the option.
type Predicate<E> = fn(&E, u32) -> bool;
/// A `#[retry]` function's observer (`notify = …`).
type Observer<E> = fn(&E, u32, Duration);
/// A `#[retry]` function's hint reader (`retry_after = …`).
type HintReader<E> = fn(&E) -> Option<Duration>;
/// How a `#[retry]` function turns a refused call into its own error.
type OpenToError<E> = fn(CircuitOpen) -> E;

/// A `#[retry]` function's budget and breaker: `static`s, each optional; which errors count
/// against the breaker (all, without `breaker_counts`); a refused attempt as
/// `E::from(CircuitOpen)`, a refused retry as the last error.
pub type DriverGuard<E> = Protected<
    Option<Handle<&'static RetryBudget>>,
    Option<Handle<&'static CircuitBreaker>>,
    Option<fn(&E) -> bool>,
    AsError<E>,
>;

impl<E> Driver<E> {
    /// A driver for one call under `policy`, without hooks or limits.
    #[inline]
    pub fn new(policy: RetryPolicy<DefaultClock>) -> Self {
        let (plan, progress) = Progress::start::<E, _, FromPolicy>(policy);
        Driver {
            plan,
            hooks: Hooks::new(FromPolicy, Always, Silent, NoHint),
            limits: Unlimited,
            stops: EarlyStop::new(Unlimited, Unprotected),
            progress,
        }
    }
}

impl<E, W, N, H> Driver<E, W, N, Unlimited, H> {
    /// Adds an overall deadline and/or a per-attempt timeout. Their outcomes become the
    /// function's own error through `to_error`: `<E as FromLimit>::from_limit`, named by the
    /// expansion where a missing `From<LimitExceeded>` is best reported.
    pub fn limits(
        self,
        deadline: Option<Duration>,
        attempt_timeout: Option<Duration>,
        to_error: fn(LimitExceeded) -> E,
    ) -> Driver<E, W, N, WithLimits<E>, H> {
        let mut limited = Unlimited.into_limited();
        if let Some(budget) = deadline {
            limited = limited.with_deadline(budget);
        }
        if let Some(timeout) = attempt_timeout {
            limited = limited.with_attempt_timeout(timeout);
        }
        Driver {
            plan: self.plan,
            hooks: self.hooks,
            limits: WithLimits {
                budget: deadline.unwrap_or(Duration::ZERO),
                to_error,
            },
            stops: EarlyStop::new(limited, self.stops.guard),
            progress: self.progress.remembering::<E, _>(),
        }
    }
}

impl<E, W, N, L: DriverLimits<E>, H> Driver<E, W, N, L, H> {
    /// Adds a shared retry budget and/or circuit breaker (`static`s named by the attribute);
    /// every error counts against the breaker unless
    /// [`breaker_counts`](Driver::breaker_counts) says otherwise. An attempt the breaker refuses becomes the
    /// function's error through `open_to_error` (`<E as FromCircuitOpen>::from_circuit_open`,
    /// named by the expansion where a missing `From<CircuitOpen>` is best reported); a retry
    /// the budget or breaker refuses returns the last error.
    pub fn protect(
        self,
        budget: Option<&'static RetryBudget>,
        breaker: Option<(&'static CircuitBreaker, OpenToError<E>)>,
    ) -> Driver<E, W, N, L, H, DriverGuard<E>> {
        let (breaker, open_to_error) = match breaker {
            Some((breaker, to_error)) => (Some(Handle(breaker)), Some(to_error)),
            None => (None, None),
        };
        let guard = Protected::new(budget.map(Handle), breaker, None, AsError(open_to_error));
        Driver {
            plan: self.plan,
            hooks: self.hooks,
            limits: self.limits,
            stops: EarlyStop::new(self.stops.limits, guard),
            progress: self.progress,
        }
    }
}

impl<E, W, N, L: DriverLimits<E>, H> Driver<E, W, N, L, H, DriverGuard<E>> {
    /// Counts only the errors for which `counts(&error)` is true against the breaker; any
    /// other error is a success for it. A function pointer, as for [`when`](Driver::when).
    pub fn breaker_counts(mut self, counts: fn(&E) -> bool) -> Self {
        self.stops.guard.count_with(Some(counts));
        self
    }
}

impl<E, W, N, L: DriverLimits<E>, H, G> std::fmt::Debug for Driver<E, W, N, L, H, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("plan", &self.plan)
            .field("attempt", &self.progress.attempt)
            .finish_non_exhaustive()
    }
}

impl<E, W, N, L: DriverLimits<E>, H, G> Driver<E, W, N, L, H, G> {
    /// Retries only errors for which `predicate(&error, next_attempt)` is true.
    ///
    /// A function pointer, not a generic: the option names a function, and a function of the
    /// wrong signature is then one type error at the option instead of one per use.
    pub fn when(self, predicate: Predicate<E>) -> Driver<E, Predicate<E>, N, L, H, G> {
        Driver {
            plan: self.plan,
            hooks: Hooks::new(FromPolicy, predicate, self.hooks.notify, self.hooks.hint),
            limits: self.limits,
            stops: self.stops,
            progress: self.progress,
        }
    }

    /// Calls `observer(&error, failed_attempt, delay)` before each wait.
    pub fn notify(self, observer: Observer<E>) -> Driver<E, W, Observer<E>, L, H, G> {
        Driver {
            plan: self.plan,
            hooks: Hooks::new(FromPolicy, self.hooks.when, observer, self.hooks.hint),
            limits: self.limits,
            stops: self.stops,
            progress: self.progress,
        }
    }

    /// Reads a server's retry-after hint from each error, as
    /// [`Retry::retry_after`](super::Retry::retry_after) does.
    pub fn retry_after(self, hint: HintReader<E>) -> Driver<E, W, N, L, HintReader<E>, G> {
        Driver {
            plan: self.plan,
            hooks: Hooks::new(FromPolicy, self.hooks.when, self.hooks.notify, hint),
            limits: self.limits,
            stops: self.stops,
            progress: self.progress,
        }
    }

    /// Runs one attempt, `body`, then waits if another attempt follows.
    ///
    /// `Break` carries the function's result: the value, the last error, or a limit turned
    /// into `E`. `Continue` means: build the body's future again and call this once more.
    /// The attempt is counted (and its limits' timer armed) by this call; the returned future
    /// runs it.
    #[inline]
    pub fn attempt<T, F>(&mut self, body: F) -> Attempt<'_, E, W, N, L, H, G, F>
    where
        F: Future<Output = Result<T, E>>,
        G: Protection<E>,
    {
        let stops = Pin::new(&mut self.stops);
        let phase = match start_attempt(&self.plan, stops, &mut self.progress) {
            // The limits' timer slot, raced in place: zero-sized without limits, so the body
            // is the only thing this future holds during an attempt.
            Ok(Some((limit, kind))) => Phase::Racing {
                body,
                timer: SlotOf::<L, E>::armed(self.plan.clock().sleep(limit), kind),
            },
            Ok(None) => Phase::Racing {
                body,
                timer: SlotOf::<L, E>::idle(),
            },
            Err(exit) => Phase::Stopped {
                error: Some(self.limits.error(exit)),
            },
        };
        Attempt {
            driver: self,
            phase,
        }
    }

    /// Runs the whole call: `make` builds each attempt's future, as [`Retry`](super::Retry)'s
    /// operation does. For a body that borrows nothing mutably (a free function, a `&self`
    /// method), the expansion hands its body here instead of looping around
    /// [`attempt`](Self::attempt): the first attempt is then started and polled straight from
    /// [`Run`]'s `poll`, where the optimizer sees the fresh state, and every later step runs
    /// out of line.
    #[inline]
    pub fn run<T, F, M>(&mut self, make: M) -> Run<'_, E, W, N, L, H, G, M, F>
    where
        M: FnMut() -> F,
        F: Future<Output = Result<T, E>>,
    {
        Run {
            driver: self,
            make,
            state: RunState::Start,
        }
    }

    /// Runs one attempt of a blocking `#[retry]` function, `body`, then waits on the default
    /// clock ([`Clock::sleep_blocking`]) if another attempt follows.
    ///
    /// `Break` carries the function's result; `Continue` means: call this once more. The
    /// attempt is counted first, and the deadline checked before it starts; nothing can cut
    /// a blocking body short, so no timer races it (the macro refuses `attempt_timeout_ms` on
    /// a function that is not `async`).
    pub fn attempt_blocking<T>(
        &mut self,
        body: impl FnOnce() -> Result<T, E>,
    ) -> ControlFlow<Result<T, E>>
    where
        E: std::fmt::Debug,
        W: ShouldRetry<E>,
        N: OnRetry<E>,
        H: RetryAfter<E>,
        G: Protection<E>,
    {
        let stops = Pin::new(&mut self.stops);
        if let Err(exit) = start_attempt(&self.plan, stops, &mut self.progress) {
            return ControlFlow::Break(Err(self.limits.error(exit)));
        }
        match self.decide(Ok(body())) {
            ControlFlow::Break(result) => ControlFlow::Break(result),
            ControlFlow::Continue(delay) => {
                // A zero wait sleeps nothing: no executor to yield to, no timer to touch.
                if !delay.is_zero() {
                    self.plan.clock().sleep_blocking(delay);
                }
                ControlFlow::Continue(())
            }
        }
    }

    /// The outcome of an attempt: its value, or what follows a failure ([`Self::failed`]).
    /// Inlined, as the expanded function's poll is, so that a first attempt that succeeds
    /// costs what it costs in [`Retry`](super::Retry).
    #[inline]
    fn decide<T>(
        &mut self,
        outcome: Result<Result<T, E>, Timer<<L::Limits as Limits>::Token>>,
    ) -> ControlFlow<Result<T, E>, Duration>
    where
        E: std::fmt::Debug,
        W: ShouldRetry<E>,
        N: OnRetry<E>,
        H: RetryAfter<E>,
        G: Protection<E>,
    {
        let failed = match outcome {
            Ok(Ok(value)) => {
                self.stops.guard.succeeded(self.plan.clock());
                return ControlFlow::Break(Ok(value));
            }
            Ok(Err(error)) => Ok(error),
            Err(timer) => Err(timer),
        };
        match self.failed(failed) {
            ControlFlow::Break(error) => ControlFlow::Break(Err(error)),
            ControlFlow::Continue(delay) => ControlFlow::Continue(delay),
        }
    }

    /// What follows a failed attempt (its error, or a limit's timer that fired): stop with
    /// the function's error, or wait this long.
    ///
    /// Always inlined, with [`Self::after_failure`]: `Run::drive`, already out of line, then
    /// decides each failure without a call of its own (two retries: 1,570 instructions to
    /// 1,536, below the builder's loop).
    #[inline(always)]
    fn failed(
        &mut self,
        outcome: Result<E, Timer<<L::Limits as Limits>::Token>>,
    ) -> ControlFlow<E, Duration>
    where
        E: std::fmt::Debug,
        W: ShouldRetry<E>,
        N: OnRetry<E>,
        H: RetryAfter<E>,
        G: Protection<E>,
    {
        let next = match outcome {
            Ok(error) => self.after_failure(error),
            Err(Timer::AttemptTimeout(token, timeout)) => {
                let error = self.limits.error(Exit::Stopped {
                    token,
                    reason: StopReason::AttemptTimeout(timeout),
                    attempts: self.progress.attempt,
                    last: None,
                });
                self.after_failure(error)
            }
            Err(deadline) => after_timer(
                deadline,
                &Checks::new::<_, E>(&self.plan, &FromPolicy),
                &mut FromPolicy,
                Pin::new(&mut self.stops),
                &mut self.progress,
            ),
        };
        match next {
            Next::Stop(exit) => ControlFlow::Break(self.limits.error(exit)),
            Next::Wait(delay) => ControlFlow::Continue(delay),
        }
    }

    /// The shared decision after a failed attempt, with this driver's checks and hooks.
    #[inline(always)]
    fn after_failure(&mut self, error: E) -> Next<E, <L::Limits as Limits>::Token>
    where
        E: std::fmt::Debug,
        W: ShouldRetry<E>,
        N: OnRetry<E>,
        H: RetryAfter<E>,
        L: DriverLimits<E>,
        G: Protection<E>,
    {
        after_failure(
            error,
            &Checks::new::<_, E>(&self.plan, &FromPolicy),
            &mut self.hooks,
            Pin::new(&mut self.stops),
            &mut self.progress,
        )
    }
}

/// The timer slot a driver's limits race each attempt against.
type SlotOf<L, E> = <<L as DriverLimits<E>>::Limits as Limits>::Timer<DefaultSleep>;

pin_project! {
    /// One attempt of a `#[retry]` call and the wait after it: the future of
    /// [`Driver::attempt`]. Hand-written so that the body's future is stored once, in place.
    #[must_use = "an attempt does nothing unless `.await`ed"]
    pub struct Attempt<'a, E, W, N, L: DriverLimits<E>, H, G, F> {
        driver: &'a mut Driver<E, W, N, L, H, G>,
        #[pin]
        phase: Phase<F, SlotOf<L, E>, E>,
    }
}

pin_project! {
    /// Where an [`Attempt`] is.
    #[project = PhaseProj]
    enum Phase<F, T, E> {
        // The body runs, raced against the limits' timer (the body is polled first, as in
        // `Retry`).
        Racing { #[pin] body: F, #[pin] timer: T },
        // The body failed and another attempt follows after this wait.
        Waiting { #[pin] sleep: DefaultSleep },
        // A zero wait after many in a row: one turn back to the executor.
        Yielding,
        // The deadline had passed before the attempt could start.
        Stopped { error: Option<E> },
        // Returned its outcome.
        Done,
    }
}

impl<E, W, N, L, H, G, F, T> Future for Attempt<'_, E, W, N, L, H, G, F>
where
    F: Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
    W: ShouldRetry<E>,
    N: OnRetry<E>,
    H: RetryAfter<E>,
    L: DriverLimits<E>,
    G: Protection<E>,
{
    type Output = ControlFlow<Result<T, E>>;

    // Inlined into the expanded function's own state machine, as an `async fn` would be.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut phase = this.phase;
        let driver = this.driver;
        // No `loop` around this `match`: every arm returns except a failure followed by a
        // wait, which falls through to poll that wait at once. A loop header here merged the
        // first poll with later ones, so the optimizer could no longer see that a fresh
        // attempt is `Racing` and read every state from memory.
        match phase.as_mut().project() {
            PhaseProj::Racing { body, timer } => {
                let outcome = match body.poll(cx) {
                    Poll::Ready(output) => Ok(output),
                    Poll::Pending => match timer.poll_fired(cx) {
                        Some(kind) => Err(kind),
                        None => return Poll::Pending,
                    },
                };
                let delay = match driver.decide(outcome) {
                    ControlFlow::Break(result) => {
                        phase.set(Phase::Done);
                        return Poll::Ready(ControlFlow::Break(result));
                    }
                    ControlFlow::Continue(delay) => delay,
                };
                if !delay.is_zero() {
                    phase.set(Phase::Waiting {
                        sleep: driver.plan.clock().sleep(delay),
                    });
                } else if yields_after(driver.progress.attempt) {
                    phase.set(Phase::Yielding);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                } else {
                    phase.set(Phase::Done);
                    return Poll::Ready(ControlFlow::Continue(()));
                }
            }
            PhaseProj::Waiting { .. } => {}
            PhaseProj::Yielding => {
                phase.set(Phase::Done);
                return Poll::Ready(ControlFlow::Continue(()));
            }
            PhaseProj::Stopped { error } => {
                let error = error.take();
                phase.set(Phase::Done);
                return match error {
                    Some(error) => Poll::Ready(ControlFlow::Break(Err(error))),
                    None => Poll::Pending,
                };
            }
            PhaseProj::Done => return Poll::Pending,
        }
        // Waiting: entered just now or on an earlier poll.
        if let PhaseProj::Waiting { sleep } = phase.as_mut().project() {
            if sleep.poll(cx).is_pending() {
                return Poll::Pending;
            }
            phase.set(Phase::Done);
            return Poll::Ready(ControlFlow::Continue(()));
        }
        Poll::Pending
    }
}

pin_project! {
    /// A whole `#[retry]` call whose attempts `make` builds: the future of [`Driver::run`].
    #[must_use = "a retried call does nothing unless `.await`ed"]
    pub struct Run<'a, E, W, N, L: DriverLimits<E>, H, G, M, F> {
        driver: &'a mut Driver<E, W, N, L, H, G>,
        make: M,
        #[pin]
        state: RunState<F, SlotOf<L, E>>,
    }
}

pin_project! {
    /// Where a [`Run`] is.
    #[project = RunProj]
    enum RunState<F, T> {
        // The next attempt starts on this poll.
        Start,
        // An attempt runs, raced against the limits' timer (the body is polled first).
        Racing { #[pin] body: F, #[pin] timer: T },
        // Waiting before the next attempt.
        Waiting { #[pin] sleep: DefaultSleep },
        // Returned (a first attempt's success stays in `Racing`: see `poll`).
        Done,
    }
}

/// Where `Run::drive` picks a [`Run`] up.
enum Resume<E> {
    /// Look at the state: a later poll.
    Dispatch,
    /// The attempt in the state has just failed with this error.
    Failed(E),
    /// The attempt in the state has just returned `Pending`: its timer is polled next.
    Pending,
}

impl<E, W, N, L, H, G, M, F, T> Future for Run<'_, E, W, N, L, H, G, M, F>
where
    M: FnMut() -> F,
    F: Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
    W: ShouldRetry<E>,
    N: OnRetry<E>,
    H: RetryAfter<E>,
    L: DriverLimits<E>,
    G: Protection<E>,
{
    type Output = Result<T, E>;

    /// The first poll starts the first attempt and polls it right here, inlined into the
    /// expanded function, as `Retry`'s does: a first attempt that succeeds costs the body,
    /// the attempt count and the state tags. Everything else is `drive`, out of line.
    ///
    /// A success leaves the finished attempt in the state instead of storing `Done` (three
    /// instructions on every call): like any future, a `Run` must not be polled again after
    /// it returned `Ready`, and one that is panics in the attempt's body, as an `async fn`
    /// polled after completion does.
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.as_mut().project();
        if !matches!(this.state.as_mut().project(), RunProj::Start) {
            return self.drive(cx, Resume::Dispatch);
        }
        if let Err(error) = begin(this.driver, this.make, this.state.as_mut()) {
            return Poll::Ready(Err(error));
        }
        let polled = match this.state.as_mut().project() {
            RunProj::Racing { body, .. } => body.poll(cx),
            // `begin` has just stored the attempt.
            _ => return self.drive(cx, Resume::Dispatch),
        };
        match polled {
            Poll::Ready(Ok(value)) => {
                this.driver.stops.guard.succeeded(this.driver.plan.clock());
                Poll::Ready(Ok(value))
            }
            Poll::Ready(Err(error)) => self.drive(cx, Resume::Failed(error)),
            Poll::Pending => self.drive(cx, Resume::Pending),
        }
    }
}

/// Counts the next attempt and stores its future, raced against the limits' timer; or, when
/// the deadline has already passed, leaves the call `Done` and returns its error.
#[inline]
fn begin<E, W, N, L, H, G, M, F, T>(
    driver: &mut Driver<E, W, N, L, H, G>,
    make: &mut M,
    mut state: Pin<&mut RunState<F, SlotOf<L, E>>>,
) -> Result<(), E>
where
    M: FnMut() -> F,
    F: Future<Output = Result<T, E>>,
    L: DriverLimits<E>,
    G: Protection<E>,
{
    let stops = Pin::new(&mut driver.stops);
    let timer = match start_attempt(&driver.plan, stops, &mut driver.progress) {
        Ok(Some((limit, kind))) => SlotOf::<L, E>::armed(driver.plan.clock().sleep(limit), kind),
        Ok(None) => SlotOf::<L, E>::idle(),
        Err(exit) => {
            state.set(RunState::Done);
            return Err(driver.limits.error(exit));
        }
    };
    state.set(RunState::Racing {
        body: make(),
        timer,
    });
    Ok(())
}

impl<E, W, N, L, H, G, M, F, T> Run<'_, E, W, N, L, H, G, M, F>
where
    M: FnMut() -> F,
    F: Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
    W: ShouldRetry<E>,
    N: OnRetry<E>,
    H: RetryAfter<E>,
    L: DriverLimits<E>,
    G: Protection<E>,
{
    /// A [`Run`]'s every step but the first attempt's start and success: failures, waits,
    /// limits, later polls. Each step goes straight to the next (a failure to its wait, a wait
    /// that has ended to the next attempt) without reading the state back from memory.
    #[inline(never)]
    fn drive(self: Pin<&mut Self>, cx: &mut Context<'_>, resume: Resume<E>) -> Poll<Result<T, E>> {
        let mut this = self.project();
        let driver = this.driver;
        let make = this.make;
        let mut state = this.state.as_mut();
        // The outcome of the attempt in the state.
        let mut outcome = match resume {
            Resume::Failed(error) => Ok(Err(error)),
            Resume::Pending => match poll_timer(state.as_mut(), cx) {
                Some(outcome) => outcome,
                None => return Poll::Pending,
            },
            Resume::Dispatch => {
                let ready = match state.as_mut().project() {
                    RunProj::Start => true,
                    RunProj::Racing { .. } => false,
                    RunProj::Waiting { sleep } => match sleep.poll(cx) {
                        Poll::Ready(()) => true,
                        Poll::Pending => return Poll::Pending,
                    },
                    RunProj::Done => return Poll::Pending,
                };
                if ready {
                    if let Err(error) = begin(driver, make, state.as_mut()) {
                        return Poll::Ready(Err(error));
                    }
                }
                match poll_racing(state.as_mut(), cx) {
                    Some(outcome) => outcome,
                    None => return Poll::Pending,
                }
            }
        };
        loop {
            match driver.decide(outcome) {
                ControlFlow::Break(result) => {
                    state.set(RunState::Done);
                    return Poll::Ready(result);
                }
                ControlFlow::Continue(delay) if !delay.is_zero() => {
                    let sleep = driver.plan.clock().sleep(delay);
                    state.set(RunState::Waiting { sleep });
                    if let RunProj::Waiting { sleep } = state.as_mut().project() {
                        if sleep.poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                    }
                }
                ControlFlow::Continue(_) => {
                    // No timer for a zero wait, but a long run of immediate retries yields now
                    // and then so other tasks on this thread get to run.
                    if yields_after(driver.progress.attempt) {
                        state.set(RunState::Start);
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
            }
            if let Err(error) = begin(driver, make, state.as_mut()) {
                return Poll::Ready(Err(error));
            }
            outcome = match poll_racing(state.as_mut(), cx) {
                Some(outcome) => outcome,
                None => return Poll::Pending,
            };
        }
    }
}

/// The outcome of a [`Run`]'s running attempt (or of its timer, if the attempt is pending);
/// `None` while neither is ready.
#[inline]
fn poll_racing<F, T, E, S, K>(
    mut state: Pin<&mut RunState<F, S>>,
    cx: &mut Context<'_>,
) -> Option<Result<Result<T, E>, Timer<K>>>
where
    F: Future<Output = Result<T, E>>,
    S: TimerSlot<DefaultSleep, K>,
{
    match state.as_mut().project() {
        RunProj::Racing { body, .. } => match body.poll(cx) {
            Poll::Ready(output) => Some(Ok(output)),
            Poll::Pending => poll_timer(state, cx),
        },
        _ => None,
    }
}

/// Whether the timer racing a [`Run`]'s pending attempt has fired.
#[inline]
fn poll_timer<F, T, E, S: TimerSlot<DefaultSleep, K>, K>(
    state: Pin<&mut RunState<F, S>>,
    cx: &mut Context<'_>,
) -> Option<Result<Result<T, E>, Timer<K>>> {
    match state.project() {
        RunProj::Racing { timer, .. } => timer.poll_fired(cx).map(Err),
        _ => None,
    }
}

/// A driver's limits, and how their outcomes become the function's error type.
pub trait DriverLimits<E> {
    /// The loop's limits, as the shared decisions read them (no cancellation signal: never
    /// pinned).
    type Limits: Limits + Unpin;

    /// The function's error for a loop that ended without a value.
    fn error(&self, exit: Exit<E, <Self::Limits as Limits>::Token>) -> E;
}

impl<E> DriverLimits<E> for Unlimited {
    type Limits = Unlimited;

    fn error(&self, exit: Exit<E, Infallible>) -> E {
        match exit {
            Exit::Failed(error) => error,
            Exit::Stopped { token, .. } => match token {},
        }
    }
}

/// A deadline and/or an attempt timeout, with the conversion of their outcomes into `E`.
#[derive(Debug)]
pub struct WithLimits<E> {
    budget: Duration,
    to_error: fn(LimitExceeded) -> E,
}

impl<E> DriverLimits<E> for WithLimits<E> {
    type Limits = Limited<Pending<()>>;

    fn error(&self, exit: Exit<E, Limit>) -> E {
        let (reason, attempts) = match exit {
            Exit::Failed(error) => return error,
            Exit::Stopped {
                reason, attempts, ..
            } => (reason, attempts),
        };
        (self.to_error)(match reason {
            StopReason::AttemptTimeout(timeout) => LimitExceeded::AttemptTimeout {
                attempt: attempts,
                timeout,
            },
            // A driver has no cancellation signal, and its protection ends the loop with an
            // error of the function's own (`AsError`): every other stop is the deadline's.
            StopReason::Deadline | StopReason::Cancelled | StopReason::Refused(_) => {
                LimitExceeded::DeadlineExceeded {
                    attempts,
                    budget: self.budget,
                }
            }
        })
    }
}

/// What `#[retry(budget = …)]` may name: a `static` [`RetryBudget`], or a `LazyLock` of one
/// (for settings read at run time).
#[diagnostic::on_unimplemented(
    message = "`#[retry(budget = …)]` names a `static` of type `retry_toolkit::RetryBudget`, and this one is of type `{Self}`",
    label = "not a `retry_toolkit::RetryBudget`",
    note = "declare it as `static NAME: RetryBudget = RetryBudget::with_config(…);`, or as a `LazyLock<RetryBudget>`"
)]
pub trait AsBudget {
    /// The budget.
    fn budget(&'static self) -> &'static RetryBudget;
}

impl AsBudget for RetryBudget {
    fn budget(&'static self) -> &'static RetryBudget {
        self
    }
}

impl<F: FnOnce() -> RetryBudget> AsBudget for LazyLock<RetryBudget, F> {
    fn budget(&'static self) -> &'static RetryBudget {
        LazyLock::force(self)
    }
}

/// What `#[retry(breaker = …)]` may name: a `static` [`CircuitBreaker`], or a `LazyLock` of
/// one.
#[diagnostic::on_unimplemented(
    message = "`#[retry(breaker = …)]` names a `static` of type `retry_toolkit::CircuitBreaker`, and this one is of type `{Self}`",
    label = "not a `retry_toolkit::CircuitBreaker`",
    note = "declare it as `static NAME: CircuitBreaker = CircuitBreaker::with_config(…);`, or as a `LazyLock<CircuitBreaker>`"
)]
pub trait AsBreaker {
    /// The breaker.
    fn breaker(&'static self) -> &'static CircuitBreaker;
}

impl AsBreaker for CircuitBreaker {
    fn breaker(&'static self) -> &'static CircuitBreaker {
        self
    }
}

impl<F: FnOnce() -> CircuitBreaker> AsBreaker for LazyLock<CircuitBreaker, F> {
    fn breaker(&'static self) -> &'static CircuitBreaker {
        LazyLock::force(self)
    }
}

/// `E: From<CircuitOpen>`, under a name whose error message explains why `#[retry]` asks.
#[diagnostic::on_unimplemented(
    message = "`#[retry]` with `breaker` returns a refused call as `{Self}`, which does not implement `From<retry_toolkit::CircuitOpen>`",
    label = "this breaker needs `{Self}: From<retry_toolkit::CircuitOpen>`",
    note = "add a variant such as `Unavailable(#[from] retry_toolkit::CircuitOpen)` to the error type, or implement `From<retry_toolkit::CircuitOpen>` for it"
)]
pub trait FromCircuitOpen {
    /// `E::from(open)`.
    fn from_circuit_open(open: CircuitOpen) -> Self;
}

impl<E: From<CircuitOpen>> FromCircuitOpen for E {
    fn from_circuit_open(open: CircuitOpen) -> Self {
        E::from(open)
    }
}

/// `E: From<LimitExceeded>`, under a name whose error message explains why `#[retry]` asks.
#[diagnostic::on_unimplemented(
    message = "`#[retry]` with `deadline_ms` or `attempt_timeout_ms` returns those limits as `{Self}`, which does not implement `From<retry_toolkit::LimitExceeded>`",
    label = "this limit needs `{Self}: From<retry_toolkit::LimitExceeded>`",
    note = "add a variant such as `Limit(#[from] retry_toolkit::LimitExceeded)` to the error type, or implement `From<retry_toolkit::LimitExceeded>` for it"
)]
pub trait FromLimit {
    /// `E::from(limit)`.
    fn from_limit(limit: LimitExceeded) -> Self;
}

impl<E: From<LimitExceeded>> FromLimit for E {
    fn from_limit(limit: LimitExceeded) -> Self {
        E::from(limit)
    }
}
