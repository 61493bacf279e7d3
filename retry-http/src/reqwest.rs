//! The reqwest-middleware middleware: the same policy, judge and loop as the tower layer,
//! around `Next::run`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use http::uri::{Authority, Parts, PathAndQuery, Scheme};
use http::{Extensions, Uri};
use pin_project_lite::pin_project;
use reqwest::{Request, Response, ResponseBuilderExt};
use reqwest_middleware::{Middleware, Next};
use retry_toolkit::effects::IdempotencyKey;
use retry_toolkit::middleware::WaitForCancellation;
use retry_toolkit::{CancelToken, Clock, DefaultClock, EarlyStop, FromPolicy, Hooks, Limited};

use crate::body::ResponseBody;
use crate::bound::{BodyClock, Bound, Timing, body_timing, watch};
use crate::classify::{Classify, DefaultClassify};
use crate::config::{HttpRetry, Shared};
use crate::error::{Error, RetryReport};
use crate::judge::{
    After, Answer, Call, Failed, Lost, TARGET, after_first, deadline_passed, finish, guard, hint,
    may_retry, put, refused, reported, retrying,
};
use crate::layer::Cancel;
use crate::method::apply_key;
use crate::sse::{FirstEvent, is_event_stream};
use crate::target::Target;

/// Retries the calls of a reqwest-middleware `ClientWithMiddleware` under an [`HttpRetry`]
/// policy, with the same rules as the tower layer. Made by [`HttpRetry::middleware`].
///
/// A request's [`IdempotencyKey`] and [`CancelToken`] go in its extensions
/// (`RequestBuilder::with_extension`). A call that ends without a response fails with
/// `reqwest_middleware::Error::Middleware` holding this crate's [`Error`] (downcast it to
/// read the attempts and the reason).
///
/// Every attempt runs the rest of the chain with the extensions as the caller gave them: the
/// first with the caller's own (what the chain adds to a first answer reaches the caller, as
/// it would without this middleware), each retry with a copy taken before the first attempt.
///
/// ```no_run
/// use retry_toolkit::effects::IdempotencyKey;
/// use retry_http::HttpRetry;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(HttpRetry::default().middleware())
///     .build();
/// let response = client
///     .post("http://127.0.0.1:8080/orders")
///     .body("{\"sku\":42}")
///     .with_extension(IdempotencyKey::new("order-42")?)
///     .send()
///     .await?;
/// println!("{}", response.status());
/// # Ok(()) }
/// ```
pub struct RetryMiddleware<P = DefaultClassify, C = DefaultClock> {
    retry: HttpRetry<P, C>,
    last_host: LastHost,
}

/// The scheme and host of the last call, shared by the middleware's clones: a call to the same
/// host (most are) names its target with their reference counts instead of a copy.
type LastHost = Arc<Mutex<Option<(Scheme, Authority)>>>;

impl<P, C> Clone for RetryMiddleware<P, C> {
    fn clone(&self) -> Self {
        RetryMiddleware {
            retry: self.retry.clone(),
            last_host: Arc::clone(&self.last_host),
        }
    }
}

impl<P, C: std::fmt::Debug> std::fmt::Debug for RetryMiddleware<P, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("retry", &self.retry)
            .finish()
    }
}

impl<P, C> HttpRetry<P, C> {
    /// The reqwest-middleware [`Middleware`] that retries calls under this policy.
    ///
    /// **Times nothing unless the policy has limits:** without an attempt timeout and a
    /// deadline ([`bounded`](crate::HttpRetryBuilder::bounded)), a server that never
    /// answers, or stalls its body, holds the call forever. With them, the response's
    /// `bytes()` and `text()` are bounded too.
    #[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
    pub fn middleware(&self) -> RetryMiddleware<P, C> {
        RetryMiddleware {
            retry: self.clone(),
            last_host: LastHost::default(),
        }
    }
}

impl Answer for Response {
    fn status(&self) -> http::StatusCode {
        self.status()
    }

    fn headers(&self) -> &http::HeaderMap {
        self.headers()
    }

    fn report(&mut self, report: RetryReport) {
        put(self.extensions_mut(), report);
    }
}

/// The future of one call through the middleware.
type Handled<'a> = Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>>;

