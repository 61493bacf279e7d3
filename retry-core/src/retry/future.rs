//! The loop's states and its `poll`: one step of the state machine per transition.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::decide::{
    Checks, Next, TARGET, after_failure, after_timer, after_value, start_attempt, yields_after,
};
use super::limits::{Exit, Limits, Memory, StopReason, TimerSlot};
use super::protect::Protection;
use super::stops::EarlyStop;
use super::stops::LoopStops;
use super::value::JudgeOk;
use super::{LoopHooks, OnRetry, Operation, OutputOf, Progress, Retry, RetryAfter, ShouldRetry};
use crate::policy::Plan;
use crate::time::Clock;

pin_project! {
    /// What the loop is doing now. `T` is the timer slot of the loop's limits: zero-sized
    /// without limits.
    #[project = StateProj]
    pub(super) enum State<Fut, S, T> {
        // About to start the next attempt.
        Start,
        // An attempt is running, raced against its timer if the loop has limits.
        Attempt { #[pin] fut: Fut, #[pin] timer: T },
        // Waiting before the next attempt.
        Backoff { #[pin] sleep: S },
        // Finished; polled again it stays pending.
        Done,
    }
}

impl<Op, Fut, T, E, C, K, S> Future for Retry<Op, Fut, E, C, K, S>
where
    Op: Operation<Attempt = Fut> + JudgeOk<T>,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Debug,
    C: Clock,
    K: LoopHooks<E, When: ShouldRetry<E>, Notify: OnRetry<E>, Hint: RetryAfter<E>>,
    S: LoopStops<Guard: Protection<E>>,
{
    type Output = OutputOf<S, T, E>;

    /// The first poll starts the first attempt and polls it right here, in a function small
    /// enough to be inlined into the caller: there the compiler sees the state the future was
    /// built in, so a first attempt that succeeds costs the operation, a counter and two
    /// state tags, with no drop glue run (nothing but the attempt was ever stored). Everything
    /// else — failures, waits, limits, later polls — is `drive`, out of line.
    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.as_mut().project();
        let mut stops = this.stops.parts();
        if !matches!(this.state.as_mut().project(), StateProj::Start) {
            return drive(self, cx, Resume::Dispatch);
        }
        // R6: cancellation wins over everything; no attempt starts after the signal.
        if let Some(exit) = cancelled(stops.as_mut(), cx, this.progress) {
            this.state.set(State::Done);
            return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
        }
        let state = this.state.as_mut();
        if let Err(exit) = begin(this.plan, this.op, stops.as_mut(), this.progress, state) {
            return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
        }
        let polled = match this.state.as_mut().project() {
            StateProj::Attempt { fut, .. } => fut.poll(cx),
            // `begin` has just stored the attempt.
            _ => return drive(self, cx, Resume::Dispatch),
        };
        match polled {
            // A value to judge (`when_ok`): out of line; the check is a constant.
            Poll::Ready(Ok(value)) if Op::JUDGES => judge_first(self, cx, value),
            Poll::Ready(Ok(value)) => {
                stops.as_mut().guard().succeeded(this.plan.clock());
                this.state.set(State::Done);
                Poll::Ready(<S::Limits as Limits>::finish(Ok(value)))
            }
            Poll::Ready(Err(error)) => drive(self, cx, Resume::Failed(error)),
            Poll::Pending => drive(self, cx, Resume::Pending),
        }
    }
}

/// Where [`drive`] picks the loop up.
enum Resume<E> {
    /// Look at the state: a later poll.
    Dispatch,
    /// The attempt in the state has just failed with this error.
    Failed(E),
    /// The attempt in the state has just returned `Pending`: its timer is polled next.
    Pending,
}

/// The loop's body: every transition but the first attempt's start and success.
#[inline(never)]
fn drive<Op, Fut, T, E, C, K, S>(
    retry: Pin<&mut Retry<Op, Fut, E, C, K, S>>,
    cx: &mut Context<'_>,
    resume: Resume<E>,
) -> Poll<OutputOf<S, T, E>>
where
    Op: Operation<Attempt = Fut> + JudgeOk<T>,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Debug,
    C: Clock,
    K: LoopHooks<E, When: ShouldRetry<E>, Notify: OnRetry<E>, Hint: RetryAfter<E>>,
    S: LoopStops<Guard: Protection<E>>,
{
    let mut this = retry.project();
    let progress = this.progress;
    let hooks = this.hooks.parts();
    let mut stops = this.stops.parts();
    let checks = Checks::new::<_, E>(this.plan, &hooks.schedule);
    // Whether the signal was polled since this poll last ran user code (an attempt, the
    // hooks).
    let mut signal_checked = false;
    // The outcome `poll` already has of the attempt in the state, if any: a failure goes
    // straight to its decision, without a dispatch on the state.
    let mut outcome = match resume {
        Resume::Dispatch => {
            // Finished: stays pending, and never polls the cancellation signal again.
            if let StateProj::Done = this.state.as_mut().project() {
                return Poll::Pending;
            }
            // R6: cancellation wins over everything, including a wait in progress.
            if let Some(exit) = cancelled(stops.as_mut(), cx, progress) {
                this.state.set(State::Done);
                return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
            }
            signal_checked = true;
            None
        }
        Resume::Failed(error) => Some(Poll::Ready(Err(error))),
        Resume::Pending => Some(Poll::Pending),
    };

    loop {
        // Each step either returns, or says whether the next attempt starts now (false: look
        // at the state it left, a wait). An attempt after a zero wait is started and polled
        // inside the step.
        let start_next = 'step: loop {
            let polled = match outcome.take() {
                Some(polled) => polled,
                None => match this.state.as_mut().project() {
                    StateProj::Start => break 'step true,
                    StateProj::Attempt { fut, .. } => fut.poll(cx),
                    StateProj::Backoff { sleep } => match sleep.poll(cx) {
                        // Ended: the next attempt starts, once the signal has been checked.
                        Poll::Ready(()) => break 'step true,
                        Poll::Pending => return Poll::Pending,
                    },
                    StateProj::Done => return Poll::Pending,
                },
            };
            // The attempt, or the hooks after it, may fire the signal.
            signal_checked = false;
            let next = match polled {
                Poll::Ready(Ok(value)) => {
                    let (op, stops) = (&mut *this.op, stops.as_mut());
                    match after_value(value, op, &checks, &mut hooks.schedule, stops, progress) {
                        Ok(delay) => Next::Wait(delay),
                        Err(value) => {
                            this.state.set(State::Done);
                            return Poll::Ready(<S::Limits as Limits>::finish(Ok(value)));
                        }
                    }
                }
                Poll::Ready(Err(error)) => {
                    after_failure(error, &checks, hooks, stops.as_mut(), progress)
                }
                Poll::Pending => {
                    // Only a running attempt is pending here: its timer is polled next.
                    let StateProj::Attempt { timer, .. } = this.state.as_mut().project() else {
                        return Poll::Pending;
                    };
                    match timer.poll_fired(cx) {
                        Some(kind) => {
                            let (backoff, stops) = (&mut hooks.schedule, stops.as_mut());
                            after_timer(kind, &checks, backoff, stops, progress)
                        }
                        None => return Poll::Pending,
                    }
                }
            };
            match next {
                Next::Stop(exit) => {
                    this.state.set(State::Done);
                    return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
                }
                Next::Wait(delay) if delay.is_zero() => {
                    // No timer for a zero wait, but a long run of immediate retries yields
                    // now and then so other tasks on this thread get to run.
                    if yields_after(progress.attempt) {
                        this.state.set(State::Start);
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    // Straight to the next attempt, polled right here: R6 first (the signal
                    // may have fired during the attempt or inside `notify`).
                    if let Some(exit) = cancelled(stops.as_mut(), cx, progress) {
                        this.state.set(State::Done);
                        return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
                    }
                    let state = this.state.as_mut();
                    let stops = stops.as_mut();
                    if let Err(exit) = begin(this.plan, this.op, stops, progress, state) {
                        return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
                    }
                    if let StateProj::Attempt { fut, .. } = this.state.as_mut().project() {
                        outcome = Some(fut.poll(cx));
                    }
                    continue;
                }
                Next::Wait(delay) => {
                    let sleep = this.plan.clock().sleep(delay);
                    this.state.set(State::Backoff { sleep });
                    break 'step false;
                }
            }
        };
        if start_next {
            // R6: no attempt starts after the signal, not even straight after a zero wait
            // (the signal may have fired during the attempt or inside `notify`).
            if !signal_checked {
                if let Some(exit) = cancelled(stops.as_mut(), cx, progress) {
                    this.state.set(State::Done);
                    return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
                }
            }
            signal_checked = true;
            let state = this.state.as_mut();
            let stops = stops.as_mut();
            if let Err(exit) = begin(this.plan, this.op, stops, progress, state) {
                return Poll::Ready(<S::Limits as Limits>::finish(Err(exit)));
            }
        }
    }
}

/// The first attempt returned `value` and the operation judges values ([`Retry::when_ok`]):
/// the value is returned, or the loop sets up its wait and goes on in [`drive`]. Only loops
/// that judge values have this function; later values are judged inside `drive`.
#[inline(never)]
fn judge_first<Op, Fut, T, E, C, K, S>(
    retry: Pin<&mut Retry<Op, Fut, E, C, K, S>>,
    cx: &mut Context<'_>,
    value: T,
) -> Poll<OutputOf<S, T, E>>
where
    Op: Operation<Attempt = Fut> + JudgeOk<T>,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Debug,
    C: Clock,
    K: LoopHooks<E, When: ShouldRetry<E>, Notify: OnRetry<E>, Hint: RetryAfter<E>>,
    S: LoopStops<Guard: Protection<E>>,
{
    let mut retry = retry;
    let mut this = retry.as_mut().project();
    let plan = &*this.plan;
    let hooks = this.hooks.parts();
    let checks = Checks::new::<_, E>(plan, &hooks.schedule);
    let (backoff, progress) = (&mut hooks.schedule, &mut *this.progress);
    match after_value(
        value,
        this.op,
        &checks,
        backoff,
        this.stops.parts(),
        progress,
    ) {
        Err(value) => {
            this.state.set(State::Done);
            return Poll::Ready(<S::Limits as Limits>::finish(Ok(value)));
        }
        Ok(delay) if delay.is_zero() => {
            this.state.set(State::Start);
            if yields_after(progress.attempt) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        Ok(delay) => {
            let sleep = plan.clock().sleep(delay);
            this.state.set(State::Backoff { sleep });
        }
    }
    // The signal is checked first there: the predicate may have fired it.
    drive(retry, cx, Resume::Dispatch)
}

/// How the loop ends when its cancellation signal has fired; `None` while it has not (or the
/// loop has no signal).
fn cancelled<E, L: Limits, K, G: Protection<E>>(
    mut stops: Pin<&mut EarlyStop<L, G>>,
    cx: &mut Context<'_>,
    progress: &mut Progress<L::Memory<E>, K>,
) -> Option<Exit<E, L::Token>> {
    let token = stops.as_mut().limits().poll_cancelled(cx)?;
    // A running attempt is dropped unfinished: no outcome for the breaker.
    stops.guard().abandon();
    tracing::info!(target: TARGET, attempts = progress.attempt, "retry gave up: cancelled");
    super::metered::gave_up(super::metered::GaveUp::Cancelled);
    Some(Exit::Stopped {
        token,
        reason: StopReason::Cancelled,
        attempts: progress.attempt,
        last: Memory::<E>::take_last(&mut progress.memory),
    })
}

/// Starts the next attempt (raced against its limits' timer, if any) in `state`; or, when the
/// deadline has already passed, leaves the loop `Done` and returns how it ended.
fn begin<Op, Fut, T, E, C, L, K, G>(
    plan: &Plan<C>,
    op: &mut Op,
    stops: Pin<&mut EarlyStop<L, G>>,
    progress: &mut Progress<L::Memory<E>, K>,
    mut state: Pin<&mut AttemptState<Fut, C, L>>,
) -> Result<(), Exit<E, L::Token>>
where
    Op: Operation<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    L: Limits,
    G: Protection<E>,
{
    let timer = match start_attempt(plan, stops, progress) {
        Ok(timer) => timer,
        Err(exit) => {
            state.set(State::Done);
            return Err(exit);
        }
    };
    let fut = op.start(progress.attempt);
    let timer = match timer {
        Some((limit, kind)) => L::Timer::armed(plan.clock().sleep(limit), kind),
        None => L::Timer::idle(),
    };
    state.set(State::Attempt { fut, timer });
    Ok(())
}

/// The loop's state for an operation of future `Fut` on clock `C` under limits `L`.
type AttemptState<Fut, C, L> =
    State<Fut, <C as Clock>::Sleep, <L as Limits>::Timer<<C as Clock>::Sleep>>;
