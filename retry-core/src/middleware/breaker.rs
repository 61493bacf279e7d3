//! The breaker transform: send every run through a shared [`CircuitBreaker`].
//!
//! A retry layer protects one run; a breaker protects the dependency from all of them. Put
//! it inside the retry layer, `with_retry(with_breaker(f, &BREAKER), config)`, and every
//! attempt is one call through the breaker: once the circuit opens, the next attempt fails at
//! once with [`TaskFailure::CircuitOpen`], which the default classification does not retry,
//! so the loop ends without sending anything. Outside it, `with_breaker(with_retry(f, …))`,
//! a whole retried run counts as one call.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::error::{TaskFailure, classify};
use crate::protection::{CircuitBreaker, Ticket};
use crate::time::{Clock, DefaultClock};

use super::context::TaskContext;
use super::task::Task;

/// Decides which failures of a run count against the breaker. Implemented by any
/// `Fn(&TaskFailure) -> bool`.
///
/// Never asked about a run that did not reach the dependency — cancelled, refused by an inner
/// breaker, or by a scheduler's queue: those report nothing. A failure that does not count is
/// a success for the breaker: the dependency answered.
pub trait CountsAgainst {
    /// `true` if `error` counts as a failure of the dependency.
    fn counts(&self, error: &TaskFailure) -> bool;
}

impl<F: Fn(&TaskFailure) -> bool> CountsAgainst for F {
    fn counts(&self, error: &TaskFailure) -> bool {
        self(error)
    }
}

/// The default: a timeout, and every failure the default [`classify`]cation retries, count.
/// A [`TaskError`](crate::TaskError) that is not retryable (a bad request, a business rule)
/// is the dependency answering, so it does not.
#[derive(Clone, Copy, Debug, Default)]
pub struct Transient;

impl CountsAgainst for Transient {
    fn counts(&self, error: &TaskFailure) -> bool {
        error.is_timeout() || classify(error)
    }
}

/// Sends every run of `task` through `breaker`, counting the failures of [`Transient`].
///
/// A run the breaker refuses fails at once with [`TaskFailure::CircuitOpen`], without
/// starting the task. The breaker is asked when the run's future is first polled, so a run
/// that waits in a queue asks at the time it runs. `breaker` is anything that derefs to the
/// breaker: `&BREAKER` for a `static`, an `Arc<CircuitBreaker>`. Time is read from the
/// [`DefaultClock`].
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::middleware::with_breaker;
/// use retry_toolkit::{CircuitBreaker, Task, TaskContext, TaskError, TaskFailure};
///
/// static INVENTORY: CircuitBreaker = CircuitBreaker::with_config(
///     match CircuitBreaker::builder().name("inventory").consecutive_failures(2).validate() {
///         Ok(config) => config,
///         Err(e) => panic!("{}", e.message()),
///     },
/// );
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let down = |_: TaskContext| async { Err::<(), TaskFailure>(TaskError::new("503").with_retryable(true).into()) };
/// let task = with_breaker(down, &INVENTORY);
/// assert_eq!(task.run().await.unwrap_err().to_string(), "503");
/// assert_eq!(task.run().await.unwrap_err().to_string(), "503");
/// let refused = task.run().await.unwrap_err(); // not sent
/// assert!(refused.is_circuit_open());
/// assert_eq!(refused.to_string(), "circuit `inventory` is open: calls are refused for another 5s");
/// # }
/// ```
pub fn with_breaker<F, B>(task: F, breaker: B) -> BreakerTask<F, B>
where
    F: Task,
    B: Deref<Target = CircuitBreaker>,
{
    with_breaker_when(task, breaker, Transient)
}

/// Like [`with_breaker`], with `counts` deciding which failures count against the breaker.
///
/// ```
/// use retry_toolkit::middleware::with_breaker_when;
/// use retry_toolkit::{CircuitBreaker, TaskContext, TaskFailure};
///
/// static SEARCH: CircuitBreaker = CircuitBreaker::new();
/// // Only timeouts count: a slow search is the one to stop calling.
/// let task = with_breaker_when(|_: TaskContext| async { Ok::<_, TaskFailure>(()) }, &SEARCH, |e: &TaskFailure| e.is_timeout());
/// # let _ = task;
/// ```
pub fn with_breaker_when<F, B, C>(task: F, breaker: B, counts: C) -> BreakerTask<F, B, C>
where
    F: Task,
    B: Deref<Target = CircuitBreaker>,
    C: CountsAgainst,
{
    BreakerTask {
        shared: Arc::new(Shared {
            task,
            breaker,
            counts,
        }),
    }
}