// Written out, not with `#[async_trait]`: what needs no waiting (the key, the spare, the
// target) is done before the call's future exists, and the request goes to the rest of the
// chain at once, instead of being moved into this future and out again.
impl<P, C> Middleware for RetryMiddleware<P, C>
where
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    fn handle<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        mut request: Request,
        extensions: &'life1 mut Extensions,
        next: Next<'life2>,
    ) -> Handled<'async_trait>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        let shared = &self.retry.shared;
        if let Some(key) = extensions.get::<IdempotencyKey>() {
            if let Err(reason) = apply_key(request.headers_mut(), key) {
                let target = target_of(&request, &self.last_host);
                tracing::info!(target: TARGET, method = %target.method, host = %target.host(), %reason, "http request refused");
                crate::metrics::gave_up(reason);
                let refused = Error::new(Some(target), 0, reason);
                return Box::pin(std::future::ready(Err(
                    reqwest_middleware::Error::middleware(refused),
                )));
            }
        }
        let cancel = extensions
            .get::<CancelToken>()
            .or(shared.cancel.as_ref())
            .map(CancelToken::cancelled);
        let max_attempts = shared.policy.max_attempts();
        let spare = if max_attempts > 1 {
            request.try_clone()
        } else {
            None
        };
        let deadline_at = shared.deadline_from(|| shared.policy.clock().now());
        let alone = shared.protection.is_none() && cancel.is_none();
        // A call run alone with a spare names its target from the spare, only when something
        // reads it (a failure, a timed or streamed body): a call answered at once never does.
        let named = match &spare {
            Some(_) if alone => None,
            _ => Some(target_of(&request, &self.last_host)),
        };
        let target = match named {
            Some(target) => target,
            // Until the spare names it, read for its method (and by a PUT's or DELETE's retry
            // decision, which needs a URI, any URI, as the write's key).
            None => Target {
                method: request.method().clone(),
                uri: Uri::default(),
            },
        };
        let replayable = spare.is_some() || max_attempts <= 1;
        let mut call = Call::new(request.method(), request.headers(), replayable, target);
        if !alone {
            let rest = Rest {
                call,
                spare,
                first: Ok(request),
                cancel,
                deadline: (deadline_at, shared.deadline),
            };
            return Box::pin(looping(shared, rest, next, extensions));
        }
        // Nothing to admit, no signal to race: the first attempt runs on its own, under its
        // timeout and the call's deadline, and the loop is built only if it fails. A call
        // answered at once moves no loop, and its future holds no loop's room. The rest of the
        // chain takes the request and the caller's extensions now, as it would without this
        // middleware; the retries start from a copy of the extensions as they were given (a
        // call without a spare sends nothing again: no copy).
        let given = match spare {
            Some(_) => extensions.clone(),
            None => Extensions::new(),
        };
        let running = next.clone().run(request, extensions);
        let last_host = &self.last_host;
        Box::pin(async move {
            let naming = match &spare {
                Some(spare) => Naming::Spare(spare, last_host),
                None => Naming::Known(&call.target),
            };
            let turn = Turn {
                call: &call,
                naming,
                number: 1,
                own_deadline: true,
            };
            let failure = match attempt(shared, &turn, deadline_at, Some(running)).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            // The loop's attempts and its end name the target from here on.
            call.target = failure.target.clone();
            let policy = &shared.policy;
            let (max_attempts, ceiling) = (policy.max_attempts(), policy.max_retry_after());
            let (failure, left) =
                match after_first(failure, deadline_at, policy.clock(), max_attempts) {
                    After::Loop(failure, left) => (failure, left),
                    After::Ended(end) => {
                        let ended = finish(Err(end), &call.target, max_attempts, ceiling);
                        return ended.map_err(reqwest_middleware::Error::middleware);
                    }
                };
            let rest = Rest {
                call,
                spare,
                first: Err(failure),
                cancel: None,
                deadline: (deadline_at, left),
            };
            // Boxed: only a call whose first attempt failed pays for the loop's room.
            Box::pin(looping(shared, rest, next, &given)).await
        })
    }
}

/// What a call's loop starts from: what its attempts judge by, the spare request the retries
/// copy, the first request (or the failure of a first attempt run on its own), the call's
/// cancellation signal, and its deadline (when it passes, and the time the loop has left).
struct Rest {
    call: Call,
    spare: Option<Request>,
    first: Result<Request, Lost<Response>>,
    cancel: Option<WaitForCancellation>,
    deadline: (Option<Instant>, Option<std::time::Duration>),
}

