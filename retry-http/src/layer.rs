//! The tower layer: [`RetryLayer`] wraps any `Service<http::Request<B>>` (hyper-util's
//! client, a tower HTTP stack) in [`RetryService`], whose calls run retry-toolkit's loop over
//! [`Attempts`](crate::attempt::Attempts).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use retry_toolkit::effects::IdempotencyKey;
use retry_toolkit::middleware::WaitForCancellation;
use retry_toolkit::{
    CancelToken, Clock, DefaultClock, EarlyStop, FromPolicy, Hooks, Limited, NamedOp, Retry,
    RetryError,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::attempt::{
    AttemptFuture, Attempts, FirstAttempt, FirstSpare, LayerResponse, SpareParts, call_limits, copy,
};
use crate::body::{ReplayBody, ResponseBody};
use crate::classify::{Classify, DefaultClassify};
use crate::config::{HttpRetry, Shared};
use crate::error::{BoxError, Error, StopReason};
use crate::judge::{
    After, Call, Guard, HintFn, Lost, NotifyFn, TARGET, WhenFn, after_first, finish, guard, hint,
    may_retry, retrying,
};
use crate::method::apply_key;
use crate::target::Target;

/// Retries the calls of the service it wraps under an [`HttpRetry`] policy. Made by
/// [`HttpRetry::layer`].
///
/// **Times nothing unless the policy has limits** (`HttpRetry::default()` has none): set an
/// attempt timeout and a deadline with [`bounded`](crate::HttpRetryBuilder::bounded), or a
/// server that never answers holds the call forever.
///
/// ```no_run
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::Client;
/// use hyper_util::rt::TokioExecutor;
/// use retry_http::HttpRetry;
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
/// let mut client = ServiceBuilder::new().layer(HttpRetry::default().layer()).service(client);
///
/// let request = http::Request::get("http://127.0.0.1:8080/").body(Full::new(Bytes::new()))?;
/// let response = client.ready().await?.call(request).await?;
/// println!("{}", response.status());
/// # Ok(()) }
/// ```
pub struct RetryLayer<P = DefaultClassify, C = DefaultClock> {
    retry: HttpRetry<P, C>,
}

impl<P, C> RetryLayer<P, C> {
    pub(crate) fn new(retry: HttpRetry<P, C>) -> Self {
        RetryLayer { retry }
    }
}

impl<P, C> Clone for RetryLayer<P, C> {
    fn clone(&self) -> Self {
        RetryLayer {
            retry: self.retry.clone(),
        }
    }
}

impl<P, C: fmt::Debug> fmt::Debug for RetryLayer<P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayer")
            .field("retry", &self.retry)
            .finish()
    }
}

impl<S, P, C> Layer<S> for RetryLayer<P, C> {
    type Service = RetryService<S, P, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            shared: Arc::clone(&self.retry.shared),
        }
    }
}

/// A service whose calls are retried: statuses and transport errors worth retrying, a
/// server's `Retry-After`, method safety, replayable bodies, event streams until their first
/// event, attempt timeouts, a deadline and cancellation.
///
/// A request's own [`CancelToken`] (in its extensions) cancels its call; an
/// [`IdempotencyKey`] in its extensions becomes its `Idempotency-Key` header, which makes a
/// POST or PATCH retryable and stays the same on every attempt.
pub struct RetryService<S, P = DefaultClassify, C = DefaultClock> {
    inner: S,
    shared: Arc<Shared<P, C>>,
}

