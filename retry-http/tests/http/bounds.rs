//! SPEC H6: a set attempt timeout or deadline bounds everything a caller awaits, the
//! response body included; a streamed body has an idle timeout; without a bound nothing is
//! timed. Real server on 127.0.0.1, virtual time moved only when the server is quiet
//! (`MockClock::run_watching` with the server's in-flight count).

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retry_http::{
    BodyTimedOut, Bound, BuildError, DefaultClassify, Error, HttpRetry, HttpRetryBuilder,
    StopReason,
};
use retry_testkit::MockClock;
use retry_toolkit::{Jitter, RetryOptions};
use support::{Server, Step};
use tower::{Service, ServiceBuilder, ServiceExt};

const S: Duration = Duration::from_secs(1);

fn builder(clock: &MockClock) -> HttpRetryBuilder<DefaultClassify, MockClock> {
    HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
}

/// Sends a GET through the tower layer and reads its body to the end, on `clock`.
async fn get_body(
    clock: &MockClock,
    server: &Server,
    retry: HttpRetry<DefaultClassify, MockClock>,
) -> Result<Bytes, Error> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(client);
    let request = Request::get(server.url("/"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let call = async move {
        let response = client.ready().await.unwrap().call(request).await?;
        Ok(response.into_body().collect().await?.to_bytes())
    };
    clock.run_watching(server.io(), call).await
}

/// How a call whose body ran out of time ended: the limit, the reason, the attempts, the
/// requests the server saw and the mock time spent.
type BodyEnd = (Option<Bound>, StopReason, u32, usize, Duration);

/// The [`BodyEnd`] of a call that ended with `error`.
fn body_end(error: &Error, clock: &MockClock, server: &Server) -> BodyEnd {
    (
        bound(error),
        error.reason(),
        error.attempts(),
        server.seen().len(),
        clock.elapsed(),
    )
}

/// The limit a body ran out of, from the error's cause.
fn bound(error: &Error) -> Option<Bound> {
    error
        .cause()
        .and_then(|c| c.downcast_ref::<BodyTimedOut>())
        .map(|t| t.0)
}

fn stall() -> Step {
    Step::StallBody {
        declared: 10,
        sent: "part",
    }
}

#[tokio::test]
async fn h6_a_server_that_never_answers_ends_at_the_attempt_timeout() {
    let server = Server::start(vec![Step::Hang, Step::Hang, Step::Hang]).await;
    let clock = MockClock::new();
    let retry = builder(&clock).bounded(S, 10 * S).build().unwrap();

    let error = get_body(&clock, &server, retry).await.unwrap_err();

    assert_eq!(
        (error.reason(), error.attempts()),
        (StopReason::Exhausted, 3)
    );
    // The message says what happened; the cause is its source.
    assert_eq!(
        support::chain(&error),
        format!(
            "GET {} gave up after 3 attempts: attempts exhausted: \
             no response within the attempt timeout of 1s",
            server.addr
        )
    );
    assert_eq!(server.seen().len(), 3);
    // Three attempt timeouts and the two backoffs between them; the deadline never came.
    assert_eq!(clock.elapsed(), 3 * S + Duration::from_millis(200 + 400));
}

#[tokio::test]
async fn h6_a_body_that_stalls_ends_at_the_attempt_timeout_and_is_not_replayed() {
    let server = Server::start(vec![stall()]).await;
    let clock = MockClock::new();
    let retry = builder(&clock).bounded(2 * S, 30 * S).build().unwrap();

    let error = get_body(&clock, &server, retry).await.unwrap_err();

    assert_eq!(
        body_end(&error, &clock, &server),
        (
            Some(Bound::AttemptTimeout(2 * S)),
            StopReason::AfterHead,
            1,
            1,
            2 * S
        )
    );
    assert!(
        support::chain(&error).ends_with(
            "(1 attempt): the response body did not end in time: the attempt timeout of 2s ran out"
        ),
        "{error}"
    );
}

/// A body that stalls ends at the limit that comes first, with an error saying it is not
/// replayed; an event stream that is established is cut by its idle timeout alone.
#[tokio::test]
async fn h6_a_stalled_body_ends_at_the_first_limit() {
    type Policy = fn(
        HttpRetryBuilder<DefaultClassify, MockClock>,
    ) -> HttpRetryBuilder<DefaultClassify, MockClock>;
    let events = || vec![Step::EventsThenStall(vec!["data: one\n\n"])];
    #[rustfmt::skip]
    let cases: [(&str, Vec<Step>, Policy, BodyEnd); 5] = [
        ("a deadline", vec![stall()], |b| b.deadline(5 * S),
            (Some(Bound::Deadline(5 * S)), StopReason::AfterHead, 1, 1, 5 * S)),
        // The retry starts 200 ms in: its attempt timeout would end at 4.2 s, the deadline at 4 s.
        ("a retry's deadline before its attempt timeout",
            vec![Step::Respond(503, vec![], "busy"), stall()], |b| b.bounded(4 * S, 4 * S),
            (Some(Bound::Deadline(4 * S)), StopReason::AfterHead, 2, 2, 4 * S)),
        ("an idle timeout", vec![stall()], |b| b.bounded(10 * S, 30 * S).idle_timeout(S),
            (Some(Bound::Idle(S)), StopReason::AfterHead, 1, 1, S)),
        // Events arrive, then the stream goes quiet: the deadline (2 s) does not cut a stream
        // that is established, the idle timeout (3 s) does.
        ("an event stream", events(), |b| b.bounded(S, 2 * S).idle_timeout(3 * S),
            (Some(Bound::Idle(3 * S)), StopReason::AfterEvent, 1, 1, 3 * S)),
        // With `first_event(false)` the stream is the answer at its head; still a stream.
        ("an event stream answered at its head", events(),
            |b| b.first_event(false).bounded(S, 2 * S).idle_timeout(3 * S),
            (Some(Bound::Idle(3 * S)), StopReason::AfterHead, 1, 1, 3 * S)),
    ];
    for (what, script, policy, expected) in cases {
        let server = Server::start(script).await;
        let clock = MockClock::new();
        let retry = policy(builder(&clock)).build().unwrap();

        let error = get_body(&clock, &server, retry).await.unwrap_err();

        assert_eq!(body_end(&error, &clock, &server), expected, "{what}");
    }
}

#[tokio::test]
async fn h6_a_body_that_stalls_ends_at_the_attempt_timeout_without_a_deadline() {
    // The first attempt runs without the loop; the timer that timed its head times its body.
    let server = Server::start(vec![stall()]).await;
    let clock = MockClock::new();
    let retry = builder(&clock).attempt_timeout(2 * S).build().unwrap();

    let error = get_body(&clock, &server, retry).await.unwrap_err();

    assert_eq!(
        body_end(&error, &clock, &server),
        (
            Some(Bound::AttemptTimeout(2 * S)),
            StopReason::AfterHead,
            1,
            1,
            2 * S
        )
    );
    // One timer for head and body: no second one started when the head arrived.
    assert_eq!(clock.sleeps(), vec![2 * S]);
}

#[tokio::test]
async fn h6_an_attempt_timeout_and_an_idle_timeout_time_one_body_together() {
    // The attempt's timer (5 s) keeps running for the body; the idle timer (2 s) joins it and
    // fires first.
    let server = Server::start(vec![stall()]).await;
    let clock = MockClock::new();
    let retry = builder(&clock)
        .attempt_timeout(5 * S)
        .idle_timeout(2 * S)
        .build()
        .unwrap();

    let error = get_body(&clock, &server, retry).await.unwrap_err();

    assert_eq!(
        body_end(&error, &clock, &server),
        (Some(Bound::Idle(2 * S)), StopReason::AfterHead, 1, 1, 2 * S)
    );
    // No second timer for the attempt's limit; the idle one restarted after the first frame.
    assert_eq!(clock.sleeps(), vec![5 * S, 2 * S, 2 * S]);
}

#[tokio::test]
async fn h6_without_limits_nothing_is_timed() {
    let server = Server::start(vec![stall()]).await;
    let clock = MockClock::new();
    let retry = builder(&clock).build().unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(client);
    let request = Request::get(server.url("/"))
        .body(Full::new(Bytes::new()))
        .unwrap();

    let call = client.ready().await.unwrap().call(request);
    let response = clock.run_watching(server.io(), call).await.unwrap();
    let mut body = response.into_body();
    // The first frame comes; then the body waits, and no timer exists to end it.
    let first = clock
        .run_watching(server.io(), body.frame())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "part");
    let waiting = std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut body).poll_frame(cx).is_pending())
    })
    .await;
    assert!(waiting);
    assert_eq!(clock.pending(), 0);
    assert!(clock.sleeps().is_empty());
}

