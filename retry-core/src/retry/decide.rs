//! What follows an attempt: the decisions of the retry loop, shared by every driver of it.
//!
//! The loop exists in two shapes: [`Retry`](super::Retry), a hand-written future around a
//! closure, and the driver behind `#[retry]`, a plain `loop` around the function body (a
//! closure cannot lend `&mut self` to each attempt). Both ask these functions what to do after
//! each attempt, so the rules — attempts, predicate, hints and their ceiling, delays, deadline
//! and attempt timeout — are written once.

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use tracing::Level;
use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};

use super::hooks::Hooks;
use super::limits::{Exit, Limits, Memory, StopReason};
use super::metered::{self, GaveUp};
use super::protect::{Ending, Protection, Refusal};
use super::stops::EarlyStop;
use super::value::JudgeOk;
use super::{OnRetry, Progress, RetryAfter, ShouldRetry, Timer};
use crate::decision::{self, GiveUp};
use crate::policy::Plan;
use crate::schedule::Follow;
use crate::time::Clock;

pub(super) const TARGET: &str = "retry_toolkit";

/// What every failure is checked against, read once per poll rather than once per failure:
/// the policy's limits as durations, a fixed schedule's clamped wait, and whether `tracing`
/// records warnings at all (the event that every retry emits); and the plan they were read
/// from (its clock).
#[derive(Clone, Copy, Debug)]
pub(super) struct Checks<'p, C> {
    plan: &'p Plan<C>,
    max_attempts: u32,
    max_delay_ms: u64,
    /// The ceiling's whole seconds: a delay below them needs no clamp.
    max_delay_secs: u64,
    max_retry_after: Duration,
    /// The wait after every failure, when the schedule's never changes (clamped already).
    fixed: Option<Duration>,
    warns: bool,
}

impl<'p, C> Checks<'p, C> {
    /// The checks of a loop under `plan` following `backoff`.
    #[inline]
    pub(super) fn new<B: Follow<E>, E>(plan: &'p Plan<C>, backoff: &B) -> Self {
        Checks {
            plan,
            max_attempts: plan.max_attempts(),
            max_delay_ms: plan.max_delay_ms(),
            max_delay_secs: plan.max_delay_ms() / 1000,
            max_retry_after: plan.max_retry_after(),
            fixed: backoff.fixed(),
            warns: Level::WARN <= STATIC_MAX_LEVEL && Level::WARN <= LevelFilter::current(),
        }
    }
}

/// What follows a failed attempt.
pub(super) enum Next<E, Token> {
    /// Wait this long, then start the next attempt.
    Wait(Duration),
    /// The loop is over.
    Stop(Exit<E, Token>),
}

/// The timer racing an attempt (its length and the limit it enforces), or the loop's end.
pub(super) type Started<E, Token> = Result<Option<(Duration, Timer<Token>)>, Exit<E, Token>>;

/// Counts the next attempt and says which timer, if any, races it: the time left before the
/// deadline or the attempt timeout, whichever is shorter. Stops the loop instead when
/// the deadline has already passed, or when the loop's breaker refuses the attempt.
#[inline]
pub(super) fn start_attempt<E, C: Clock, L: Limits, K, G: Protection<E>>(
    plan: &Plan<C>,
    stops: Pin<&mut EarlyStop<L, G>>,
    progress: &mut Progress<L::Memory<E>, K>,
) -> Started<E, L::Token> {
    let stops = stops.project();
    let (limits, guard) = (&*stops.limits, stops.guard);
    let mut timer = None;
    if let Some((budget, token)) = limits.deadline() {
        let now = plan.clock().now();
        let spent = Memory::<E>::start(&mut progress.memory, now);
        let left = budget.saturating_sub(spent);
        if left.is_zero() {
            return Err(deadline_exit(token, progress));
        }
        timer = Some((left, Timer::Deadline(token)));
    }
    // After the deadline's check, so that an attempt that does not start holds no place in
    // the breaker.
    if let Err(refusal) = guard.admit(progress.attempt + 1, plan.clock()) {
        trace_refusal_before_attempt(progress.attempt, &refusal);
        if let Some(exit) = refused_without_error(guard, refusal, limits, progress) {
            return Err(exit);
        }
    }
    if let Some((limit, token)) = limits.attempt_timeout() {
        if timer.is_none_or(|(left, _)| limit < left) {
            timer = Some((limit, Timer::AttemptTimeout(token, limit)));
        }
    }
    // No overflow: an attempt starts only while `attempt < max_attempts <= u32::MAX`.
    progress.attempt += 1;
    Ok(timer)
}

