//! B3 for the HTTP layer: a shared retry budget and circuit breaker in the tower layer, against
//! a real server on 127.0.0.1 that counts what reaches it. The breaker and the budget read the
//! policy's mock clock: a break ends when the test moves the clock, never by sleeping.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_http::{
    BuildError, DefaultClassify, Error, HttpRetry, HttpRetryBuilder, Outcome, ResponseBody,
    RetryReport, RetryService, StopReason,
};
use retry_testkit::MockClock;
use retry_toolkit::{
    BreakerError, BudgetError, CircuitBreaker, CircuitState, Jitter, RetryBudget, RetryOptions,
};
use support::{Server, Step, drive};
use tower::{Service, ServiceBuilder, ServiceExt};

type Body = Full<Bytes>;
type Retrying<P = DefaultClassify> = RetryService<Client<HttpConnector, Body>, P, MockClock>;

/// A policy on `clock` with fixed waits (no jitter): 200 ms after the first attempt, 400 ms
/// after the second.
fn builder(clock: &MockClock) -> HttpRetryBuilder<DefaultClassify, MockClock> {
    HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
}

fn one_attempt(clock: &MockClock) -> HttpRetryBuilder<DefaultClassify, MockClock> {
    HttpRetry::builder()
        .options(RetryOptions::new().with_max_attempts(1))
        .clock(clock.clone())
}

fn client<P: retry_http::Classify>(retry: &HttpRetry<P, MockClock>) -> Retrying<P> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    ServiceBuilder::new().layer(retry.layer()).service(client)
}

fn breaker(failures: u32, pause: Duration) -> Arc<CircuitBreaker> {
    Arc::new(
        CircuitBreaker::builder()
            .name("api")
            .consecutive_failures(failures)
            .break_duration(pause)
            .build()
            .unwrap(),
    )
}

fn get(url: &str) -> Request<Body> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

async fn send<P: retry_http::Classify>(
    clock: &MockClock,
    client: &mut Retrying<P>,
    request: Request<Body>,
) -> Result<Response<ResponseBody<hyper::body::Incoming>>, Error> {
    let call = client.ready().await.unwrap().call(request);
    drive(clock, &[], call).await
}

fn report<B>(response: &Response<B>) -> Option<(u32, Option<StopReason>)> {
    let report = RetryReport::of(response.extensions());
    Some((report.attempts, report.stopped))
}

fn respond(status: u16) -> Step {
    Step::Respond(status, vec![], "")
}

