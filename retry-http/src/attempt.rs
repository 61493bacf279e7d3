//! One attempt of a call through the tower layer: [`Attempts`] starts them for the loop,
//! [`AttemptFuture`] runs one — readiness, the call, for an event stream its first event —
//! under the attempt timeout, and judges what came back.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Extensions, HeaderMap, Request, Response, Version};
use http_body::Body;
use pin_project_lite::pin_project;
use retry_toolkit::{Clock, Operation};
use tower_service::Service;

use crate::body::{ReplayBody, ResponseBody};
use crate::bound::{BodyClock, Bound, Limits, answer_timing, watch};
use crate::classify::Classify;
use crate::config::Shared;
use crate::error::BoxError;
use crate::error::RetryReport;
use crate::judge::{Call, Failed, Lost, deadline_passed, put, refused, reported};
use crate::sse::{FirstEvent, is_event_stream};
use crate::target::Target;

/// What the layer's loop runs: the call's first request on the service that was made ready
/// for it (or the failure it already ended with, when the loop is built after it), then
/// copies of both for every retry.
pub(crate) struct Attempts<S, B, ResB: Body, P, C> {
    /// The service made ready by the layer's `poll_ready`, the request as given, and what
    /// its attempt judges by.
    first: Option<(S, Request<B>, Call)>,
    /// The first attempt's failure, when it ran before the loop was built: the loop's first
    /// attempt returns it.
    failed: Option<Lost<LayerResponse<ResB>>>,
    /// What the retries send (see [`Spare`]).
    spare: Spare<S, B>,
    shared: Arc<Shared<P, C>>,
    /// When the call's deadline passes, if it has one: its response bodies end by then.
    deadline_at: Option<Instant>,
}

/// A spare of the service and the request for the retries, whose head also names each
/// retry's target; or, when no retry can happen (one attempt allowed, or a body that cannot
/// be replayed), what a refused retry would name.
pub(crate) type Spare<S, B> = Result<(S, Request<B>), Call>;

/// What the first attempt judges by, and the spare the retries will use.
#[inline]
fn split<S, B>(call: Call, spare: Option<(S, Request<B>)>) -> (Call, Spare<S, B>) {
    // The first attempt takes `call`; a retry reads its own from the spare request.
    match spare {
        Some(spare) => (call, Ok(spare)),
        None => (call.clone(), Err(call)),
    }
}

impl<S, B, ResB: Body, P, C> Attempts<S, B, ResB, P, C> {
    pub(crate) fn new(
        ready: S,
        spare: Option<(S, Request<B>)>,
        request: Request<B>,
        shared: Arc<Shared<P, C>>,
        call: Call,
        deadline_at: Option<Instant>,
    ) -> Self {
        let (call, spare) = split(call, spare);
        Attempts {
            first: Some((ready, request, call)),
            failed: None,
            spare,
            shared,
            deadline_at,
        }
    }

    /// The attempts of a call whose first attempt ran on its own and failed with `failed`;
    /// the call's deadline, if it has one, passes at `deadline_at`.
    pub(crate) fn resumed(
        spare: Spare<S, B>,
        shared: Arc<Shared<P, C>>,
        failed: Lost<LayerResponse<ResB>>,
        deadline_at: Option<Instant>,
    ) -> Self {
        Attempts {
            first: None,
            failed: Some(failed),
            spare,
            shared,
            deadline_at,
        }
    }
}

impl<S, B, ResB, P, C> Operation for Attempts<S, B, ResB, P, C>
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
    type Attempt = AttemptFuture<S, B, ResB, P, C, (S, Request<B>)>;

    fn start(&mut self, attempt: u32) -> Self::Attempt {
        if let Some(failure) = self.failed.take() {
            let call = failure.call();
            let step = Step::Lost {
                failure: Some(failure),
            };
            // It waits for nothing: no limits.
            return AttemptFuture::of(step, call, attempt, &self.shared, None, None);
        }
        let (step, call) = match self.first.take() {
            Some((service, request, call)) => (
                Step::Ready {
                    unsent: Some((service, request)),
                },
                call,
            ),
            None => match &self.spare {
                Ok((service, request)) => {
                    // The spare was copied after the key was applied: the same safety.
                    let target = Target::of(request);
                    let call = Call::new(request.method(), request.headers(), true, target);
                    match copy(request) {
                        Some(request) => (
                            Step::Ready {
                                unsent: Some((service.clone(), request)),
                            },
                            call,
                        ),
                        None => (Step::Refused, call),
                    }
                }
                Err(call) => (Step::Refused, call.clone()),
            },
        };
        let limits = attempt_limits(&self.shared, self.deadline_at);
        AttemptFuture::of(step, call, attempt, &self.shared, limits, self.deadline_at)
    }
}

