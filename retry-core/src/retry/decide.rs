//! What follows an attempt: the decisions of the retry loop, shared by every driver of it.
//!
//! The loop exists in two shapes: [`Retry`](super::Retry), a hand-written future around a
//! closure, and the driver behind `#[retry]`, a plain `loop` around the function body (a
//! closure cannot lend `&mut self` to each attempt). Both ask these functions what to do after
//! each attempt, so the rules — attempts, predicate, hints and their ceiling, delays, deadline
//! and attempt timeout — are written once.

use std::fmt;
use std::time::Duration;

use super::limits::{Exit, Limits, Memory, StopReason};
use super::{OnRetry, Progress, RetryAfter, ShouldRetry, Timer};
use crate::backoff::Schedule;
use crate::policy::Plan;
use crate::rng::JitterRng;
use crate::time::Clock;

pub(super) const TARGET: &str = "retry_core";

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
/// the deadline has already passed.
#[inline]
pub(super) fn start_attempt<E, C: Clock, L: Limits>(
    plan: &Plan<C>,
    limits: &L,
    progress: &mut Progress<L::Memory<E>>,
) -> Started<E, L::Token> {
    let mut timer = None;
    if let Some((budget, token)) = limits.deadline() {
        let now = plan.clock().now();
        // The wait before this attempt is the last one the loop decided on (zero before the
        // first attempt).
        let waited = progress.previous();
        let spent = Memory::<E>::start(&mut progress.memory, now, waited);
        let left = budget.saturating_sub(spent);
        if left.is_zero() {
            return Err(deadline_exit(token, progress));
        }
        timer = Some((left, Timer::Deadline(token)));
    }
    if let Some((limit, token)) = limits.attempt_timeout() {
        if timer.is_none_or(|(left, _)| limit < left) {
            timer = Some((limit, Timer::AttemptTimeout(token, limit)));
        }
    }
    progress.attempt = progress.attempt.saturating_add(1);
    Ok(timer)
}

fn deadline_exit<E, M: Memory<E>, Token>(
    token: Token,
    progress: &mut Progress<M>,
) -> Exit<E, Token> {
    tracing::info!(target: TARGET, attempts = progress.attempt, "retry gave up: deadline exceeded");
    Exit::Stopped {
        token,
        reason: StopReason::Deadline,
        attempts: progress.attempt,
        last: progress.memory.take_last(),
    }
}

/// The time left before the deadline, if the loop has one.
#[inline]
fn deadline_left<E, C: Clock, L: Limits>(
    plan: &Plan<C>,
    limits: &L,
    progress: &Progress<L::Memory<E>>,
) -> Option<(Duration, L::Token)> {
    let (budget, token) = limits.deadline()?;
    let spent = Memory::<E>::spent(&progress.memory, plan.clock().now());
    Some((budget.saturating_sub(spent), token))
}

/// The next computed wait: the schedule's answer, clamped to the policy's ceiling, and the
/// same in saturating nanoseconds (what the loop remembers as the previous wait).
///
/// The clamp compares nanoseconds with the ceiling's (one multiplication) instead of turning
/// the ceiling's milliseconds into a `Duration` on every failure; only a delay at or above
/// it takes the exact comparison.
#[inline]
fn scheduled_delay<E, C, B: Schedule<E>, M>(
    plan: &Plan<C>,
    backoff: &mut B,
    error: Option<&E>,
    progress: &mut Progress<M>,
) -> (Duration, u64) {
    let previous = progress.previous();
    let policy = plan.backoff(progress.jitter);
    let delay = if backoff.draws_randomly(policy) {
        let rng = progress.rng.get();
        backoff.next_delay(policy, progress.attempt, error, previous, rng)
    } else {
        // A schedule without randomness never reads the generator: no entropy to fetch.
        backoff.next_delay(
            policy,
            progress.attempt,
            error,
            previous,
            &mut JitterRng::placeholder(),
        )
    };
    let nanos = saturating_nanos(delay);
    if nanos < plan.max_delay_nanos() {
        return (delay, nanos);
    }
    let delay = delay.min(plan.max_delay());
    (delay, saturating_nanos(delay))
}

/// `delay` in nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
fn saturating_nanos(delay: Duration) -> u64 {
    u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX)
}