#[tokio::test]
async fn b3_http_an_open_breaker_refuses_the_next_call_before_it_reaches_the_server() {
    let server = Server::start(vec![respond(503), respond(503)]).await;
    let clock = MockClock::new();
    let breaker = breaker(2, Duration::from_secs(10));
    let retry = builder(&clock)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut client = client(&retry);

    // Two failures open the circuit: the retry that would follow is refused, and the call
    // ends at once with the last response.
    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let Some((2, Some(StopReason::CircuitOpen(open)))) = report(&response) else {
        panic!("{:?}", report(&response));
    };
    assert_eq!((open.breaker(), open.state()), ("api", CircuitState::Open));
    assert_eq!(clock.sleeps(), [Duration::from_millis(200)]);

    // The next call is refused before anything is sent.
    let error = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap_err();
    assert_eq!(error.attempts(), 0);
    assert!(error.is_refused());
    assert!(matches!(error.reason(), StopReason::CircuitOpen(_)));
    assert_eq!(error.status(), None);
    assert_eq!(
        error.to_string(),
        format!(
            "GET {} not sent: circuit `api` is open: calls are refused for another 10s",
            server.addr
        )
    );
    assert_eq!(
        server.seen().len(),
        2,
        "the refused call never reached the server"
    );
    assert_eq!(
        retry.breaker().map(|b| b.state(clock.now())),
        Some(CircuitState::Open)
    );
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_after_the_break_a_probe_passes_and_its_success_closes_the_circuit() {
    let server = Server::start(vec![respond(503), Step::Respond(200, vec![], "ok")]).await;
    let clock = MockClock::new();
    let breaker = breaker(1, Duration::from_secs(5));
    let retry = one_attempt(&clock)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut client = client(&retry);

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(breaker.state(clock.now()), CircuitState::Open);

    // Still inside the break: refused.
    clock.advance(Duration::from_millis(4_999));
    let error = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap_err();
    assert!(matches!(error.reason(), StopReason::CircuitOpen(_)));
    assert_eq!(server.seen().len(), 1);

    // The break is over: one probe goes through, and its success closes the circuit.
    clock.advance(Duration::from_millis(1));
    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(report(&response), Some((1, None)));
    assert_eq!(breaker.state(clock.now()), CircuitState::Closed);
    assert_eq!(server.seen().len(), 2);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_a_probe_that_fails_opens_the_circuit_again() {
    let server = Server::start(vec![respond(502), Step::Reset]).await;
    let clock = MockClock::new();
    let breaker = breaker(1, Duration::from_secs(5));
    let retry = one_attempt(&clock)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut client = client(&retry);

    send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(5));
    // The probe's connection is reset: a failure, the circuit opens for another break.
    let error = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap_err();
    assert_eq!(
        (error.attempts(), error.reason()),
        (1, StopReason::Exhausted)
    );
    assert_eq!(breaker.state(clock.now()), CircuitState::Open);
    let error = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap_err();
    assert!(matches!(error.reason(), StopReason::CircuitOpen(_)));
    assert_eq!(server.seen().len(), 2);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_by_default_a_404_or_a_409_is_an_answer_and_a_reset_counts() {
    let server = Server::start(vec![
        Step::Reset,
        respond(404),
        Step::Reset,
        respond(409),
        Step::Reset,
        Step::Reset,
    ])
    .await;
    let clock = MockClock::new();
    let breaker = breaker(2, Duration::from_secs(5));
    let retry = one_attempt(&clock)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut client = client(&retry);

    // A 404, and a 409 the classification would retry, each end a run of failures.
    for _ in 0..4 {
        let _ = send(&clock, &mut client, get(&server.url("/"))).await;
        assert_eq!(breaker.state(clock.now()), CircuitState::Closed);
    }
    let _ = send(&clock, &mut client, get(&server.url("/"))).await;
    assert_eq!(breaker.state(clock.now()), CircuitState::Closed);
    let _ = send(&clock, &mut client, get(&server.url("/"))).await;
    assert_eq!(breaker.state(clock.now()), CircuitState::Open);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_a_post_that_is_not_retried_still_counts_and_keeps_its_reason() {
    let server = Server::start(vec![respond(503)]).await;
    let clock = MockClock::new();
    let breaker = breaker(1, Duration::from_secs(5));
    let retry = builder(&clock)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut client = client(&retry);

    let post = Request::post(server.url("/orders"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let response = send(&clock, &mut client, post).await.unwrap();
    assert_eq!(
        report(&response),
        Some((1, Some(StopReason::NotIdempotent)))
    );
    assert_eq!(breaker.state(clock.now()), CircuitState::Open);
}

#[tokio::test]
async fn b3_http_breaker_counts_replaces_what_counts() {
    let server = Server::start(vec![
        respond(500),
        respond(500),
        respond(500),
        respond(503),
        respond(503),
    ])
    .await;
    let clock = MockClock::new();
    let breaker = breaker(2, Duration::from_secs(5));
    // Only an overloaded server counts: a 500 is this API's bug, not an outage.
    let retry = one_attempt(&clock)
        .breaker(Arc::clone(&breaker))
        .breaker_counts(|outcome: &Outcome<'_>| {
            outcome.status() == Some(StatusCode::SERVICE_UNAVAILABLE)
        })
        .build()
        .unwrap();
    let mut client = client(&retry);

    for _ in 0..3 {
        send(&clock, &mut client, get(&server.url("/")))
            .await
            .unwrap();
    }
    assert_eq!(breaker.state(clock.now()), CircuitState::Closed);
    for _ in 0..2 {
        send(&clock, &mut client, get(&server.url("/")))
            .await
            .unwrap();
    }
    assert_eq!(breaker.state(clock.now()), CircuitState::Open);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_a_status_the_classification_does_not_retry_still_counts_and_is_the_answer() {
    let server = Server::start(vec![respond(500), respond(500)]).await;
    let clock = MockClock::new();
    let breaker = breaker(2, Duration::from_secs(5));
    let retry = builder(&clock)
        .classify(|_: &Outcome<'_>| false)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut client = client(&retry);

    for _ in 0..2 {
        let response = send(&clock, &mut client, get(&server.url("/")))
            .await
            .unwrap();
        // Returned as the answer it is: no retry, one attempt, nothing stopped.
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(report(&response), Some((1, None)));
    }
    assert_eq!(breaker.state(clock.now()), CircuitState::Open);
    assert!(clock.sleeps().is_empty());
    let error = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap_err();
    assert!(matches!(error.reason(), StopReason::CircuitOpen(_)));
    assert_eq!(server.seen().len(), 2);
}

/// A budget that admits no retry at all: no ratio, no floor.
static NO_RETRIES: RetryBudget = RetryBudget::with_config(
    match RetryBudget::builder().ratio(0.0).min_per_sec(0).validate() {
        Ok(config) => config,
        Err(e) => panic!("{}", e.message()),
    },
);

#[tokio::test]
async fn b3_http_an_exhausted_budget_returns_the_last_response_at_once() {
    let server = Server::start(vec![Step::Respond(503, vec![], "busy")]).await;
    let clock = MockClock::new();
    let retry = builder(&clock).budget(&NO_RETRIES).build().unwrap();
    let mut client = client(&retry);

    let response = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let Some((1, Some(reason @ StopReason::BudgetExhausted(exhausted)))) = report(&response) else {
        panic!("{:?}", report(&response));
    };
    assert_eq!((exhausted.requests(), exhausted.retries()), (1, 0));
    assert_eq!(
        reason.to_string(),
        "retry budget exhausted: 0 retries for 1 request in the last 10s"
    );
    assert!(clock.sleeps().is_empty(), "refused at once, without a wait");
    assert_eq!(server.seen().len(), 1, "no retry reached the server");
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_an_exhausted_budget_without_a_response_ends_with_the_last_error() {
    let server = Server::start(vec![Step::Reset]).await;
    let clock = MockClock::new();
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.0)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let retry = builder(&clock).budget(budget).build().unwrap();
    let mut client = client(&retry);

    let error = send(&clock, &mut client, get(&server.url("/")))
        .await
        .unwrap_err();

    assert_eq!(error.attempts(), 1);
    assert!(error.is_refused());
    assert!(matches!(error.reason(), StopReason::BudgetExhausted(_)));
    assert!(error.cause().is_some(), "the reset is the cause");
    let message = error.to_string();
    assert!(
        message
            .contains("gave up after 1 attempt: retry budget exhausted: 0 retries for 1 request"),
        "{message}"
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn b3_http_clones_of_a_policy_share_one_budget() {
    let server = Server::start(vec![respond(200), respond(503), respond(200), respond(503)]).await;
    let clock = MockClock::new();
    // Half a retry per request, no floor.
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.5)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let retry = builder(&clock).budget(Arc::clone(&budget)).build().unwrap();
    let mut a = client(&retry);
    let mut b = client(&retry.clone());

    assert_eq!(
        send(&clock, &mut a, get(&server.url("/")))
            .await
            .unwrap()
            .status(),
        200
    );
    // Two requests (one of them `a`'s) earn `b` its retry; alone it would have had half.
    let response = send(&clock, &mut b, get(&server.url("/"))).await.unwrap();
    assert_eq!(
        (response.status().as_u16(), report(&response)),
        (200, Some((2, None)))
    );
    // Three requests allow one and a half retries, and `b` spent one: `a` gets none.
    let response = send(&clock, &mut a, get(&server.url("/"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(matches!(
        report(&response),
        Some((1, Some(StopReason::BudgetExhausted(_))))
    ));

    let snapshot = budget.snapshot(clock.now());
    assert_eq!((snapshot.requests, snapshot.retries), (3, 1));
    assert_eq!(retry.budget().map(|b| b.ratio()), Some(0.5));
    assert_eq!(server.seen().len(), 4);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_two_clients_share_one_breaker() {
    let server = Server::start(vec![respond(503)]).await;
    let clock = MockClock::new();
    let breaker = breaker(1, Duration::from_secs(5));
    let retry = one_attempt(&clock)
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let mut a = client(&retry);
    let mut b = a.clone();

    send(&clock, &mut a, get(&server.url("/"))).await.unwrap();
    let error = send(&clock, &mut b, get(&server.url("/")))
        .await
        .unwrap_err();
    assert!(matches!(error.reason(), StopReason::CircuitOpen(_)));
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn b3_http_bad_budget_or_breaker_settings_fail_with_their_rule() {
    fn with_budget(ratio: f64) -> Result<HttpRetry, BuildError> {
        let budget = Arc::new(RetryBudget::builder().ratio(ratio).build()?);
        HttpRetry::builder().budget(budget).build()
    }
    fn with_breaker(failures: u32) -> Result<HttpRetry, BuildError> {
        let breaker = CircuitBreaker::builder()
            .consecutive_failures(failures)
            .build()?;
        HttpRetry::builder().breaker(Arc::new(breaker)).build()
    }

    let error = with_budget(1.5).unwrap_err();
    assert_eq!(error, BuildError::Budget(BudgetError::RatioOutOfRange));
    assert_eq!(error.to_string(), "budget.ratio must be >= 0 and <= 1");
    let error = with_breaker(0).unwrap_err();
    assert_eq!(
        error,
        BuildError::Breaker(BreakerError::ConsecutiveFailuresZero)
    );
    assert_eq!(
        error.to_string(),
        "breaker.consecutive_failures must be >= 1"
    );
    assert!(with_budget(0.1).is_ok() && with_breaker(3).is_ok());
}