/// A body that sends one frame, then waits forever.
struct PartThenStall(bool);

impl http_body::Body for PartThenStall {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if std::mem::take(&mut self.0) {
            std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
                b"part",
            )))))
        } else {
            std::task::Poll::Pending
        }
    }
}

/// A service that answers at once (a cache, a stack in the same process): its attempt never
/// waits, so no timer exists until its body waits; the limits still count from the call's
/// start, and the body ends at the instant it would have.
#[tokio::test]
async fn h6_an_answer_at_once_is_timed_from_the_start_of_its_call() {
    type Policy = fn(
        HttpRetryBuilder<DefaultClassify, MockClock>,
    ) -> HttpRetryBuilder<DefaultClassify, MockClock>;
    #[rustfmt::skip]
    let cases: [(&str, Policy, Bound); 3] = [
        ("an attempt timeout", |b| b.attempt_timeout(2 * S), Bound::AttemptTimeout(2 * S)),
        ("a deadline", |b| b.deadline(5 * S), Bound::Deadline(5 * S)),
        ("a deadline before the attempt timeout", |b| b.bounded(10 * S, 3 * S),
            Bound::Deadline(3 * S)),
    ];
    for (what, policy, expected) in cases {
        let clock = MockClock::new();
        let retry = policy(builder(&clock)).build().unwrap();
        let answer = tower::service_fn(|_: Request<Full<Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(PartThenStall(true)))
        });
        let mut client = ServiceBuilder::new().layer(retry.layer()).service(answer);
        let request = Request::get("http://127.0.0.1:1/")
            .body(Full::new(Bytes::new()))
            .unwrap();

        let response = client.ready().await.unwrap().call(request).await.unwrap();
        assert!(clock.sleeps().is_empty(), "{what}: no timer for the head");
        // The caller starts reading a second later; the first frame is there at once.
        clock.advance(S);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "part", "{what}");
        let error = clock.run(body.collect()).await.unwrap_err();

        let limit = match expected {
            Bound::AttemptTimeout(limit) | Bound::Deadline(limit) => limit,
            _ => unreachable!(),
        };
        assert_eq!(
            (
                bound(&error),
                error.reason(),
                error.attempts(),
                clock.elapsed()
            ),
            (Some(expected), StopReason::AfterHead, 1, limit),
            "{what}"
        );
        // One timer, made when the body first waited, for what was left.
        assert_eq!(clock.sleeps(), vec![limit - S], "{what}");
    }
}