/// A call's first attempt, run before (and without) the loop: its request was sent already,
/// so its future has no room for one.
pub(crate) type FirstAttempt<S, B, ResB, P, C> = AttemptFuture<S, B, ResB, P, C, Infallible>;

/// What an attempt sends once its service is ready: the service and the request, or nothing
/// at all for an attempt whose service was called already (`Infallible`: no room taken).
pub(crate) trait Unsent<S: Service<Request<B>>, B> {
    /// The service to make ready.
    fn service(&mut self) -> &mut S;
    /// Sends the request through the service, which is ready.
    fn send(self) -> S::Future;
    /// Whether the attempt ends itself at the call's deadline: one whose request was sent
    /// before the loop existed, and runs without it. The loop's own leave that to the loop.
    const OWN_DEADLINE: bool;
}

impl<S: Service<Request<B>>, B> Unsent<S, B> for (S, Request<B>) {
    const OWN_DEADLINE: bool = false;

    fn service(&mut self) -> &mut S {
        &mut self.0
    }

    fn send(self) -> S::Future {
        let (mut service, request) = self;
        service.call(request)
    }
}

impl<S: Service<Request<B>>, B> Unsent<S, B> for Infallible {
    const OWN_DEADLINE: bool = true;

    fn service(&mut self) -> &mut S {
        match *self {}
    }

    fn send(self) -> S::Future {
        match self {}
    }
}

impl<S, B, ResB, P, C> FirstAttempt<S, B, ResB, P, C>
where
    S: Service<Request<B>>,
    ResB: Body,
    C: Clock + Clone,
{
    /// A call's first attempt, run before (and without) the loop: the service that was made
    /// ready for the request was called with it already, `future` is its answer.
    #[inline]
    pub(crate) fn first(
        future: S::Future,
        call: Call,
        shared: &Arc<Shared<P, C>>,
        limits: Option<Limits<C>>,
        deadline_at: Option<Instant>,
    ) -> Self {
        let step = Step::Calling { future };
        AttemptFuture::of(step, call, 1, shared, limits, deadline_at)
    }
}

impl<S, B, ResB, P, C, Q> AttemptFuture<S, B, ResB, P, C, Q>
where
    S: Service<Request<B>>,
    ResB: Body,
    C: Clock + Clone,
{
    /// The policy the attempt runs under.
    pub(crate) fn shared(&self) -> &Arc<Shared<P, C>> {
        &self.shared
    }

    /// When the call's deadline passes, if it has one.
    pub(crate) fn deadline_at(&self) -> Option<Instant> {
        self.deadline_at
    }

    #[inline]
    fn of(
        step: AttemptStep<S, B, ResB, Q>,
        call: Call,
        attempt: u32,
        shared: &Arc<Shared<P, C>>,
        limits: Option<Limits<C>>,
        deadline_at: Option<Instant>,
    ) -> Self {
        AttemptFuture {
            step,
            limits,
            deadline_at,
            shared: Arc::clone(shared),
            call: Some(call),
            attempt,
        }
    }
}

/// The limits of an attempt that starts now under `shared`'s policy, in a call whose deadline
/// passes at `deadline_at`: `None` when the policy sets neither a timeout nor a deadline.
/// Inlined: an attempt without limits (the default) decides that in two tests.
#[inline]
pub(crate) fn attempt_limits<P, C: Clock>(
    shared: &Shared<P, C>,
    deadline_at: Option<Instant>,
) -> Option<Limits<C>> {
    if shared.attempt_timeout.is_none() && deadline_at.is_none() {
        return None;
    }
    Some(Limits::Due(shared.policy.clock().now()))
}

/// The limits of a call's first attempt, which starts now, and when the call's deadline
/// passes, if the policy sets one: one reading of the clock, none without limits.
#[inline]
pub(crate) fn call_limits<P, C: Clock>(
    shared: &Shared<P, C>,
) -> (Option<Limits<C>>, Option<Instant>) {
    if shared.attempt_timeout.is_none() && shared.deadline.is_none() {
        return (None, None);
    }
    let now = shared.policy.clock().now();
    (Some(Limits::Due(now)), shared.deadline_from(|| now))
}