fn deadline_exit<E, M: Memory<E>, K, Token>(
    token: Token,
    progress: &mut Progress<M, K>,
) -> Exit<E, Token> {
    tracing::info!(target: TARGET, attempts = progress.attempt, "retry gave up: deadline exceeded");
    metered::gave_up(GaveUp::Deadline);
    Exit::Stopped {
        token,
        reason: StopReason::Deadline,
        attempts: progress.attempt,
        last: progress.memory.take_last(),
    }
}

/// The time left before the deadline, if the loop has one.
#[inline]
fn deadline_left<E, C: Clock, L: Limits, K>(
    plan: &Plan<C>,
    limits: &L,
    progress: &Progress<L::Memory<E>, K>,
) -> Option<(Duration, L::Token)> {
    let (budget, token) = limits.deadline()?;
    let spent = Memory::<E>::spent(&progress.memory, plan.clock().now());
    Some((budget.saturating_sub(spent), token))
}

/// The next computed wait: the schedule's answer, clamped to the policy's ceiling.
#[inline]
fn scheduled_delay<E, C, B: Follow<E>, M>(
    checks: &Checks<'_, C>,
    backoff: &mut B,
    error: Option<&E>,
    progress: &mut Progress<M, B::Kept>,
) -> Duration {
    if let Some(delay) = checks.fixed {
        return delay;
    }
    let delay = backoff.next_delay(
        progress.attempt,
        error,
        checks.max_delay_ms,
        &mut progress.kept,
    );
    // Below the ceiling's whole seconds (the usual case) no clamp is needed: one comparison.
    if delay.as_secs() < checks.max_delay_secs {
        return delay;
    }
    delay.min(Duration::from_millis(checks.max_delay_ms))
}

/// Decides what follows a failed attempt.
///
/// Inlined into the loop's out-of-line `drive`, where the default hooks (`Always`, `NoHint`,
/// `Silent`, `Unlimited`) and a schedule's `delay` fold away: a failure costs the checks it
/// needs, not a call.
#[inline(always)]
pub(super) fn after_failure<E, C, B, W, N, H, L, G>(
    error: E,
    checks: &Checks<'_, C>,
    hooks: &mut Hooks<B, W, N, H>,
    stops: Pin<&mut EarlyStop<L, G>>,
    progress: &mut Progress<L::Memory<E>, B::Kept>,
) -> Next<E, L::Token>
where
    C: Clock,
    B: Follow<E>,
    W: ShouldRetry<E>,
    N: OnRetry<E>,
    H: RetryAfter<E>,
    L: Limits,
    G: Protection<E>,
    E: fmt::Debug,
{
    let Hooks {
        schedule: backoff,
        when,
        notify,
        hint,
    } = hooks;
    let stops = stops.project();
    let (plan, limits, guard) = (checks.plan, &*stops.limits, stops.guard);
    guard.failed(Some(&error), plan.clock());
    let attempt = progress.attempt;
    // The decision every retrier shares (`RetryPolicy::next`), its inputs read only when a
    // rule needs them: the predicate is not asked after the last attempt, and a failure with
    // a hint draws no wait.
    let mut hinted = false;
    let decided = decision::decide(
        checks.max_attempts,
        checks.max_retry_after,
        attempt,
        || when.should_retry(&error, attempt + 1),
        || {
            let asked = hint.retry_after(&error);
            hinted = asked.is_some();
            asked
        },
        || scheduled_delay(checks, backoff, Some(&error), progress),
    );
    let delay = match decided {
        decision::Next::Retry(delay) => delay,
        decision::Next::GiveUp(why) => {
            trace_give_up(attempt, why, &error);
            return Next::Stop(Exit::Failed(error));
        }
    };
    if let Some((left, token)) = deadline_left(plan, limits, progress) {
        if delay >= left && hinted {
            // D5: a server's hint that outlasts the budget ends the loop with its error.
            tracing::info!(target: TARGET, attempts = attempt, retry_after = ?delay, ?error, "retry gave up: retry-after hint beyond the deadline");
            metered::gave_up(GaveUp::HintBeyondDeadline);
            return Next::Stop(Exit::Failed(error));
        }
        if delay >= left {
            progress.memory.remember(error);
            return Next::Stop(deadline_exit(token, progress));
        }
    }
    // Last, because the budget counts an admitted retry.
    if let Err(refusal) = guard.retry(delay, plan.clock()) {
        trace_refused_retry(attempt, &refusal, &error);
        return Next::Stop(match guard.ending(refusal, limits.token(), true) {
            Ending::Stop(token, reason) => Exit::Stopped {
                token,
                reason,
                attempts: attempt,
                last: Some(error),
            },
            Ending::Error(error) => Exit::Failed(error),
            Ending::Last => Exit::Failed(error),
        });
    }
    notify.notify(&error, attempt, delay);
    if checks.warns {
        warn_retrying(attempt, delay, &error);
    }
    progress.waited::<E>(delay);
    progress.memory.remember(error);
    Next::Wait(delay)
}