/// A task wrapped by [`with_breaker`] or [`with_breaker_when`].
pub struct BreakerTask<F, B, C = Transient> {
    shared: Arc<Shared<F, B, C>>,
}

struct Shared<F, B, C> {
    task: F,
    breaker: B,
    counts: C,
}

impl<F, B, C> Clone for BreakerTask<F, B, C> {
    fn clone(&self) -> Self {
        BreakerTask {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<F, B: Deref<Target = CircuitBreaker>, C> fmt::Debug for BreakerTask<F, B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerTask")
            .field("breaker", &self.shared.breaker.name())
            .finish_non_exhaustive()
    }
}

impl<F, B, C> Task for BreakerTask<F, B, C>
where
    F: Task,
    B: Deref<Target = CircuitBreaker>,
    C: CountsAgainst,
{
    type Output = F::Output;
    type Future = BreakerFuture<F, B, C>;

    fn call(&self, cx: TaskContext) -> Self::Future {
        BreakerFuture {
            fut: None,
            cx: Some(cx),
            held: Held {
                shared: Arc::clone(&self.shared),
                ticket: None,
            },
        }
    }
}

pin_project! {
    /// The future of one run of a [`BreakerTask`]: asks the breaker when first polled, then
    /// starts the task.
    #[must_use = "futures do nothing unless polled"]
    pub struct BreakerFuture<F: Task, B: Deref<Target = CircuitBreaker>, C> {
        #[pin]
        fut: Option<F::Future>,
        // The run's context, until the run starts.
        cx: Option<TaskContext>,
        held: Held<F, B, C>,
    }
}

/// The layer and the run's place in its breaker, given back if the run is dropped
/// unfinished.
struct Held<F, B: Deref<Target = CircuitBreaker>, C> {
    shared: Arc<Shared<F, B, C>>,
    ticket: Option<Ticket>,
}

impl<F, B: Deref<Target = CircuitBreaker>, C> Drop for Held<F, B, C> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.shared.breaker.release(ticket);
        }
    }
}

impl<F: Task, B: Deref<Target = CircuitBreaker>, C> fmt::Debug for BreakerFuture<F, B, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerFuture")
            .field("breaker", &self.held.shared.breaker.name())
            .finish_non_exhaustive()
    }
}

impl<F, B, C> Future for BreakerFuture<F, B, C>
where
    F: Task,
    B: Deref<Target = CircuitBreaker>,
    C: CountsAgainst,
{
    type Output = Result<F::Output, TaskFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut slot = this.fut;
        let held = this.held;
        if let Some(run) = this.cx.take() {
            match held.shared.breaker.admit(|| DefaultClock.now()) {
                Ok(ticket) => held.ticket = Some(ticket),
                Err(open) => {
                    tracing::debug!(
                        target: "retry_toolkit::middleware",
                        breaker = open.breaker(),
                        state = open.state().name(),
                        "task refused: circuit open"
                    );
                    return Poll::Ready(Err(TaskFailure::CircuitOpen(open)));
                }
            }
            slot.set(Some(held.shared.task.call(run)));
        }
        let Some(fut) = slot.as_mut().as_pin_mut() else {
            return Poll::Pending; // finished (or refused): stays pending
        };
        let outcome = ready!(fut.poll(cx));
        slot.set(None);
        if let Some(ticket) = held.ticket.take() {
            let shared = &*held.shared;
            let breaker = &*shared.breaker;
            match &outcome {
                Ok(_) => breaker.succeeded(ticket, || DefaultClock.now()),
                // These never reached the dependency: no outcome to report.
                Err(
                    TaskFailure::Cancelled
                    | TaskFailure::CircuitOpen(_)
                    | TaskFailure::QueueFull { .. }
                    | TaskFailure::QueueStopped,
                ) => breaker.release(ticket),
                Err(error) if shared.counts.counts(error) => {
                    breaker.failed(ticket, DefaultClock.now());
                }
                Err(_) => breaker.succeeded(ticket, || DefaultClock.now()),
            }
        }
        Poll::Ready(outcome)
    }
}
