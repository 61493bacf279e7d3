//! One attempt of a call through the tower layer: [`Attempts`] starts them for the loop,
//! [`AttemptFuture`] runs one — readiness, the call, for an event stream its first event —
//! under the attempt timeout, and judges what came back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use retry_core::{Clock, Operation};
use tower_service::Service;

use crate::body::{ReplayBody, ResponseBody};
use crate::bound::{Bound, exchange_end, watch};
use crate::classify::Classify;
use crate::config::Shared;
use crate::error::BoxError;
use crate::judge::{Call, Failed, Lost, refused, reported};
use crate::method::Safety;
use crate::sse::{FirstEvent, is_event_stream};
use crate::target::Target;

/// What the layer's loop runs: the call's first request on the service that was made ready
/// for it, then copies of both for every retry.
pub(crate) struct Attempts<S, B, P, C> {
    /// The service made ready by the layer's `poll_ready`, the request as given, and what
    /// its attempt judges by.
    first: Option<(S, Request<B>, Call)>,
    /// A spare of the service and the request for the retries, whose head also names each
    /// retry's target; or, when no retry can happen (one attempt allowed, or a body that
    /// cannot be replayed), what a refused retry would name.
    spare: Result<(S, Request<B>), Call>,
    shared: Arc<Shared<P, C>>,
    /// When the call's deadline passes, if it has one: its response bodies end by then.
    deadline_at: Option<Instant>,
}

impl<S, B, P, C> Attempts<S, B, P, C> {
    pub(crate) fn new(
        ready: S,
        spare: Option<(S, Request<B>)>,
        request: Request<B>,
        shared: Arc<Shared<P, C>>,
        call: Call,
        deadline_at: Option<Instant>,
    ) -> Self {
        // The first attempt takes `call`; a retry reads its own from the spare request.
        let (call, spare) = match spare {
            Some(spare) => (call, Ok(spare)),
            None => (call.clone(), Err(call)),
        };
        Attempts {
            first: Some((ready, request, call)),
            spare,
            shared,
            deadline_at,
        }
    }
}

impl<S, B, ResB, P, C> Operation for Attempts<S, B, P, C>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    ResB: Body,
    ResB::Error: Into<BoxError>,
    P: Classify,
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    type Attempt = AttemptFuture<S, B, ResB, P, C>;

    fn start(&mut self, attempt: u32) -> Self::Attempt {
        let (step, call) = match self.first.take() {
            Some((service, request, call)) => (
                Step::Ready {
                    service,
                    request: Some(request),
                },
                call,
            ),
            None => match &self.spare {
                Ok((service, request)) => {
                    // The spare was copied after the key was applied: the same safety.
                    let call = Call {
                        target: Target::of(request),
                        safety: Safety::of(request.method(), request.headers()),
                        replayable: true,
                    };
                    match copy(request) {
                        Some(request) => (
                            Step::Ready {
                                service: service.clone(),
                                request: Some(request),
                            },
                            call,
                        ),
                        None => (Step::Refused, call),
                    }
                }
                Err(call) => (Step::Refused, call.clone()),
            },
        };
        let (clock, timeout) = (self.shared.policy.clock(), self.shared.attempt_timeout);
        let timer = timeout.map(|timeout| clock.sleep(timeout));
        // Read the clock only when a limit will need it.
        let end = match (timeout, self.deadline_at) {
            (None, None) => None,
            (timeout, deadline_at) => exchange_end(
                timeout.map(|timeout| (clock.now(), timeout)),
                deadline_at.zip(self.shared.deadline),
            ),
        };
        AttemptFuture {
            step,
            timer,
            shared: Arc::clone(&self.shared),
            call,
            attempt,
            end,
        }
    }
}

/// A copy of `request` to send again: the same head, extensions included, and a replay of
/// its body.
pub(crate) fn copy<B: ReplayBody>(request: &Request<B>) -> Option<Request<B>> {
    let body = request.body().replay()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    Some(copy)
}

pin_project! {
    /// One attempt in progress. The loop names its type; its output is the response, or the
    /// [`Failure`] the loop's hooks judge.
    pub(crate) struct AttemptFuture<S, B, ResB, P, C>
    where
        S: Service<Request<B>>,
        ResB: Body,
        C: Clock,
    {
        #[pin]
        step: Step<S, Request<B>, S::Future, Pin<Box<FirstEvent<ResB>>>>,
        #[pin]
        timer: Option<C::Sleep>,
        shared: Arc<Shared<P, C>>,
        call: Call,
        attempt: u32,
        // When the exchange, response body included, must be over (if a limit says).
        end: Option<(Instant, Bound)>,
    }
}

