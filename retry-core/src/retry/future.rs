//! The loop's `poll`: one step of the state machine per transition.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::limits::{Exit, Limits, StopReason};
use super::{Notify, Progress, Retry, RetryAfter, ShouldRetry, State, StateProj, Timer};
use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::jitter::JitterRng;
use crate::policy::RetryPolicy;
use crate::scope::Scope;

const TARGET: &str = "retry_core";

/// What follows a failed attempt.
enum Next<E, Token> {
    /// Wait this long, then start the next attempt.
    Wait(Duration),
    /// The loop is over.
    Stop(Exit<E, Token>),
}

impl<Op, Fut, T, E, C, B, W, N, H, L> Future for Retry<Op, Fut, E, C, B, W, N, H, L>
where
    Op: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    B: Backoff,
    W: ShouldRetry<E>,
    N: Notify<E>,
    H: RetryAfter<E>,
    L: Limits,
{
    type Output = L::Output<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let progress = this.progress;

        // R6: cancellation wins over everything, including a wait in progress.
        if let Some(token) = this.limits.as_mut().poll_cancelled(cx) {
            this.state.set(State::Done);
            tracing::debug!(target: TARGET, attempt = progress.attempt, "retry cancelled");
            let last = progress.last.take();
            let exit = Exit::Stopped {
                token,
                reason: StopReason::Cancelled,
                attempts: progress.attempt,
                last,
            };
            return Poll::Ready(L::finish(Err(exit)));
        }

        loop {
            match this.state.as_mut().project() {
                StateProj::Start => {
                    let mut timer = None;
                    let mut timer_kind = None;
                    if let Some((budget, token)) = this.limits.deadline() {
                        let now = this.policy.clock().now();
                        let started = *progress.started.get_or_insert(now);
                        let left = budget.saturating_sub(now.saturating_duration_since(started));
                        if left.is_zero() {
                            this.state.set(State::Done);
                            return Poll::Ready(L::finish(Err(deadline_exit(token, progress))));
                        }
                        timer = Some(left);
                        timer_kind = Some(Timer::Deadline(token));
                    }
                    if let Some((limit, token)) = this.limits.attempt_timeout() {
                        if timer.is_none_or(|left| limit < left) {
                            timer = Some(limit);
                            timer_kind = Some(Timer::AttemptTimeout(token, limit));
                        }
                    }
                    progress.attempt = progress.attempt.saturating_add(1);
                    let fut = (this.op)(progress.attempt);
                    let timer = timer.map(|d| this.policy.clock().sleep(d));
                    this.state.set(State::Attempt {
                        fut,
                        timer,
                        timer_kind,
                    });
                }
                StateProj::Attempt {
                    fut,
                    timer,
                    timer_kind,
                } => {
                    let next = match fut.poll(cx) {
                        Poll::Ready(Ok(value)) => {
                            this.state.set(State::Done);
                            return Poll::Ready(L::finish(Ok(value)));
                        }
                        Poll::Ready(Err(error)) => after_failure(
                            error,
                            this.policy,
                            this.backoff,
                            this.when,
                            this.notify,
                            this.hint,
                            *this.seed,
                            &*this.limits,
                            progress,
                        ),
                        Poll::Pending => {
                            let fired = timer.as_pin_mut().is_some_and(|t| t.poll(cx).is_ready());
                            match (fired, *timer_kind) {
                                (true, Some(kind)) => after_timer(
                                    kind,
                                    this.policy,
                                    this.backoff,
                                    *this.seed,
                                    &*this.limits,
                                    progress,
                                ),
                                _ => return Poll::Pending,
                            }
                        }
                    };
                    match next {
                        Next::Stop(exit) => {
                            this.state.set(State::Done);
                            return Poll::Ready(L::finish(Err(exit)));
                        }
                        Next::Wait(delay) if delay.is_zero() => this.state.set(State::Start),
                        Next::Wait(delay) => {
                            let sleep = this.policy.clock().sleep(delay);
                            this.state.set(State::Backoff { sleep });
                        }
                    }
                }
                StateProj::Backoff { sleep } => match sleep.poll(cx) {
                    Poll::Ready(()) => this.state.set(State::Start),
                    Poll::Pending => return Poll::Pending,
                },
                StateProj::Done => return Poll::Pending,
            }
        }
    }
}

fn deadline_exit<E, Token>(token: Token, progress: &mut Progress<E>) -> Exit<E, Token> {
    tracing::debug!(target: TARGET, attempt = progress.attempt, "retry deadline exceeded");
    Exit::Stopped {
        token,
        reason: StopReason::Deadline,
        attempts: progress.attempt,
        last: progress.last.take(),
    }
}

