//! The fallback transform: answer with a second task when the first fails.
//!
//! A fallback answers with something second-best — a cached value, a default, a degraded
//! mode. That is right for a business failure, and wrong by default for a *structural* one:
//! a cancelled task's caller no longer wants any answer, and a timed-out one's budget is
//! spent. So the default policy refuses `Cancelled`, `Timeout` and a non-retryable
//! [`TaskError`](crate::TaskError). "Time out, then read the cache" is a legitimate choice,
//! but it must be written down: pass a policy that admits `Timeout`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::error::TaskFailure;

use super::context::TaskContext;
use super::task::Task;

/// Decides whether a failure of the primary task runs the fallback. Implemented by any
/// `Fn(&TaskFailure) -> bool`.
///
/// Never consulted for [`TaskFailure::Cancelled`], nor once the run has been asked to stop:
/// nothing new is started for a caller that has gone.
pub trait ShouldFallback {
    /// `true` to answer `error` with the fallback.
    fn should_fallback(&self, error: &TaskFailure) -> bool;
}

impl<F: Fn(&TaskFailure) -> bool> ShouldFallback for F {
    fn should_fallback(&self, error: &TaskFailure) -> bool {
        self(error)
    }
}

/// The default policy: falls back on every failure except `Cancelled`, `Timeout`
/// and a [`TaskError`](crate::TaskError) that is not retryable, which are returned as they
/// are.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultFallback;

impl ShouldFallback for DefaultFallback {
    fn should_fallback(&self, error: &TaskFailure) -> bool {
        match error {
            TaskFailure::Cancelled | TaskFailure::Timeout(_) => false,
            TaskFailure::Task(e) => e.retryable(),
            _ => true,
        }
    }
}

/// Runs `fallback` when `primary` fails, under the [`DefaultFallback`] policy.
///
/// ```
/// use retry_toolkit::middleware::with_fallback;
/// use retry_toolkit::{Task, TaskContext, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let primary = |_: TaskContext| async { Err::<&str, _>(TaskFailure::from("upstream 502")) };
/// let cached = |_: TaskContext| async { Ok::<_, TaskFailure>("cached") };
/// assert_eq!(with_fallback(primary, cached).run().await.ok(), Some("cached"));
/// # }
/// ```
pub fn with_fallback<P, F>(primary: P, fallback: F) -> FallbackTask<P, F>
where
    P: Task,
    F: Task<Output = P::Output>,
{
    FallbackTask {
        primary,
        rest: Arc::new(Rest {
            fallback,
            should_fallback: DefaultFallback,
        }),
    }
}

/// Runs `fallback` when `primary` fails and `should_fallback` admits the failure.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::middleware::{with_fallback_when, with_timeout};
/// use retry_toolkit::{Task, TaskContext, TaskFailure};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let live = |cx: TaskContext| async move {
///     cx.sleep(Duration::from_secs(5)).await?;
///     Ok::<_, TaskFailure>("live")
/// };
/// let cached = |_: TaskContext| async { Ok::<_, TaskFailure>("cached") };
/// // Time out, then read the cache: admitted explicitly.
/// let task = with_fallback_when(with_timeout(live, Duration::from_millis(100))?, cached, |e| {
///     e.is_timeout()
/// });
/// assert_eq!(task.run().await?, "cached");
/// # Ok(()) }
/// ```
pub fn with_fallback_when<P, F, S>(
    primary: P,
    fallback: F,
    should_fallback: S,
) -> FallbackTask<P, F, S>
where
    P: Task,
    F: Task<Output = P::Output>,
    S: Fn(&TaskFailure) -> bool,
{
    FallbackTask {
        primary,
        rest: Arc::new(Rest {
            fallback,
            should_fallback,
        }),
    }
}

/// A task wrapped by [`with_fallback`] or [`with_fallback_when`].
pub struct FallbackTask<P, F, S = DefaultFallback> {
    primary: P,
    rest: Arc<Rest<F, S>>,
}

/// What a run needs after the primary failed.
struct Rest<F, S> {
    fallback: F,
    should_fallback: S,
}

impl<P: Clone, F, S> Clone for FallbackTask<P, F, S> {
    fn clone(&self) -> Self {
        Self {
            primary: self.primary.clone(),
            rest: Arc::clone(&self.rest),
        }
    }
}

impl<P, F, S> fmt::Debug for FallbackTask<P, F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackTask").finish_non_exhaustive()
    }
}

impl<P, F, S> Task for FallbackTask<P, F, S>
where
    P: Task,
    F: Task<Output = P::Output>,
    S: ShouldFallback,
{
    type Output = P::Output;
    type Future = FallbackFuture<P::Future, F, S>;

    fn call(&self, cx: TaskContext) -> Self::Future {
        FallbackFuture {
            state: State::Primary {
                fut: self.primary.call(cx.clone()),
            },
            rest: Arc::clone(&self.rest),
            cx,
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<P, F> {
        // The primary task runs.
        Primary { #[pin] fut: P },
        // The primary failed and was admitted; the fallback runs.
        Fallback { #[pin] fut: F },
        // Finished; polled again it stays pending.
        Done,
    }
}

pin_project! {
    /// The future of one run of a [`FallbackTask`].
    #[must_use = "futures do nothing unless polled"]
    pub struct FallbackFuture<PF, F: Task, S> {
        #[pin]
        state: State<PF, F::Future>,
        rest: Arc<Rest<F, S>>,
        cx: TaskContext,
    }
}

impl<PF, F: Task, S> fmt::Debug for FallbackFuture<PF, F, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Primary { .. } => "primary",
            State::Fallback { .. } => "fallback",
            State::Done => "done",
        };
        f.debug_struct("FallbackFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<T, PF, F, S> Future for FallbackFuture<PF, F, S>
where
    PF: Future<Output = Result<T, TaskFailure>>,
    F: Task<Output = T>,
    S: ShouldFallback,
{
    type Output = Result<T, TaskFailure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Primary { fut } => {
                    let error = match ready!(fut.poll(cx)) {
                        Ok(value) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(value));
                        }
                        Err(error) => error,
                    };
                    let admitted = !error.is_cancelled()
                        && !this.cx.is_cancelled()
                        && this.rest.should_fallback.should_fallback(&error);
                    if !admitted {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(error));
                    }
                    tracing::debug!(target: "retry_toolkit::middleware", %error, "primary task failed; running the fallback");
                    let fut = this.rest.fallback.call(this.cx.clone());
                    this.state.set(State::Fallback { fut });
                }
                StateProj::Fallback { fut } => {
                    let result = ready!(fut.poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(result);
                }
                StateProj::Done => return Poll::Pending,
            }
        }
    }
}