impl<S: Clone, P, C> Clone for RetryService<S, P, C> {
    fn clone(&self) -> Self {
        RetryService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, P, C> fmt::Debug for RetryService<S, P, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The loop one call runs once its first attempt has failed (or from the start, under a
/// budget, a breaker, a deadline or a cancellation token).
type Loop<S, B, ResB, P, C> = Retry<
    NamedOp<Attempts<S, B, ResB, P, C>>,
    AttemptFuture<S, B, ResB, P, C, (S, Request<B>)>,
    Lost<LayerResponse<ResB>>,
    C,
    Hooks<
        FromPolicy,
        WhenFn<LayerResponse<ResB>>,
        NotifyFn<LayerResponse<ResB>>,
        HintFn<LayerResponse<ResB>>,
    >,
    EarlyStop<Limited<Cancel>, Guard>,
>;

impl<S, B, ResB, P, C> Service<Request<B>> for RetryService<S, P, C>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    ResB: Body,
    ResB::Error: Into<BoxError>,
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    type Response = LayerResponse<ResB>;
    type Error = Error;
    type Future = ResponseFuture<S, B, ResB, P, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(|e| {
            tracing::info!(target: TARGET, "http service not ready");
            Error::new(None, 0, StopReason::NotRetryable).with_cause(Some(e.into()))
        })
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let target = Target::of(&request);
        if let Some(key) = request.extensions().get::<IdempotencyKey>().cloned() {
            if let Err(reason) = apply_key(request.headers_mut(), &key) {
                tracing::info!(target: TARGET, method = %target.method, host = %target.host(), %reason, "http request refused");
                crate::metrics::gave_up(reason);
                return ResponseFuture::refused(Error::new(Some(target), 0, reason));
            }
        }
        let shared = &self.shared;
        let cancel = request
            .extensions()
            .get::<CancelToken>()
            .or(shared.cancel.as_ref())
            .map(CancelToken::cancelled);
        let max_attempts = shared.policy.max_attempts();
        let protection = &shared.protection;
        let (limits, deadline_at) = call_limits(shared);
        let alone = protection.is_none() && cancel.is_none();
        if alone {
            // Nothing to admit, no signal to race: the first attempt runs on its own, under
            // its timeout and the call's deadline, and the loop is built only if it fails.
            // Written here, not in a method the request is passed to: the request then goes
            // to the service unmoved, the spare is built where the future keeps it, and a call
            // answered at once moves no loop and few bytes. Timed from before the request is
            // sent. One attempt allowed: nothing needs replaying.
            let body = if max_attempts > 1 {
                request.body().replay()
            } else {
                None
            };
            let replayable = body.is_some() || max_attempts <= 1;
            let call = Call::new(request.method(), request.headers(), replayable, target);
            // The spare keeps no method or URI: the first attempt's target holds the one copy,
            // and gives it to the spare if a retry is needed (a call answered at once copies
            // its URI once).
            let spare = match body {
                Some(body) => Ok((self.inner.clone(), SpareParts::of(&request, body))),
                None => Err(call.clone()),
            };
            // The service `poll_ready` approved takes the request at once (tower's rule: a
            // call may only use a service that `poll_ready` approved): the attempt holds its
            // future alone, and the retries a clone.
            let future = self.inner.call(request);
            return ResponseFuture {
                state: State::First {
                    attempt: FirstAttempt::first(future, call, &self.shared, limits, deadline_at),
                    spare: Some(spare),
                },
            };
        }
        let spare = if max_attempts > 1 {
            copy(&request).map(|request| (self.inner.clone(), request))
        } else {
            None
        };
        // One attempt allowed: nothing needs replaying.
        let replayable = spare.is_some() || max_attempts <= 1;
        let call = Call::new(
            request.method(),
            request.headers(),
            replayable,
            target.clone(),
        );
        // The service made ready goes to this call's first attempt, run by the loop; a clone
        // stays (tower's rule: a call may only use a service that `poll_ready` approved).
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let attempts = Attempts::new(ready, spare, request, Arc::clone(shared), call, deadline_at);
        // Without a token the loop has no signal to poll.
        let limits = Limited::new(shared.deadline, cancel.map(|wait| Cancel(Some(wait))));
        // Boxed: the call's future stays small, so that moving it is cheap.
        let run = looping(attempts, limits, guard(protection), target, shared);
        let state = State::Running { run };
        ResponseFuture { state }
    }
}

/// The loop of a call, built in one step straight into its box (each builder method would
/// move the whole loop, requests included).
fn looping<S, B, ResB, P, C>(
    attempts: Attempts<S, B, ResB, P, C>,
    limits: Limited<Cancel>,
    guard: Guard,
    target: Target,
    shared: &Shared<P, C>,
) -> Boxed<Loop<S, B, ResB, P, C>>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    ResB: Body,
    ResB::Error: Into<BoxError>,
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    let when: WhenFn<LayerResponse<ResB>> = may_retry;
    let notify: NotifyFn<LayerResponse<ResB>> = retrying;
    let hint: HintFn<LayerResponse<ResB>> = hint;
    let hooks = Hooks::new(FromPolicy, when, notify, hint);
    let run = shared
        .policy
        .retry_with(NamedOp(attempts), hooks, EarlyStop::new(limits, guard));
    Box::pin(Looping::new(run, target, shared))
}

/// A call's loop in its box.
type Boxed<L> = Pin<Box<Looping<L>>>;

pin_project! {
    /// The loop of a call, and what its end is read with.
    struct Looping<L> {
        #[pin]
        run: L,
        // Goes to the answer's body (unless an attempt named it) when the loop ends.
        target: Option<Target>,
        max_attempts: u32,
        ceiling: Duration,
    }
}

impl<L> Looping<L> {
    fn new<P, C>(run: L, target: Target, shared: &Shared<P, C>) -> Self {
        Looping {
            run,
            target: Some(target),
            max_attempts: shared.policy.max_attempts(),
            ceiling: shared.policy.max_retry_after(),
        }
    }
}