/// The time left before the deadline, if the loop has one.
fn deadline_left<E, C: Clock, L: Limits>(
    policy: &RetryPolicy<C>,
    limits: &L,
    progress: &Progress<E>,
) -> Option<(Duration, L::Token)> {
    let (budget, token) = limits.deadline()?;
    let now = policy.clock().now();
    let elapsed = progress
        .started
        .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
    Some((budget.saturating_sub(elapsed), token))
}

/// The next computed wait: the schedule's answer, clamped to the policy's ceiling (SPEC D2).
fn scheduled_delay<E, C, B: Backoff>(
    policy: &RetryPolicy<C>,
    backoff: &mut B,
    seed: Option<u64>,
    progress: &mut Progress<E>,
) -> Duration {
    let rng = progress.rng.get_or_insert_with(|| {
        match seed.or(policy.seed()).or_else(Scope::current_seed) {
            Some(seed) => JitterRng::seeded(seed),
            None => JitterRng::from_entropy(),
        }
    });
    backoff
        .delay(progress.attempt, progress.previous, rng)
        .min(policy.max_delay())
}

/// Decides what follows a failed attempt (SPEC R2, R3, D1, D5, R5).
#[allow(clippy::too_many_arguments)]
fn after_failure<E, C, B, W, N, H, L>(
    error: E,
    policy: &RetryPolicy<C>,
    backoff: &mut B,
    when: &mut W,
    notify: &mut N,
    hint: &mut H,
    seed: Option<u64>,
    limits: &L,
    progress: &mut Progress<E>,
) -> Next<E, L::Token>
where
    C: Clock,
    B: Backoff,
    W: ShouldRetry<E>,
    N: Notify<E>,
    H: RetryAfter<E>,
    L: Limits,
{
    let attempt = progress.attempt;
    if attempt >= policy.max_attempts() {
        tracing::debug!(target: TARGET, attempt, "retry gave up: attempts exhausted");
        return Next::Stop(Exit::Failed(error));
    }
    if !when.should_retry(&error, attempt + 1) {
        tracing::debug!(target: TARGET, attempt, "retry gave up: error not retryable");
        return Next::Stop(Exit::Failed(error));
    }
    let delay = match hint.retry_after(&error) {
        Some(asked) if asked > policy.max_retry_after() => {
            tracing::debug!(
                target: TARGET,
                attempt,
                retry_after_ms = duration_ms(asked),
                "retry gave up: retry-after hint above the policy's ceiling"
            );
            return Next::Stop(Exit::Failed(error));
        }
        Some(asked) => asked,
        None => scheduled_delay(policy, backoff, seed, progress),
    };
    if let Some((left, token)) = deadline_left(policy, limits, progress) {
        if delay >= left {
            progress.last = Some(error);
            return Next::Stop(deadline_exit(token, progress));
        }
    }
    notify.notify(&error, attempt, delay);
    tracing::debug!(target: TARGET, attempt, delay_ms = duration_ms(delay), "attempt failed; retrying");
    progress.previous = delay;
    progress.last = Some(error);
    Next::Wait(delay)
}

/// Decides what follows an attempt cut off by its timer (SPEC R5).
fn after_timer<E, C, B, L>(
    kind: Timer<L::Token>,
    policy: &RetryPolicy<C>,
    backoff: &mut B,
    seed: Option<u64>,
    limits: &L,
    progress: &mut Progress<E>,
) -> Next<E, L::Token>
where
    C: Clock,
    B: Backoff,
    L: Limits,
{
    let (token, timeout) = match kind {
        Timer::Deadline(token) => return Next::Stop(deadline_exit(token, progress)),
        Timer::AttemptTimeout(token, timeout) => (token, timeout),
    };
    let attempt = progress.attempt;
    let stop = Exit::Stopped {
        token,
        reason: StopReason::AttemptTimeout(timeout),
        attempts: attempt,
        last: None,
    };
    if !limits.retries_timeouts() || attempt >= policy.max_attempts() {
        tracing::debug!(target: TARGET, attempt, timeout_ms = duration_ms(timeout), "attempt timed out; giving up");
        return Next::Stop(stop);
    }
    let delay = scheduled_delay(policy, backoff, seed, progress);
    if let Some((left, token)) = deadline_left(policy, limits, progress) {
        if delay >= left {
            return Next::Stop(deadline_exit(token, progress));
        }
    }
    tracing::debug!(target: TARGET, attempt, delay_ms = duration_ms(delay), "attempt timed out; retrying");
    progress.previous = delay;
    Next::Wait(delay)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