/// The event of a failure that ends the loop by the shared decision. The caller's predicate
/// deciding is worth a debug line, not a log entry per call; the other reasons are
/// information.
#[cold]
#[inline(never)]
fn trace_give_up<E: fmt::Debug>(attempts: u32, why: GiveUp, error: &E) {
    metered::gave_up(match why {
        GiveUp::NotRetryable => GaveUp::NotRetryable,
        GiveUp::HintAboveCeiling { .. } => GaveUp::HintAboveCeiling,
        // `GiveUp` may grow; every other end is the end of the attempts.
        _ => GaveUp::Exhausted,
    });
    match why {
        GiveUp::NotRetryable => {
            tracing::debug!(target: TARGET, attempts, ?error, "retry gave up: error not retryable");
        }
        GiveUp::HintAboveCeiling { hint, .. } => tracing::info!(
            target: TARGET,
            attempts,
            retry_after = ?hint,
            ?error,
            "retry gave up: retry-after hint above the policy's ceiling"
        ),
        GiveUp::AttemptsExhausted => {
            tracing::info!(target: TARGET, attempts, ?error, "retry gave up: attempts exhausted");
        }
    }
}

/// The event of a retry after a failure: out of line and given values, so that a loop whose
/// `tracing` records no warnings keeps its delay in registers.
#[cold]
#[inline(never)]
fn warn_retrying<E: fmt::Debug>(attempt: u32, delay: Duration, error: &E) {
    tracing::warn!(target: TARGET, attempt, ?delay, ?error, "attempt failed; retrying");
}

/// Decides what follows an attempt cut off by its timer.
pub(super) fn after_timer<E, C, B, L, G>(
    kind: Timer<L::Token>,
    checks: &Checks<'_, C>,
    backoff: &mut B,
    stops: Pin<&mut EarlyStop<L, G>>,
    progress: &mut Progress<L::Memory<E>, B::Kept>,
) -> Next<E, L::Token>
where
    C: Clock,
    B: Follow<E>,
    L: Limits,
    G: Protection<E>,
{
    let stops = stops.project();
    let (plan, limits, guard) = (checks.plan, &*stops.limits, stops.guard);
    let (token, timeout) = match kind {
        Timer::Deadline(token) => {
            // The attempt is dropped unfinished: no outcome for the breaker.
            guard.abandon();
            return Next::Stop(deadline_exit(token, progress));
        }
        Timer::AttemptTimeout(token, timeout) => (token, timeout),
    };
    guard.failed(None, plan.clock());
    let attempt = progress.attempt;
    if attempt >= checks.max_attempts {
        tracing::info!(target: TARGET, attempts = attempt, ?timeout, "retry gave up: attempt timed out");
        metered::gave_up(GaveUp::AttemptTimeout);
        return Next::Stop(Exit::Stopped {
            token,
            reason: StopReason::AttemptTimeout(timeout),
            attempts: attempt,
            last: progress.memory.take_last(),
        });
    }
    let delay = scheduled_delay::<E, _, _, _>(checks, backoff, None, progress);
    if let Some((left, token)) = deadline_left(plan, limits, progress) {
        if delay >= left {
            return Next::Stop(deadline_exit(token, progress));
        }
    }
    if let Err(refusal) = guard.retry(delay, plan.clock()) {
        trace_refusal_before_attempt(attempt, &refusal);
        if let Some(exit) = refused_without_error(guard, refusal, limits, progress) {
            return Next::Stop(exit);
        }
    }
    tracing::warn!(target: TARGET, attempt, ?timeout, ?delay, "attempt timed out; retrying");
    progress.waited::<E>(delay);
    Next::Wait(delay)
}

/// How a refusal ends the loop when no error is in hand (before an attempt, after a
/// timeout): with the last error the loop remembers. `None` if this loop cannot end with a
/// refusal (it has neither a way to say so nor an error to return); it goes on.
fn refused_without_error<E, L: Limits, K, G: Protection<E>>(
    guard: &G,
    refusal: Refusal,
    limits: &L,
    progress: &mut Progress<L::Memory<E>, K>,
) -> Option<Exit<E, L::Token>> {
    let why = refused(&refusal);
    let exit = match guard.ending(refusal, limits.token(), false) {
        Ending::Stop(token, reason) => Some(Exit::Stopped {
            token,
            reason,
            attempts: progress.attempt,
            last: progress.memory.take_last(),
        }),
        Ending::Error(error) => Some(Exit::Failed(error)),
        Ending::Last => progress.memory.take_last().map(Exit::Failed),
    };
    if exit.is_some() {
        metered::gave_up(why);
    }
    exit
}