impl<L, B> Future for Looping<L>
where
    L: Future<Output = Result<LayerResponse<B>, RetryError<Lost<LayerResponse<B>>>>>,
    B: Body,
{
    type Output = Result<LayerResponse<B>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.run.poll(cx) {
            Poll::Ready(outcome) => answer(outcome, this.target, *this.max_attempts, *this.ceiling),
            Poll::Pending => Poll::Pending,
        }
    }
}

pin_project! {
    /// The future of a call through [`RetryService`].
    pub struct ResponseFuture<S, B, ResB, P, C>
    where
        S: Service<Request<B>>,
        ResB: Body,
        C: Clock,
    {
        #[pin]
        state: State<
            FirstAttempt<S, B, ResB, P, C>,
            FirstSpare<S, B>,
            Loop<S, B, ResB, P, C>,
        >,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<A, F, L> {
        // The first attempt, running without the loop; what the retries need, kept for the
        // loop should it fail.
        First { #[pin] attempt: A, spare: Option<F> },
        // The loop is running.
        Running { run: Boxed<L> },
        // The request was refused before anything was sent.
        Refused { error: Option<Error> },
    }
}

impl<S, B, ResB, P, C> ResponseFuture<S, B, ResB, P, C>
where
    S: Service<Request<B>>,
    ResB: Body,
    C: Clock,
{
    fn refused(error: Error) -> Self {
        ResponseFuture {
            state: State::Refused { error: Some(error) },
        }
    }
}

impl<S, B, ResB, P, C> Future for ResponseFuture<S, B, ResB, P, C>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    ResB: Body,
    ResB::Error: Into<BoxError>,
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    type Output = Result<Response<ResponseBody<ResB>>, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        let (failure, spare, shared, deadline_at) = match state.as_mut().project() {
            StateProj::First { mut attempt, spare } => match attempt.as_mut().poll(cx) {
                // The attempt named and reported its answer.
                Poll::Ready(Ok(response)) => return Poll::Ready(Ok(response)),
                Poll::Ready(Err(failure)) => match spare.take() {
                    Some(spare) => {
                        let shared = Arc::clone(attempt.shared());
                        (failure, spare, shared, attempt.deadline_at())
                    }
                    None => return Poll::Pending,
                },
                Poll::Pending => return Poll::Pending,
            },
            StateProj::Running { run } => return run.as_mut().poll(cx),
            StateProj::Refused { error } => {
                return match error.take() {
                    Some(error) => Poll::Ready(Err(error)),
                    None => Poll::Pending,
                };
            }
        };
        // The first attempt failed: the loop takes over from its failure (whether to retry,
        // the wait, the next attempts), as if it had run that attempt itself, with the time
        // left before the deadline; unless the deadline ended the call with that attempt.
        let target = failure.target.clone();
        let (max_attempts, ceiling) = (
            shared.policy.max_attempts(),
            shared.policy.max_retry_after(),
        );
        let (failure, left) =
            match after_first(failure, deadline_at, shared.policy.clock(), max_attempts) {
                After::Loop(failure, left) => (failure, left),
                After::Ended(end) => {
                    return answer(Err(end), &mut Some(target), max_attempts, ceiling);
                }
            };
        // The spare's method and URI, kept in the target until now.
        let spare = spare.map(|(service, parts)| (service, parts.request(&target)));
        let attempts = Attempts::resumed(spare, Arc::clone(&shared), failure, deadline_at);
        let limits = Limited::new(left, None);
        state.set(State::Running {
            run: looping(attempts, limits, guard(&shared.protection), target, &shared),
        });
        match state.project() {
            StateProj::Running { run } => run.as_mut().poll(cx),
            _ => Poll::Pending,
        }
    }
}

/// The loop's end as the call's answer, whose body names the call's target from now on.
fn answer<B: Body>(
    outcome: Result<LayerResponse<B>, RetryError<Lost<LayerResponse<B>>>>,
    target: &mut Option<Target>,
    max_attempts: u32,
    ceiling: Duration,
) -> Poll<Result<LayerResponse<B>, Error>> {
    let Some(target) = target.take() else {
        return Poll::Pending;
    };
    let mut answer = match outcome {
        // The success path: no move through `finish`.
        Ok(response) => Ok(response),
        Err(e) => finish(Err(e), &target, max_attempts, ceiling),
    };
    if let Ok(response) = &mut answer {
        response.body_mut().name(target);
    }
    Poll::Ready(answer)
}

/// The call's cancellation signal: its token's, or none.
pub(crate) struct Cancel(pub(crate) Option<WaitForCancellation>);

impl Future for Cancel {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.get_mut().0 {
            Some(wait) => Pin::new(wait).poll(cx),
            None => Poll::Pending,
        }
    }
}
