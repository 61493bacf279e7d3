//! The loop's `poll`: one step of the state machine per transition.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::decide::{Next, TARGET, after_failure, after_timer, start_attempt, yields_after};
use super::limits::{Exit, Limits, Memory, StopReason, TimerSlot};
use super::{Notify, Retry, RetryAfter, ShouldRetry, State, StateProj};
use crate::backoff::Schedule;
use crate::clock::Clock;

impl<Op, Fut, T, E, C, B, W, N, H, L> Future for Retry<Op, Fut, E, C, B, W, N, H, L>
where
    Op: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    B: Schedule,
    W: ShouldRetry<E>,
    N: Notify<E>,
    H: RetryAfter<E>,
    L: Limits,
{
    type Output = L::Output<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let progress = this.progress;

        // Finished: stays pending, and never polls the cancellation signal again.
        if let StateProj::Done = this.state.as_mut().project() {
            return Poll::Pending;
        }
        // R6: cancellation wins over everything, including a wait in progress.
        if let Some(token) = this.limits.as_mut().poll_cancelled(cx) {
            this.state.set(State::Done);
            tracing::debug!(target: TARGET, attempt = progress.attempt, "retry cancelled");
            let last = Memory::<E>::take_last(&mut progress.memory);
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
                    let timer = match start_attempt(this.plan, &*this.limits, progress) {
                        Ok(timer) => timer,
                        Err(exit) => {
                            this.state.set(State::Done);
                            return Poll::Ready(L::finish(Err(exit)));
                        }
                    };
                    let fut = (this.op)(progress.attempt);
                    let timer = match timer {
                        Some((limit, kind)) => {
                            L::Timer::armed(this.plan.clock().sleep(limit), kind)
                        }
                        None => L::Timer::idle(),
                    };
                    this.state.set(State::Attempt { fut, timer });
                }
                StateProj::Attempt { fut, timer } => {
                    let next = match fut.poll(cx) {
                        Poll::Ready(Ok(value)) => {
                            this.state.set(State::Done);
                            return Poll::Ready(L::finish(Ok(value)));
                        }
                        Poll::Ready(Err(error)) => after_failure(
                            error,
                            this.plan,
                            this.backoff,
                            this.when,
                            this.notify,
                            this.hint,
                            &*this.limits,
                            progress,
                        ),
                        Poll::Pending => match timer.poll_fired(cx) {
                            Some(kind) => {
                                after_timer(kind, this.plan, this.backoff, &*this.limits, progress)
                            }
                            None => return Poll::Pending,
                        },
                    };
                    match next {
                        Next::Stop(exit) => {
                            this.state.set(State::Done);
                            return Poll::Ready(L::finish(Err(exit)));
                        }
                        Next::Wait(delay) if delay.is_zero() => {
                            // No timer for a zero wait, but a long run of immediate retries
                            // yields now and then so other tasks on this thread get to run.
                            this.state.set(State::Start);
                            if yields_after(progress.attempt) {
                                cx.waker().wake_by_ref();
                                return Poll::Pending;
                            }
                        }
                        Next::Wait(delay) => {
                            let sleep = this.plan.clock().sleep(delay);
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