pin_project! {
    /// Where the attempt is.
    #[project = StepProj]
    enum Step<S, R, F, W> {
        // Waiting for the service to be ready (at once, for the first attempt).
        Ready { service: S, request: Option<R> },
        // Waiting for the response head.
        Calling { #[pin] future: F },
        // An event stream: waiting for its first event.
        FirstEvent { #[pin] wait: W },
        // The request cannot be sent again (its body did not replay).
        Refused,
        // Finished.
        Done,
    }
}

/// The response a call through the layer returns.
pub(crate) type LayerResponse<ResB> = Response<ResponseBody<ResB>>;

impl<S, B, ResB, P, C> Future for AttemptFuture<S, B, ResB, P, C>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: Body,
    ResB::Error: Into<BoxError>,
    P: Classify,
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    type Output = Result<LayerResponse<ResB>, Lost<LayerResponse<ResB>>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let attempt = *this.attempt;
        loop {
            match this.step.as_mut().project() {
                StepProj::Ready { service, request } => match service.poll_ready(cx) {
                    Poll::Ready(Ok(())) => {
                        let Some(request) = request.take() else {
                            this.step.set(Step::Done);
                            return Poll::Pending;
                        };
                        let future = service.call(request);
                        this.step.set(Step::Calling { future });
                    }
                    Poll::Ready(Err(e)) => {
                        this.step.set(Step::Done);
                        let failed = Failed::Transport(e.into());
                        return Poll::Ready(Err(failed_attempt(
                            this.call,
                            this.shared,
                            attempt,
                            failed,
                        )));
                    }
                    Poll::Pending => break,
                },
                StepProj::Calling { future } => match future.poll(cx) {
                    Poll::Ready(Ok(response)) => {
                        let wait_for_event = this.shared.first_event
                            && response.status().is_success()
                            && is_event_stream(response.headers());
                        if wait_for_event {
                            let target = this.call.target.clone();
                            // Boxed: only event streams pay for the room it takes.
                            let wait = Box::pin(FirstEvent::new(response, target, attempt));
                            this.step.set(Step::FirstEvent { wait });
                            continue;
                        }
                        this.step.set(Step::Done);
                        // An event stream lasts as long as it lasts: only its idle timeout.
                        let stream = is_event_stream(response.headers());
                        let (head, body) = response.into_parts();
                        let shared = &**this.shared;
                        let watch = watch(
                            shared.policy.clock(),
                            *this.end,
                            shared.idle_timeout,
                            stream,
                        );
                        // Named by the layer when the call returns it.
                        let body = ResponseBody::direct(body, None, attempt).with_watch(watch);
                        return Poll::Ready(judged(this.call, this.shared, attempt, head, body));
                    }
                    Poll::Ready(Err(e)) => {
                        this.step.set(Step::Done);
                        let failed = Failed::Transport(e.into());
                        return Poll::Ready(Err(failed_attempt(
                            this.call,
                            this.shared,
                            attempt,
                            failed,
                        )));
                    }
                    Poll::Pending => break,
                },
                StepProj::FirstEvent { wait } => match wait.poll(cx) {
                    Poll::Ready(Ok(response)) => {
                        this.step.set(Step::Done);
                        let shared = &**this.shared;
                        let watch = watch(shared.policy.clock(), None, shared.idle_timeout, true);
                        let response = response.map(|body| body.with_watch(watch));
                        return Poll::Ready(Ok(reported(response, attempt)));
                    }
                    Poll::Ready(Err(e)) => {
                        this.step.set(Step::Done);
                        let failed = Failed::Stream(e.into());
                        return Poll::Ready(Err(failed_attempt(
                            this.call,
                            this.shared,
                            attempt,
                            failed,
                        )));
                    }
                    Poll::Pending => break,
                },
                StepProj::Refused => {
                    this.step.set(Step::Done);
                    return Poll::Ready(Err(refused(this.call, attempt)));
                }
                StepProj::Done => return Poll::Pending,
            }
        }
        // Waiting: the attempt timeout may end it.
        if let Some(timer) = this.timer.as_pin_mut() {
            if timer.poll(cx).is_ready() {
                this.step.set(Step::Done);
                let timeout = this.shared.attempt_timeout.unwrap_or_default();
                let failed = Failed::TimedOut(timeout);
                return Poll::Ready(Err(failed_attempt(this.call, this.shared, attempt, failed)));
            }
        }
        Poll::Pending
    }
}

/// A response head judged: the answer, or a failure worth retrying.
/// What an attempt that failed before its response says to the loop.
fn failed_attempt<ResB: Body, P: Classify, C>(
    call: &Call,
    shared: &Shared<P, C>,
    attempt: u32,
    failed: Failed,
) -> Lost<LayerResponse<ResB>> {
    let hook = shared.notify.as_ref();
    call.judge_error(&shared.classify, &shared.protection, hook, attempt, failed)
}

fn judged<ResB: Body, P: Classify, C: Clock>(
    call: &Call,
    shared: &Shared<P, C>,
    attempt: u32,
    head: http::response::Parts,
    body: ResponseBody<ResB>,
) -> Result<LayerResponse<ResB>, Lost<LayerResponse<ResB>>> {
    let response = Response::from_parts(head, body);
    call.judge_response(
        &shared.classify,
        &shared.protection,
        shared.policy.clock(),
        shared.notify.as_ref(),
        attempt,
        response,
    )
    .map(|response| reported(response, attempt))
}