#[tokio::test]
async fn h6_an_answer_read_at_once_makes_no_timer() {
    let clock = MockClock::new();
    let retry = builder(&clock).bounded(2 * S, 30 * S).build().unwrap();
    let answer = tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from("done"))))
    });
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(answer);
    let request = Request::get("http://127.0.0.1:1/")
        .body(Full::new(Bytes::new()))
        .unwrap();

    let response = client.ready().await.unwrap().call(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();

    assert_eq!(body, "done");
    assert!(clock.sleeps().is_empty());
    assert_eq!(clock.pending(), 0);
}

#[test]
fn h6_an_idle_timeout_of_zero_is_refused() {
    let error = HttpRetry::builder()
        .idle_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(error, BuildError::ZeroIdleTimeout);
    assert_eq!(error.to_string(), "http.idle_timeout must be > 0");
}

#[cfg(feature = "reqwest")]
mod through_reqwest {
    use super::*;

    /// Sends a GET through the middleware and reads its body with `bytes()`, on `clock`.
    async fn get_bytes(
        clock: &MockClock,
        server: &Server,
        retry: HttpRetry<DefaultClassify, MockClock>,
    ) -> Result<Bytes, reqwest::Error> {
        let client = support::reqwest_client(&retry);
        let response = support::reqwest_get(clock, server, &client).await.unwrap();
        clock.run_watching(server.io(), response.bytes()).await
    }

