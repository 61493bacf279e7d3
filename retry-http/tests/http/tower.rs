//! The tower layer around hyper-util's client, against a real server on 127.0.0.1 that
//! scripts its faults. Every wait is on the mock clock: no test sleeps in wall time.

use crate::support;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_http::{
    BuildError, Error, HttpRetry, Outcome, ResponseBody, RetryReport, RetryService, StopReason,
};
use retry_testkit::{MockClock, SleepStatus};
use retry_toolkit::effects::IdempotencyKey;
use retry_toolkit::{CancelToken, Jitter, RetryOptions};
use support::{Server, Step, drive, drive_if, fired};
use tower::{Service, ServiceBuilder, ServiceExt};

type Body = Full<Bytes>;
type Retrying = RetryService<Client<HttpConnector, Body>, retry_http::DefaultClassify, MockClock>;

/// Options with fixed waits (no jitter): after attempt k the wait is min(100 ms · 2^k, 3 s).
fn options() -> RetryOptions {
    RetryOptions::new().with_jitter(Jitter::None)
}

fn client(retry: &HttpRetry<retry_http::DefaultClassify, MockClock>) -> Retrying {
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    ServiceBuilder::new().layer(retry.layer()).service(client)
}

fn retry(clock: &MockClock) -> HttpRetry<retry_http::DefaultClassify, MockClock> {
    HttpRetry::builder()
        .options(options())
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn get(url: &str) -> Request<Body> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

fn post(url: &str, body: &'static str) -> Request<Body> {
    Request::post(url)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

async fn send(
    clock: &MockClock,
    client: &mut Retrying,
    request: Request<Body>,
) -> Result<Response<ResponseBody<hyper::body::Incoming>>, Error> {
    let call = client.ready().await.unwrap().call(request);
    drive(clock, &[], call).await
}

async fn text<B>(response: Response<B>) -> String
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The response's report as `(attempts, why the retries stopped)`.
fn report<B>(response: &Response<B>) -> Option<(u32, Option<StopReason>)> {
    let report = RetryReport::of(response.extensions());
    Some((report.attempts, report.stopped))
}

fn header(name: &'static str, value: impl Into<String>) -> (&'static str, String) {
    (name, value.into())
}

const OCT_21_2015_072800: u64 = 1_445_412_480; // Wed, 21 Oct 2015 07:28:00 GMT

#[tokio::test]
async fn h2_a_503_with_retry_after_2_waits_two_seconds_of_clock_time() {
    let server = Server::start(vec![
        Step::Respond(503, vec![header("retry-after", "2")], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(text(response).await, "ok");
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
    assert_eq!(clock.elapsed(), Duration::from_secs(2));
    assert_eq!(server.seen().len(), 2);
    server.assert_script_done();
}

#[tokio::test]
async fn h2_an_http_date_hint_is_measured_from_the_response_date() {
    let server = Server::start(vec![
        Step::Respond(
            503,
            vec![
                header("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
                header("retry-after", "Wed, 21 Oct 2015 07:28:03 GMT"),
            ],
            "busy",
        ),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(clock.sleeps(), [Duration::from_secs(3)]);
    server.assert_script_done();
}

fn wall_clock_at_oct_21_2015() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(OCT_21_2015_072800)
}

#[tokio::test]
async fn h2_an_http_date_hint_without_a_date_header_is_measured_from_the_wall_clock() {
    let server = Server::start(vec![
        Step::Respond(
            429,
            vec![header("retry-after", "Wed, 21 Oct 2015 07:28:04 GMT")],
            "slow down",
        ),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new().with_wall_time(wall_clock_at_oct_21_2015());
    let retry = HttpRetry::builder()
        .options(options())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = client(&retry);

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(clock.sleeps(), [Duration::from_secs(4)]);
}

#[tokio::test]
async fn h2_an_http_date_hint_follows_the_mock_clock() {
    // Two 503s ask to wait until 07:28:10 and 07:28:15, the mock clock's wall time starting
    // at 07:28:00: the waits are 10 s, then 5 s (10 s of virtual time have passed). Read
    // against the machine's time, both dates would be long past (no wait at all).
    let server = Server::start(vec![
        Step::Respond(
            503,
            vec![header("retry-after", "Wed, 21 Oct 2015 07:28:10 GMT")],
            "busy",
        ),
        Step::Respond(
            503,
            vec![header("retry-after", "Wed, 21 Oct 2015 07:28:15 GMT")],
            "busy",
        ),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new().with_wall_time(wall_clock_at_oct_21_2015());
    let mut client = client(&retry(&clock));

    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    let response = clock.run_watching(server.io(), call).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        clock.sleeps(),
        [Duration::from_secs(10), Duration::from_secs(5)]
    );
    server.assert_script_done();
}

#[tokio::test]
async fn h2_a_malformed_retry_after_is_ignored_for_the_computed_backoff() {
    let server = Server::start(vec![
        Step::Respond(503, vec![header("retry-after", "soon")], "busy"),
        Step::Respond(503, vec![header("retry-after", "-5")], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        clock.sleeps(),
        [Duration::from_millis(200), Duration::from_millis(400)]
    );
}

#[tokio::test]
async fn h2_a_retry_after_too_large_for_a_u64_is_malformed_and_ignored() {
    // It used to be read as the longest wait there is, which ended the call at once.
    let server = Server::start(vec![
        Step::Respond(
            503,
            vec![header("retry-after", "99999999999999999999")],
            "busy",
        ),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(clock.sleeps(), [Duration::from_millis(200)]);
    server.assert_script_done();
}

#[test]
fn h2_a_retry_after_ceiling_beyond_what_a_policy_holds_is_refused_when_built() {
    let fifty_days = Duration::from_secs(50 * 86_400);
    let error = HttpRetry::builder()
        .max_retry_after(fifty_days)
        .build()
        .unwrap_err();
    assert_eq!(error, BuildError::RetryAfterCeilingTooLong(fifty_days));
    assert!(
        error
            .to_string()
            .starts_with("http.max_retry_after must be <= 4294967295ms (about 49.7 days)"),
        "{error}"
    );
    // The largest one it holds is kept exactly, not shortened.
    let max = retry_http::HttpRetryBuilder::<retry_http::DefaultClassify>::MAX_RETRY_AFTER;
    let retry = HttpRetry::builder().max_retry_after(max).build().unwrap();
    assert_eq!(retry.policy().max_retry_after(), max);
}

#[tokio::test]
async fn d5_a_429_asking_beyond_the_ceiling_is_returned_at_once() {
    let server = Server::start(vec![Step::Respond(
        429,
        vec![header("retry-after", "120")],
        "come back in two minutes",
    )])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let ceiling = StopReason::RetryAfterAboveCeiling {
        retry_after: Duration::from_secs(120),
        ceiling: Duration::from_secs(60),
    };
    assert_eq!(report(&response), Some((1, Some(ceiling))));
    assert_eq!(text(response).await, "come back in two minutes");
    assert!(clock.sleeps().is_empty(), "no wait: {:?}", clock.sleeps());
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn d5_a_hint_past_the_deadline_is_returned_at_once() {
    let server = Server::start(vec![Step::Respond(
        503,
        vec![header("retry-after", "5")],
        "busy",
    )])
    .await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(options())
        .deadline(Duration::from_secs(3))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = client(&retry);

    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    // The deadline's own timer is left alone: the hint alone must end the call.
    let response = drive(&clock, &[Duration::from_secs(3)], call)
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let beyond = StopReason::RetryAfterBeyondDeadline {
        retry_after: Duration::from_secs(5),
    };
    assert_eq!(report(&response), Some((1, Some(beyond))));
    assert_eq!(clock.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn h1_a_503_on_every_attempt_returns_the_last_response() {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "one"),
        Step::Respond(502, vec![], "two"),
        Step::Respond(503, vec![], "three"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    // Three attempts (two retries), waits of the exponential schedule.
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(report(&response), Some((3, Some(StopReason::Exhausted))));
    assert_eq!(text(response).await, "three");
    assert_eq!(
        clock.sleeps(),
        [Duration::from_millis(200), Duration::from_millis(400)]
    );
    server.assert_script_done();
}

#[tokio::test]
async fn h1_statuses_not_worth_retrying_are_the_answer() {
    let server = Server::start(vec![Step::Respond(404, vec![], "no such thing")]).await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // Every response carries a report: here one attempt, no retry stopped.
    assert_eq!(report(&response), Some((1, None)));
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn h1_a_predicate_changes_what_is_retried() {
    let server = Server::start(vec![
        Step::Respond(404, vec![], "not yet"),
        Step::Respond(200, vec![], "there"),
        Step::Respond(503, vec![], "busy"),
    ])
    .await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(options())
        .clock(clock.clone())
        .classify(|outcome: &Outcome<'_>| outcome.status() == Some(StatusCode::NOT_FOUND))
        .build()
        .unwrap();
    let inner = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(inner);

    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    let response = drive(&clock, &[], call).await.unwrap();
    assert_eq!(text(response).await, "there");

    // The predicate replaced the default: a 503 is now the answer.
    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    let response = drive(&clock, &[], call).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn h1_a_connection_reset_before_the_head_is_retried() {
    let server = Server::start(vec![Step::Reset, Step::Respond(200, vec![], "ok")]).await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(text(response).await, "ok");
    assert_eq!(clock.sleeps(), [Duration::from_millis(200)]);
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn h4_a_connection_cut_mid_body_is_an_error_never_a_second_request() {
    let server = Server::start(vec![
        Step::CutBody {
            declared: 100,
            sent: "first ten.",
        },
        Step::Respond(200, vec![], "must not be asked for"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let error = response.into_body().collect().await.unwrap_err();

    assert_eq!(error.reason(), StopReason::AfterHead);
    assert_eq!(error.attempts(), 1);
    assert!(
        error.to_string().contains("never replayed"),
        "the message says it: {error}"
    );
    assert_eq!(server.seen().len(), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn h3_a_post_without_a_key_gets_one_attempt() {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "must not be asked for"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, post(&server.url("/orders"), "{}"))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        report(&response),
        Some((1, Some(StopReason::NotIdempotent)))
    );
    assert_eq!(server.seen().len(), 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn h3_a_post_with_a_key_is_retried_with_the_same_key_each_time() {
    let server = Server::start(vec![
        Step::Reset,
        Step::Respond(503, vec![], "busy"),
        Step::Respond(201, vec![], "created"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));
    let mut request = post(&server.url("/orders"), "{\"sku\":42}");
    request
        .extensions_mut()
        .insert(IdempotencyKey::new("order-42").unwrap());

    let response = send(&clock, &mut client, request).await.unwrap();

    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(report(&response), Some((3, None)));
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for request in &seen {
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.headers["idempotency-key"], "order-42");
        assert_eq!(request.body, "{\"sku\":42}");
    }
}

#[tokio::test]
async fn h3_a_key_the_caller_set_as_a_header_counts_too() {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));
    let mut request = Request::patch(server.url("/orders/7"))
        .header("idempotency-key", "run-3:call-9")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    // The same key as an extension agrees with the header: fine.
    request
        .extensions_mut()
        .insert(IdempotencyKey::new("run-3:call-9").unwrap());

    let response = send(&clock, &mut client, request).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let keys: Vec<_> = server
        .seen()
        .iter()
        .map(|r| r.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys, ["run-3:call-9", "run-3:call-9"]);
}

#[tokio::test]
async fn a4_a_key_that_cannot_be_a_header_or_contradicts_one_is_refused_before_sending() {
    let server = Server::start(vec![]).await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let mut request = post(&server.url("/orders"), "{}");
    request
        .extensions_mut()
        .insert(IdempotencyKey::new("line\nbreak").unwrap());
    let error = send(&clock, &mut client, request).await.unwrap_err();
    assert_eq!(
        (error.reason(), error.attempts()),
        (StopReason::InvalidIdempotencyKey, 0)
    );

    let mut request = Request::post(server.url("/orders"))
        .header("idempotency-key", "a")
        .body(Full::new(Bytes::new()))
        .unwrap();
    request
        .extensions_mut()
        .insert(IdempotencyKey::new("b").unwrap());
    let error = send(&clock, &mut client, request).await.unwrap_err();
    assert_eq!(error.reason(), StopReason::InvalidIdempotencyKey);
    assert!(server.seen().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn h3_put_and_delete_are_idempotent_by_their_method() {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "put"),
        Step::Reset,
        Step::Respond(204, vec![], ""),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let put = Request::put(server.url("/doc/1"))
        .body(Full::new(Bytes::from_static(b"v2")))
        .unwrap();
    let response = send(&clock, &mut client, put).await.unwrap();
    assert_eq!(text(response).await, "put");
    let delete = Request::delete(server.url("/doc/1"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = send(&clock, &mut client, delete).await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    server.assert_script_done();
}

#[tokio::test]
async fn h1_a_refused_connection_is_retried_even_for_a_post_and_the_error_says_why_it_stopped() {
    // A port nobody listens on: the request never leaves, so sending it again is no repeat.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/orders", listener.local_addr().unwrap());
    drop(listener);
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let error = send(&clock, &mut client, post(&url, "{}"))
        .await
        .unwrap_err();

    assert_eq!(error.attempts(), 3);
    assert_eq!(error.reason(), StopReason::Exhausted);
    assert_eq!(error.method(), Some(&Method::POST));
    let message = error.to_string();
    assert!(
        message.starts_with("POST 127.0.0.1:")
            && message.contains("gave up after 3 attempts: attempts exhausted"),
        "{message}"
    );
    // The cause is the source, not in the message.
    assert!(!message.to_lowercase().contains("refused"), "{message}");
    let chain = support::chain(&error);
    assert!(chain.to_lowercase().contains("refused"), "{chain}");
    assert_eq!(
        clock.sleeps(),
        [Duration::from_millis(200), Duration::from_millis(400)]
    );
}

#[tokio::test]
async fn h4_an_event_stream_cut_after_its_first_event_is_an_error_and_no_second_request() {
    let server = Server::start(vec![
        Step::EventsThenCut(vec!["data: one\n\n"]),
        Step::Events(vec!["data: must not be asked for\n\n"]),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/events")))
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "data: one\n\n");
    let error = loop {
        match body.frame().await {
            Some(Ok(frame)) => assert!(frame.data_ref().is_none_or(|d| d.is_empty()), "{frame:?}"),
            Some(Err(error)) => break error,
            None => panic!("the stream ended cleanly, but the server cut it"),
        }
    };

    assert_eq!(error.reason(), StopReason::AfterEvent);
    assert_eq!(
        server.seen().len(),
        1,
        "an event was delivered: never replayed"
    );
}

#[tokio::test]
async fn h4_an_event_stream_cut_before_its_first_event_is_retried() {
    let server = Server::start(vec![
        Step::EventsThenCut(vec![": keep-alive\n\n"]),
        Step::Events(vec!["data: ", "two\n\n", "data: three\n\n"]),
    ])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let response = send(&clock, &mut client, get(&server.url("/events")))
        .await
        .unwrap();

    assert_eq!(report(&response), Some((2, None)));
    // What was read while waiting for the first event comes first, unchanged.
    assert_eq!(text(response).await, "data: two\n\ndata: three\n\n");
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn h4_a_post_event_stream_cut_before_its_first_event_is_not_retried_without_a_key() {
    let server = Server::start(vec![Step::EventsThenCut(vec![": keep-alive\n\n"])]).await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));

    let error = send(&clock, &mut client, post(&server.url("/chat"), "{}"))
        .await
        .unwrap_err();

    assert_eq!(
        (error.reason(), error.attempts()),
        (StopReason::NotIdempotent, 1)
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn h4_a_streaming_request_body_gets_one_attempt_and_says_so() {
    let server = Server::start(vec![Step::Respond(503, vec![], "busy"), Step::Reset]).await;
    let clock = MockClock::new();
    let retry = retry(&clock);
    let inner = Client::builder(TokioExecutor::new())
        .build_http::<BoxBody<Bytes, std::convert::Infallible>>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(inner);
    let streaming = || {
        Request::get(server.url("/upload"))
            .body(Full::new(Bytes::from_static(b"chunk")).boxed())
            .unwrap()
    };

    let call = client.ready().await.unwrap().call(streaming());
    let response = drive(&clock, &[], call).await.unwrap();
    assert_eq!(
        report(&response),
        Some((1, Some(StopReason::NotReplayable)))
    );

    let call = client.ready().await.unwrap().call(streaming());
    let error = drive(&clock, &[], call).await.unwrap_err();
    assert_eq!(
        (error.reason(), error.attempts()),
        (StopReason::NotReplayable, 1)
    );
    assert!(
        error.to_string().contains("cannot be sent again"),
        "{error}"
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn r5_an_attempt_that_times_out_is_retried_when_its_method_allows() {
    let server = Server::start(vec![Step::Hang, Step::Respond(200, vec![], "ok")]).await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(options())
        .attempt_timeout(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = client(&retry);
    let second = Duration::from_secs(1);

    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    // An attempt's timer fires only once the server holds that attempt's request.
    let timed_out = |s: &retry_testkit::SleepRecord| {
        s.duration != second || server.hanging() > fired(&clock, second)
    };
    let response = drive_if(&clock, timed_out, call).await.unwrap();

    assert_eq!(text(response).await, "ok");
    let log = clock.sleep_log();
    // Attempt 1's timer fired, the backoff ran, attempt 2's timer was dropped by its answer.
    assert_eq!(log[0].duration, Duration::from_secs(1));
    assert_eq!(log[0].status, SleepStatus::Fired);
    assert_eq!(log[1].duration, Duration::from_millis(200));
    assert!(matches!(log[2].status, SleepStatus::Dropped { .. }));
}

#[tokio::test]
async fn r5_a_post_that_times_out_is_not_retried() {
    let server = Server::start(vec![Step::Hang]).await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(options())
        .attempt_timeout(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = client(&retry);

    let call = client
        .ready()
        .await
        .unwrap()
        .call(post(&server.url("/pay"), "{}"));
    let error = drive_if(&clock, |_| server.hanging() == 1, call)
        .await
        .unwrap_err();

    assert_eq!(
        (error.reason(), error.attempts()),
        (StopReason::NotIdempotent, 1)
    );
    let chain = support::chain(&error);
    assert!(
        chain.ends_with(": no response within the attempt timeout of 1s"),
        "{chain}"
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn r5_the_deadline_ends_a_call_that_hangs() {
    let server = Server::start(vec![Step::Hang]).await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(options())
        .deadline(Duration::from_secs(5))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = client(&retry);

    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    let error = drive_if(&clock, |_| server.hanging() == 1, call)
        .await
        .unwrap_err();

    assert!(error.is_deadline());
    assert_eq!(server.seen().len(), 1);
    assert_eq!(error.attempts(), 1);
    assert_eq!(clock.elapsed(), Duration::from_secs(5));
}

#[tokio::test]
async fn r6_cancelling_a_call_ends_its_wait_at_once() {
    let server = Server::start(vec![Step::Respond(
        503,
        vec![header("retry-after", "30")],
        "busy",
    )])
    .await;
    let clock = MockClock::new();
    let mut client = client(&retry(&clock));
    let token = CancelToken::new();
    let mut request = get(&server.url("/"));
    request.extensions_mut().insert(token.clone());

    let call = client.ready().await.unwrap().call(request);
    let mut call = std::pin::pin!(call);
    // Let the first attempt run until the loop waits out the server's 30 s.
    while clock.pending() == 0 {
        assert!(
            futures_poll(call.as_mut()).await.is_none(),
            "ended before its wait"
        );
        tokio::task::yield_now().await;
    }
    token.cancel();
    let error = call.await.unwrap_err();

    assert!(error.is_cancelled());
    assert_eq!(error.attempts(), 1);
    assert_eq!(error.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(clock.elapsed(), Duration::ZERO, "the wait was cut short");
}

/// Polls `future` once.
async fn futures_poll<F: std::future::Future + Unpin>(mut future: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test]
async fn o5_one_attempt_allowed_means_no_retry_and_no_copy() {
    let server = Server::start(vec![Step::Respond(503, vec![], "busy")]).await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(options().with_max_attempts(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut client = client(&retry);

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(report(&response), Some((1, Some(StopReason::Exhausted))));
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn o3_options_are_validated_with_the_usual_messages() {
    let err = |b: retry_http::HttpRetryBuilder| b.build().unwrap_err().to_string();
    assert_eq!(
        err(HttpRetry::builder().options(RetryOptions::new().with_max_attempts(0))),
        "retry.max_attempts must be >= 1"
    );
    assert_eq!(
        err(HttpRetry::builder().options(RetryOptions::new().with_base_delay_ms(5000))),
        "retry.base_delay_ms must be <= retry.max_delay_ms"
    );
    assert_eq!(
        HttpRetry::builder()
            .attempt_timeout(Duration::ZERO)
            .build()
            .unwrap_err(),
        BuildError::ZeroAttemptTimeout
    );
    assert_eq!(
        HttpRetry::builder()
            .deadline(Duration::ZERO)
            .build()
            .unwrap_err(),
        BuildError::ZeroDeadline
    );
    let retry = HttpRetry::default();
    assert_eq!(retry.policy().max_attempts(), 3, "two retries by default");
}

/// A call with no budget, breaker or token hands its request to the service that
/// `poll_ready` approved from `call` itself, as tower's `Retry` does; a retry still waits for
/// a clone to be ready.
#[tokio::test]
async fn h1_a_first_attempt_alone_calls_the_service_from_call() {
    let clock = MockClock::new();
    first_attempt_alone(&clock, retry(&clock)).await;
}

/// So does one with a deadline and an attempt timeout: the retry then runs in the loop, under
/// what is left of the deadline.
#[tokio::test]
async fn h1_a_bounded_first_attempt_alone_calls_the_service_from_call() {
    let clock = MockClock::new();
    let bounded = HttpRetry::builder()
        .options(options())
        .bounded(Duration::from_secs(2), Duration::from_secs(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    first_attempt_alone(&clock, bounded).await;
}

/// A 503, then a 200, through `retry` over a service that counts its calls.
async fn first_attempt_alone(
    clock: &MockClock,
    retry: HttpRetry<retry_http::DefaultClassify, MockClock>,
) {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = {
        let calls = std::sync::Arc::clone(&calls);
        let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
        tower::service_fn(move |request: Request<Body>| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            client.request(request)
        })
    };
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(counted);

    let call = client.ready().await.unwrap().call(get(&server.url("/")));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Time moves only while the server is quiet: an attempt timeout never fires.
    let response = clock.run_watching(server.io(), call).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(server.seen().len(), 2);
    server.assert_script_done();
}