/// A call's retry loop, from its first attempt or from the failure of one run on its own.
async fn looping<P, C>(
    shared: &Arc<Shared<P, C>>,
    rest: Rest,
    next: Next<'_>,
    extensions: &Extensions,
) -> reqwest_middleware::Result<Response>
where
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    let Rest {
        call,
        spare,
        first,
        cancel,
        deadline: (deadline_at, budget),
    } = rest;
    let (mut first, mut failed) = match first {
        Ok(request) => (Some(request), None),
        Err(failure) => (None, Some(failure)),
    };
    let (call, next) = (&call, &next);
    let op = move |n: u32| {
        // The loop's first attempt is the one that already failed, if one did.
        let failed = failed.take();
        let request = match failed {
            Some(_) => None,
            None => first
                .take()
                .or_else(|| spare.as_ref().and_then(Request::try_clone)),
        };
        let next = next.clone();
        async move {
            match failed {
                Some(failure) => Err(failure),
                None => {
                    let turn = Turn {
                        call,
                        naming: Naming::Known(&call.target),
                        number: n,
                        // The loop keeps the call's deadline.
                        own_deadline: false,
                    };
                    let mut own = extensions.clone();
                    let running = request.map(|request| next.run(request, &mut own));
                    attempt(shared, &turn, deadline_at, running).await
                }
            }
        }
    };
    let when: fn(&Lost<Response>, u32) -> bool = may_retry;
    let notify: fn(&Lost<Response>, u32, std::time::Duration) = retrying;
    let hint: fn(&Lost<Response>) -> Option<std::time::Duration> = hint;
    let hooks = Hooks::new(FromPolicy, when, notify, hint);
    // Without a token the loop has no signal to poll.
    let limits = Limited::new(budget, cancel.map(|wait| Cancel(Some(wait))));
    // The loop is built in one step (each builder method would move the whole loop, the spare
    // request included), under the budget and the breaker that are set.
    let stops = EarlyStop::new(limits, guard(&shared.protection));
    let outcome = shared.policy.retry_with(op, hooks, stops).await;
    finish(
        outcome,
        &call.target,
        shared.policy.max_attempts(),
        shared.policy.max_retry_after(),
    )
    .map_err(reqwest_middleware::Error::middleware)
}

/// Where a call's target comes from: the call's, or the spare request's URL, read only when
/// asked.
enum Naming<'a> {
    Known(&'a Target),
    Spare(&'a Request, &'a LastHost),
}

impl Naming<'_> {
    fn target(&self) -> Target {
        match self {
            Naming::Known(target) => (*target).clone(),
            Naming::Spare(request, last) => target_of(request, last),
        }
    }
}

/// Which attempt of which call: what it judges by, what names the target of what it returns
/// (a failure, a body that can fail: `call`'s may name its method only), its number from 1,
/// and whether it keeps the call's deadline itself (a first attempt run without the loop).
struct Turn<'a> {
    call: &'a Call,
    naming: Naming<'a>,
    number: u32,
    own_deadline: bool,
}

/// The rest of the chain, running with one attempt's request.
type Running<'a> = Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>>;

/// One attempt: the rest of the chain (`None`: the request gave no copy to send again)
/// under the attempt timeout, its response judged.
async fn attempt<P, C>(
    shared: &Arc<Shared<P, C>>,
    turn: &Turn<'_>,
    deadline_at: Option<Instant>,
    running: Option<Running<'_>>,
) -> Result<Response, Lost<Response>>
where
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    let Turn {
        call,
        ref naming,
        number: attempt,
        own_deadline,
    } = *turn;
    let Some(running) = running else {
        let mut failure = refused(call, attempt);
        failure.target = naming.target();
        return Err(failure);
    };
    let clock = shared.policy.clock();
    let timeout = shared.attempt_timeout;
    let span = (timeout.is_some() || deadline_at.is_some())
        .then(|| shared.span(clock.now(), deadline_at, own_deadline));
    let end = span.and_then(|span| span.end());
    // The limit is read back from `end` when the timer fires: keeping the `Bound` that
    // `Span::timer` gives across the wait made every call dearer (+420 instructions, +70 with
    // a flag, counted).
    let sleep = span.and_then(|span| span.timer(end, clock).0);
    let exchange = exchange(shared, turn, end, running);
    // Without a timer the exchange is awaited as it is: its answer is moved once less.
    let timed = match sleep {
        None => Some(exchange.await),
        Some(timer) => {
            Timed {
                future: exchange,
                timer,
            }
            .await
        }
    };
    let outcome = match timed {
        Some(outcome) => outcome,
        // The call's deadline, which this attempt keeps: the call ends as the loop ends it.
        None if own_deadline && matches!(end, Some((_, Bound::Deadline(_)))) => {
            let mut failure = deadline_passed(call, attempt);
            failure.target = naming.target();
            return Err(failure);
        }
        None => Err(Failed::TimedOut(timeout.unwrap_or_default())),
    };
    match outcome {
        // Judged by its head, borrowed: the answer is moved once.
        Ok(response) => match call.judge_head(shared, response.status(), response.headers()) {
            Ok(()) => Ok(reported(response, attempt)),
            Err(judged) => Err(judged.lost(response, attempt, naming.target())),
        },
        Err(failed) => {
            let mut failure = call.judge_error(
                &shared.classify,
                &shared.protection,
                shared.notify.as_ref(),
                attempt,
                failed,
            );
            failure.target = naming.target();
            Err(failure)
        }
    }
}