    /// The error of a GET through the middleware that fails, on `clock`.
    async fn failed_get(
        clock: &MockClock,
        server: &Server,
        retry: &HttpRetry<DefaultClassify, MockClock>,
    ) -> anyhow::Error {
        let client = support::reqwest_client(retry);
        let error = support::reqwest_get(clock, server, &client)
            .await
            .unwrap_err();
        support::middleware_error(error)
    }

    /// The limit a body ran out of, found by walking the error's chain.
    fn bound_in(error: &(dyn std::error::Error + 'static)) -> Option<Bound> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(timed_out) = e.downcast_ref::<BodyTimedOut>() {
                return Some(timed_out.0);
            }
            if let Some(ours) = e.downcast_ref::<Error>() {
                return bound(ours);
            }
            next = e.source();
        }
        None
    }

    #[tokio::test]
    async fn h6_reqwest_bytes_of_a_stalled_body_end_at_the_attempt_timeout() {
        let server = Server::start(vec![stall()]).await;
        let clock = MockClock::new();
        let retry = builder(&clock).bounded(2 * S, 30 * S).build().unwrap();

        let error = get_bytes(&clock, &server, retry).await.unwrap_err();

        assert_eq!(
            bound_in(&error),
            Some(Bound::AttemptTimeout(2 * S)),
            "{error:?}"
        );
        assert_eq!(server.seen().len(), 1);
        assert_eq!(clock.elapsed(), 2 * S);
    }

    #[tokio::test]
    async fn h6_reqwest_text_of_a_stalled_body_ends_at_the_idle_timeout() {
        let server = Server::start(vec![stall()]).await;
        let clock = MockClock::new();
        let retry = builder(&clock).idle_timeout(S).build().unwrap();

        let error = get_bytes(&clock, &server, retry).await.unwrap_err();

        assert_eq!(bound_in(&error), Some(Bound::Idle(S)), "{error:?}");
        assert_eq!(server.seen().len(), 1);
        assert_eq!(clock.elapsed(), S);
    }

    #[tokio::test]
    async fn r5_reqwest_a_deadline_ends_a_call_as_the_loop_decides() {
        for (what, case, expected) in deadline_cases() {
            let (clock, server, retry) = deadline_case(case).await;
            let error = failed_get(&clock, &server, &retry).await;
            let ours = error.downcast_ref::<Error>().unwrap();
            assert_eq!(how_it_ended(ours, &clock, &server), expected, "{what}");
        }
    }

    #[tokio::test]
    async fn h6_reqwest_a_server_that_never_answers_ends_at_the_deadline() {
        let server = Server::start(vec![Step::Hang]).await;
        let clock = MockClock::new();
        let retry = builder(&clock).deadline(5 * S).build().unwrap();

        let error = failed_get(&clock, &server, &retry).await;

        let ours = error.downcast_ref::<Error>().unwrap();
        assert!(ours.is_deadline(), "{ours}");
        assert_eq!(server.seen().len(), 1);
        assert_eq!(clock.elapsed(), 5 * S);
    }
}