/// A copy of `request` to send again: the same head, extensions included, and a replay of
/// its body. Always inlined: the copy is then built where its caller keeps it, not returned
/// and moved there (`#[inline]` alone left it out of line).
#[inline(always)]
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

/// What a first attempt run alone keeps for the retries: its request's head but the method
/// and URI, which the call's target holds already, and a replay of its body. A request again
/// only if a retry is needed; until then the call's future has no room for a second URI.
pub(crate) struct SpareParts<B> {
    version: Version,
    headers: HeaderMap,
    extensions: Extensions,
    body: B,
}

impl<B> SpareParts<B> {
    /// `request`'s parts, with `body` (a replay of its own). Always inlined: they are then
    /// built where the call's future keeps them.
    #[inline(always)]
    pub(crate) fn of(request: &Request<B>, body: B) -> Self {
        SpareParts {
            version: request.version(),
            headers: request.headers().clone(),
            extensions: request.extensions().clone(),
            body,
        }
    }

    /// The request to send again to `target`.
    pub(crate) fn request(self, target: &Target) -> Request<B> {
        let mut request = Request::new(self.body);
        *request.method_mut() = target.method.clone();
        *request.uri_mut() = target.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers;
        *request.extensions_mut() = self.extensions;
        request
    }
}

/// What a first attempt run alone keeps for the retries: a spare of the service and the
/// request's [`SpareParts`]; or, when no retry can happen, what a refused retry would name.
pub(crate) type FirstSpare<S, B> = Result<(S, SpareParts<B>), Call>;

pin_project! {
    /// One attempt in progress. The loop names its type; its output is the response, or the
    /// [`Failure`] the loop's hooks judge.
    pub(crate) struct AttemptFuture<S, B, ResB, P, C, Q>
    where
        S: Service<Request<B>>,
        ResB: Body,
        C: Clock,
    {
        #[pin]
        step: Step<Q, S::Future, Pin<Box<FirstEvent<ResB>>>, Lost<LayerResponse<ResB>>>,
        shared: Arc<Shared<P, C>>,
        // What the attempt judges by; its target goes to the answer's body.
        call: Option<Call>,
        attempt: u32,
        // Its timeout and when its exchange must be over, if the policy sets either; the
        // answer's body takes them over.
        limits: Option<Limits<C>>,
        // When the call's deadline passes, if it has one (what the loop needs after a first
        // attempt run without it).
        deadline_at: Option<Instant>,
    }
}