/// What a call's events and errors name: its method and host. Only the URL's scheme and
/// authority are copied, not the whole URL parsed again: its path shows nowhere. A call to
/// the host of the call before it shares that call's copy (`last`): no allocation.
fn target_of(request: &Request, last: &Mutex<Option<(Scheme, Authority)>>) -> Target {
    let url = request.url();
    // `try_lock`: a call never waits for another; a miss only costs the copy.
    let hit = last.try_lock().ok().and_then(|last| match &*last {
        Some((scheme, authority))
            if scheme.as_str() == url.scheme() && authority.as_str() == url.authority() =>
        {
            Some((scheme.clone(), authority.clone()))
        }
        _ => None,
    });
    let (scheme, authority) = match hit {
        Some((scheme, authority)) => (Some(scheme), Some(authority)),
        None => {
            let scheme = Scheme::try_from(url.scheme()).ok();
            let authority = Authority::try_from(url.authority()).ok();
            if let (Some(scheme), Some(authority), Ok(mut last)) =
                (&scheme, &authority, last.try_lock())
            {
                *last = Some((scheme.clone(), authority.clone()));
            }
            (scheme, authority)
        }
    };
    let mut parts = Parts::default();
    parts.scheme = scheme;
    parts.authority = authority;
    parts.path_and_query = Some(PathAndQuery::from_static("/"));
    Target {
        method: request.method().clone(),
        uri: Uri::from_parts(parts).unwrap_or_default(),
    }
}

/// One exchange: the rest of the chain, then, for an event stream, its first event. When
/// the policy limits time, the body is timed too (`end`: the rest of the attempt timeout or
/// the deadline), so that `bytes()` and `text()` cannot outlast them.
async fn exchange<P, C>(
    shared: &Arc<Shared<P, C>>,
    turn: &Turn<'_>,
    end: Option<(Instant, Bound)>,
    running: Running<'_>,
) -> Result<Response, Failed>
where
    P: Classify,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    let (naming, attempt) = (&turn.naming, turn.number);
    let response = match running.await {
        Ok(response) => response,
        Err(reqwest_middleware::Error::Reqwest(e)) => return Err(Failed::Transport(Box::new(e))),
        // Kept as it came: `.into()` would re-box it where `downcast_ref` no longer finds the
        // other middleware's own type, nor the classification its I/O error.
        Err(reqwest_middleware::Error::Middleware(e)) => {
            return Err(Failed::Transport(Box::new(Kept(e))));
        }
    };
    let stream = is_event_stream(response.headers());
    let wait_for_event = stream && shared.first_event && response.status().is_success();
    let clock = shared.policy.clock();
    if !wait_for_event {
        let idle = shared.idle_timeout;
        let body_clock = || Arc::clone(shared) as Arc<dyn BodyClock>;
        let timing = body_timing(clock, end, idle, stream, body_clock);
        if let Timing::Untimed = timing {
            return Ok(response);
        }
        let url = response.url().clone();
        let response: http::Response<reqwest::Body> = response.into();
        let (head, body) = response.into_parts();
        let body = ResponseBody::direct(body, Some(naming.target()), attempt, timing);
        return Ok(rebuild(url, head, reqwest::Body::wrap(body)));
    }
    let url = response.url().clone();
    let response: http::Response<reqwest::Body> = response.into();
    // Boxed: only event streams pay for the room it takes.
    let waited = Box::pin(FirstEvent::new(response, naming.target(), attempt))
        .await
        .map_err(|e| Failed::Stream(Box::new(e)))?;
    let (head, body) = waited.into_parts();
    let body = body.with_watch(watch(clock, None, shared.idle_timeout, true));
    Ok(rebuild(url, head, reqwest::Body::wrap(body)))
}

/// A reqwest response from its parts, with its URL (the conversion from `http::Response`
/// keeps the URL only in an extension that reqwest's own builder method sets).
fn rebuild(url: reqwest::Url, mut head: http::response::Parts, body: reqwest::Body) -> Response {
    let (with_url, ()) = http::Response::builder()
        .url(url)
        .body(())
        .map(http::Response::into_parts)
        .unwrap_or_else(|_| (http::Response::new(()).into_parts().0, ()));
    head.extensions.extend(with_url.extensions);
    Response::from(http::Response::from_parts(head, body))
}

/// An error another middleware raised, as it came. Wherever the crate reads a cause it reads
/// the error inside ([`open`](crate::error::open)), so the chain and the classification see
/// the other middleware's own error.
#[derive(Debug)]
pub(crate) struct Kept(pub(crate) anyhow::Error);

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Kept {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

pin_project! {
    /// `future`, unless `timer` ends first (then `None`).
    struct Timed<F, S> {
        #[pin]
        future: F,
        #[pin]
        timer: S,
    }
}

impl<F: Future, S: Future<Output = ()>> Future for Timed<F, S> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Some(out));
        }
        match this.timer.poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