/// How a call with a deadline ends, its first attempt run in the loop or without it: the
/// loop's answers, pinned as (reason, attempts, last status, mock time, requests, message).
#[tokio::test]
async fn r5_a_deadline_ends_a_call_as_the_loop_decides() {
    for (what, case, expected) in deadline_cases() {
        let (clock, server, retry) = deadline_case(case).await;
        let error = get_body(&clock, &server, retry).await.unwrap_err();
        assert_eq!(how_it_ended(&error, &clock, &server), expected, "{what}");
    }
}

/// What a deadline case sets up: the server's script (that many hangs; none: a 503, then a
/// hang), the attempt timeout and the deadline in seconds, and the attempts allowed.
type DeadlineCase = (usize, Option<u64>, u64, u32);

/// How a call ended: reason, attempts, last status, mock time, requests, message after the
/// host.
type Ending = (StopReason, u32, Option<u16>, Duration, usize, String);

/// The deadline cases, each with what happens and how the loop ends it.
fn deadline_cases() -> Vec<(&'static str, DeadlineCase, Ending)> {
    use StopReason::{DeadlineExceeded as Deadline, Exhausted};
    const NO_ANSWER: &str = ": no response within the attempt timeout of";
    #[rustfmt::skip]
    let cases = vec![
        ("a deadline before the attempt timeout", (2, Some(10), 3, 3),
            (Deadline, 1, None, 3 * S, 1, " after 1 attempt: deadline exceeded".to_owned())),
        ("an attempt timeout at the deadline's instant", (3, Some(5), 5, 3),
            (Deadline, 1, None, 5 * S, 1, format!(" after 1 attempt: deadline exceeded{NO_ANSWER} 5s"))),
        ("the only attempt timing out at the deadline's instant", (1, Some(5), 5, 1),
            (Exhausted, 1, None, 5 * S, 1, format!(" after 1 attempt: attempts exhausted{NO_ANSWER} 5s"))),
        // Attempts at 0 s and 2.2 s time out after 2 s; the third starts at 4.6 s, cut at 5 s.
        ("a deadline cutting a third attempt", (3, Some(2), 5, 3),
            (Deadline, 3, None, 5 * S, 3, format!(" after 3 attempts: deadline exceeded{NO_ANSWER} 2s"))),
        ("a deadline cutting a retry after a 503", (0, None, 3, 3),
            (Deadline, 2, Some(503), 3 * S, 2, " after 2 attempts: deadline exceeded; last status 503 Service Unavailable".to_owned())),
    ];
    cases
}

/// The clock, the server and the policy of a deadline case.
async fn deadline_case(
    (hangs, timeout, deadline, attempts): DeadlineCase,
) -> (MockClock, Server, HttpRetry<DefaultClassify, MockClock>) {
    let script = match hangs {
        0 => vec![Step::Respond(503, vec![], "busy"), Step::Hang],
        n => (0..n).map(|_| Step::Hang).collect(),
    };
    let clock = MockClock::new();
    let options = RetryOptions::new()
        .with_jitter(Jitter::None)
        .with_max_attempts(attempts);
    let mut retry = builder(&clock)
        .options(options)
        .deadline(Duration::from_secs(deadline));
    if let Some(timeout) = timeout {
        retry = retry.attempt_timeout(Duration::from_secs(timeout));
    }
    (clock, Server::start(script).await, retry.build().unwrap())
}

/// How the call that ended with `error` ended.
fn how_it_ended(error: &Error, clock: &MockClock, server: &Server) -> Ending {
    // The host and port vary; what follows them is what the call says.
    let chain = support::chain(error);
    let said = chain
        .split_once(" gave up")
        .map_or(chain.as_str(), |(_, rest)| rest);
    (
        error.reason(),
        error.attempts(),
        error.status().map(|status| status.as_u16()),
        clock.elapsed(),
        server.seen().len(),
        said.to_owned(),
    )
}