/// The event of a refused attempt. Refusing the first attempt of a call is what an open
/// circuit is for, so that is a debug line; refusing a retry ends a loop that would have
/// gone on, which is information.
fn trace_refusal_before_attempt(attempts: u32, refusal: &Refusal) {
    match refusal {
        Refusal::CircuitOpen(open) if attempts == 0 => tracing::debug!(
            target: TARGET, attempts, breaker = open.breaker(), state = open.state().name(),
            "call refused: circuit open"
        ),
        Refusal::CircuitOpen(open) => tracing::info!(
            target: TARGET, attempts, breaker = open.breaker(), state = open.state().name(),
            "retry gave up: circuit open"
        ),
        Refusal::BudgetExhausted(exhausted) => tracing::info!(
            target: TARGET, attempts, requests = exhausted.requests(), retries = exhausted.retries(),
            "retry gave up: retry budget exhausted"
        ),
    }
}

/// The `reason` of a refusal.
fn refused(refusal: &Refusal) -> GaveUp {
    match refusal {
        Refusal::CircuitOpen(_) => GaveUp::CircuitOpen,
        Refusal::BudgetExhausted(_) => GaveUp::BudgetExhausted,
    }
}

/// The event of a refused retry after a failure.
fn trace_refused_retry<E: fmt::Debug>(attempts: u32, refusal: &Refusal, error: &E) {
    metered::gave_up(refused(refusal));
    match refusal {
        Refusal::CircuitOpen(open) => tracing::info!(
            target: TARGET, attempts, breaker = open.breaker(), state = open.state().name(), ?error,
            "retry gave up: circuit open"
        ),
        Refusal::BudgetExhausted(exhausted) => tracing::info!(
            target: TARGET, attempts, requests = exhausted.requests(), retries = exhausted.retries(), ?error,
            "retry gave up: retry budget exhausted"
        ),
    }
}

/// Immediate retries (zero waits) in a row before the loop yields to its executor once.
const IMMEDIATE_RETRIES_PER_YIELD: u32 = 16;

/// Whether the loop should yield before the attempt after `failed_attempt`, when the wait is
/// zero: a zero wait never touches the timer, but a long run of them must not starve the other
/// tasks of a single-threaded executor.
pub(super) fn yields_after(failed_attempt: u32) -> bool {
    failed_attempt % IMMEDIATE_RETRIES_PER_YIELD == 0
}

/// Decides what follows an attempt that returned `value`: `Err(value)` returns it (the loop is
/// over), `Ok(delay)` drops it and waits before the next attempt.
///
/// For an operation that judges no values (every one without [`when_ok`]) the first check
/// is a constant `false` of its type, so the success path keeps the code it had.
///
/// [`when_ok`]: super::Retry::when_ok
///
/// For the loop's breaker, a value judged a failure counts as one (as a timed-out attempt
/// does); any other value is a success. A retry the budget or the breaker refuses returns the
/// value, as running out of attempts does.
#[inline(always)]
pub(super) fn after_value<T, E, Op, C, B, L, G>(
    value: T,
    op: &mut Op,
    checks: &Checks<'_, C>,
    backoff: &mut B,
    stops: Pin<&mut EarlyStop<L, G>>,
    progress: &mut Progress<L::Memory<E>, B::Kept>,
) -> Result<Duration, T>
where
    Op: JudgeOk<T>,
    C: Clock,
    B: Follow<E>,
    L: Limits,
    G: Protection<E>,
{
    let stops = stops.project();
    let (plan, limits, guard) = (checks.plan, &*stops.limits, stops.guard);
    if !Op::JUDGES {
        guard.succeeded(plan.clock());
        return Err(value);
    }
    let attempt = progress.attempt;
    // As for errors, the predicate is never asked after the final attempt.
    if attempt >= checks.max_attempts || !op.retry_ok(&value, attempt + 1) {
        guard.succeeded(plan.clock());
        return Err(value);
    }
    guard.failed(None, plan.clock());
    let delay = scheduled_delay::<E, _, _, _>(checks, backoff, None, progress);
    if let Some((left, _)) = deadline_left(plan, limits, progress) {
        if delay >= left {
            tracing::info!(target: TARGET, attempts = attempt, "retry gave up: deadline exceeded; the last value is returned");
            metered::gave_up(GaveUp::Deadline);
            return Err(value);
        }
    }
    if let Err(refusal) = guard.retry(delay, plan.clock()) {
        trace_refusal_before_attempt(attempt, &refusal);
        metered::gave_up(refused(&refusal));
        return Err(value);
    }
    if checks.warns {
        warn_retrying_value(attempt, delay);
    }
    progress.waited::<E>(delay);
    Ok(delay)
}

/// The event of a retry after a value judged a failure (a value need not be `Debug`).
#[cold]
#[inline(never)]
fn warn_retrying_value(attempt: u32, delay: Duration) {
    tracing::warn!(target: TARGET, attempt, ?delay, "attempt returned a value to retry; retrying");
}