/// Decides what follows a failed attempt.
///
/// Inlined into the loop's out-of-line `drive`, where the default hooks (`Always`, `NoHint`,
/// `Silent`, `Unlimited`) and a schedule's `delay` fold away: a failure costs the checks it
/// needs, not a call with eight arguments.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn after_failure<E, C, B, W, N, H, L>(
    error: E,
    plan: &Plan<C>,
    backoff: &mut B,
    when: &mut W,
    notify: &mut N,
    hint: &mut H,
    limits: &L,
    progress: &mut Progress<L::Memory<E>>,
) -> Next<E, L::Token>
where
    C: Clock,
    B: Schedule<E>,
    W: ShouldRetry<E>,
    N: OnRetry<E>,
    H: RetryAfter<E>,
    L: Limits,
    E: fmt::Debug,
{
    let attempt = progress.attempt;
    if attempt >= plan.max_attempts() {
        tracing::info!(target: TARGET, attempts = attempt, ?error, "retry gave up: attempts exhausted");
        return Next::Stop(Exit::Failed(error));
    }
    if !when.should_retry(&error, attempt + 1) {
        // The caller's predicate decided: worth a debug line, not a log entry per call.
        tracing::debug!(target: TARGET, attempts = attempt, ?error, "retry gave up: error not retryable");
        return Next::Stop(Exit::Failed(error));
    }
    let hinted = hint.retry_after(&error);
    let delay = match hinted {
        Some(asked) if asked > plan.max_retry_after() => {
            tracing::info!(
                target: TARGET,
                attempts = attempt,
                retry_after = ?asked,
                ?error,
                "retry gave up: retry-after hint above the policy's ceiling"
            );
            return Next::Stop(Exit::Failed(error));
        }
        Some(asked) => (asked, saturating_nanos(asked)),
        None => scheduled_delay(plan, backoff, Some(&error), progress),
    };
    let (delay, delay_nanos) = delay;
    if let Some((left, token)) = deadline_left(plan, limits, progress) {
        if delay >= left && hinted.is_some() {
            // D5: a server's hint that outlasts the budget ends the loop with its error.
            tracing::info!(target: TARGET, attempts = attempt, retry_after = ?delay, ?error, "retry gave up: retry-after hint beyond the deadline");
            return Next::Stop(Exit::Failed(error));
        }
        if delay >= left {
            progress.memory.remember(error);
            return Next::Stop(deadline_exit(token, progress));
        }
    }
    notify.notify(&error, attempt, delay);
    tracing::warn!(target: TARGET, attempt, ?delay, ?error, "attempt failed; retrying");
    progress.previous_nanos = delay_nanos;
    progress.memory.remember(error);
    Next::Wait(delay)
}

/// Decides what follows an attempt cut off by its timer.
pub(super) fn after_timer<E, C, B, L>(
    kind: Timer<L::Token>,
    plan: &Plan<C>,
    backoff: &mut B,
    limits: &L,
    progress: &mut Progress<L::Memory<E>>,
) -> Next<E, L::Token>
where
    C: Clock,
    B: Schedule<E>,
    L: Limits,
{
    let (token, timeout) = match kind {
        Timer::Deadline(token) => return Next::Stop(deadline_exit(token, progress)),
        Timer::AttemptTimeout(token, timeout) => (token, timeout),
    };
    let attempt = progress.attempt;
    if attempt >= plan.max_attempts() {
        tracing::info!(target: TARGET, attempts = attempt, ?timeout, "retry gave up: attempt timed out");
        return Next::Stop(Exit::Stopped {
            token,
            reason: StopReason::AttemptTimeout(timeout),
            attempts: attempt,
            last: progress.memory.take_last(),
        });
    }
    let (delay, delay_nanos) = scheduled_delay::<E, _, _, _>(plan, backoff, None, progress);
    if let Some((left, token)) = deadline_left(plan, limits, progress) {
        if delay >= left {
            return Next::Stop(deadline_exit(token, progress));
        }
    }
    tracing::warn!(target: TARGET, attempt, ?timeout, ?delay, "attempt timed out; retrying");
    progress.previous_nanos = delay_nanos;
    Next::Wait(delay)
}

/// Immediate retries (zero waits) in a row before the loop yields to its executor once.
const IMMEDIATE_RETRIES_PER_YIELD: u32 = 16;

/// Whether the loop should yield before the attempt after `failed_attempt`, when the wait is
/// zero: a zero wait never touches the timer, but a long run of them must not starve the other
/// tasks of a single-threaded executor.
pub(super) fn yields_after(failed_attempt: u32) -> bool {
    failed_attempt % IMMEDIATE_RETRIES_PER_YIELD == 0
}