pin_project! {
    /// Where the attempt is.
    #[project = StepProj]
    enum Step<Q, F, W, L> {
        // Waiting for the service to be ready, to send the request (both in `unsent`).
        Ready { unsent: Option<Q> },
        // Waiting for the response head.
        Calling { #[pin] future: F },
        // An event stream: waiting for its first event.
        FirstEvent { #[pin] wait: W },
        // The request cannot be sent again (its body did not replay).
        Refused,
        // The attempt ran before the loop and failed so.
        Lost { failure: Option<L> },
        // Finished.
        Done,
    }
}

/// Where an attempt through service `S` is.
type AttemptStep<S, B, ResB, Q> = Step<
    Q,
    <S as Service<Request<B>>>::Future,
    Pin<Box<FirstEvent<ResB>>>,
    Lost<LayerResponse<ResB>>,
>;

/// The response a call through the layer returns.
pub(crate) type LayerResponse<ResB> = Response<ResponseBody<ResB>>;

impl<S, B, ResB, P, C, Q> Future for AttemptFuture<S, B, ResB, P, C, Q>
where
    Q: Unsent<S, B>,
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: Body,
    ResB::Error: Into<BoxError>,
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    type Output = Result<LayerResponse<ResB>, Lost<LayerResponse<ResB>>>;

    // Inlined into its one caller (the call's future, or the loop's): the answer is then
    // built where the caller returns it, not moved out of here first.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let attempt = *this.attempt;
        // Taken only when the attempt is over.
        let Some(call) = this.call.as_ref() else {
            return Poll::Pending;
        };
        loop {
            match this.step.as_mut().project() {
                StepProj::Ready { unsent } => {
                    match unsent.as_mut().map(|u| u.service().poll_ready(cx)) {
                        Some(Poll::Ready(Ok(()))) => {
                            let Some(unsent) = unsent.take() else {
                                this.step.set(Step::Done);
                                return Poll::Pending;
                            };
                            let future = unsent.send();
                            this.step.set(Step::Calling { future });
                        }
                        Some(Poll::Ready(Err(e))) => {
                            this.step.set(Step::Done);
                            let failed = Failed::Transport(e.into());
                            return Poll::Ready(Err(failed_attempt(
                                call,
                                this.shared,
                                attempt,
                                failed,
                            )));
                        }
                        Some(Poll::Pending) => break,
                        None => {
                            this.step.set(Step::Done);
                            return Poll::Pending;
                        }
                    }
                }
                StepProj::Calling { future } => match future.poll(cx) {
                    Poll::Ready(Ok(response)) => {
                        // An event stream lasts as long as it lasts: only its idle timeout.
                        let stream = is_event_stream(response.headers());
                        let wait_for_event =
                            stream && this.shared.first_event && response.status().is_success();
                        if wait_for_event {
                            let target = call.target.clone();
                            // Boxed: only event streams pay for the room it takes.
                            let wait = Box::pin(FirstEvent::new(response, target, attempt));
                            this.step.set(Step::FirstEvent { wait });
                            continue;
                        }
                        this.step.set(Step::Done);
                        let shared = &**this.shared;
                        let deadline_at = *this.deadline_at;
                        let timing = answer_timing(
                            shared.policy.clock(),
                            this.limits.take(),
                            |start| shared.span(start, deadline_at, Q::OWN_DEADLINE),
                            shared.idle_timeout,
                            stream,
                            || Arc::clone(this.shared) as Arc<dyn BodyClock>,
                        );
                        // Judged by its head, borrowed: the response is wrapped and moved once.
                        let judged = call.judge_head(shared, response.status(), response.headers());
                        return Poll::Ready(match judged {
                            Ok(()) => {
                                // The answer names the call's target: the attempt's, which it
                                // needs no more.
                                let (mut parts, body) = response.into_parts();
                                put(&mut parts.extensions, RetryReport::new(attempt, None));
                                let target = this.call.take().map(|call| call.target);
                                Ok(Response::from_parts(
                                    parts,
                                    ResponseBody::direct(body, target, attempt, timing),
                                ))
                            }
                            Err(judged) => {
                                // A failure keeps the attempt's target (a copy).
                                let response = response
                                    .map(|body| ResponseBody::direct(body, None, attempt, timing));
                                Err(judged.lost(response, attempt, call.target.clone()))
                            }
                        });
                    }
                    Poll::Ready(Err(e)) => {
                        this.step.set(Step::Done);
                        let failed = Failed::Transport(e.into());
                        return Poll::Ready(Err(failed_attempt(
                            call,
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
                            call,
                            this.shared,
                            attempt,
                            failed,
                        )));
                    }
                    Poll::Pending => break,
                },
                StepProj::Lost { failure } => {
                    let failure = failure.take();
                    this.step.set(Step::Done);
                    return match failure {
                        Some(failure) => Poll::Ready(Err(failure)),
                        None => Poll::Pending,
                    };
                }
                StepProj::Refused => {
                    this.step.set(Step::Done);
                    return Poll::Ready(Err(refused(call, attempt)));
                }
                StepProj::Done => return Poll::Pending,
            }
        }
        // Waiting: the attempt timeout may end it (or the call's deadline, for an attempt that
        // keeps its own).
        let (shared, deadline_at) = (&**this.shared, *this.deadline_at);
        let span = |start| shared.span(start, deadline_at, Q::OWN_DEADLINE);
        let limits = this.limits.as_mut();
        let clock = shared.policy.clock();
        if let Some(bound) = limits.and_then(|limits| limits.attempt_expired(cx, clock, span)) {
            this.step.set(Step::Done);
            if let Bound::Deadline(_) = bound {
                return Poll::Ready(Err(deadline_passed(call, attempt)));
            }
            let timeout = this.shared.attempt_timeout.unwrap_or_default();
            let failed = Failed::TimedOut(timeout);
            return Poll::Ready(Err(failed_attempt(call, this.shared, attempt, failed)));
        }
        Poll::Pending
    }
}

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
