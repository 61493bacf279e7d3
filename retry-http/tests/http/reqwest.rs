//! The reqwest-middleware middleware against the same scripted server: the same rules as
//! the tower layer, through `ClientWithMiddleware`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retry_http::{Error, HttpRetry, RetryMiddleware, RetryReport, StopReason};
use retry_testkit::MockClock;
use retry_toolkit::effects::IdempotencyKey;
use retry_toolkit::{CircuitBreaker, CircuitState, Jitter, RetryBudget, RetryOptions};
use support::{Server, Step, drive};

fn client(clock: &MockClock) -> ClientWithMiddleware {
    let retry = HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
        .build()
        .unwrap();
    ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
        .with(retry.middleware())
        .build()
}

fn report(response: &reqwest::Response) -> Option<(u32, Option<StopReason>)> {
    let report = RetryReport::of(response.extensions());
    Some((report.attempts, report.stopped))
}

/// The crate's error inside reqwest-middleware's.
fn our_error(error: &reqwest_middleware::Error) -> &Error {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Error>().unwrap(),
        other => panic!("not the retry's error: {other:?}"),
    }
}

#[tokio::test]
async fn h2_a_503_with_retry_after_2_waits_two_seconds_of_clock_time() {
    let server = Server::start(vec![
        Step::Respond(503, vec![("retry-after", "2".into())], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let client = client(&clock);

    let response = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
    server.assert_script_done();
}

#[tokio::test]
async fn h2_a_retry_after_too_large_for_a_u64_is_malformed_and_ignored() {
    let server = Server::start(vec![
        Step::Respond(
            503,
            vec![("retry-after", "99999999999999999999".into())],
            "busy",
        ),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let client = client(&clock);

    let response = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(clock.sleeps(), [Duration::from_millis(200)]);
    server.assert_script_done();
}

#[tokio::test]
async fn d5_a_429_asking_beyond_the_ceiling_is_returned_at_once() {
    let server = Server::start(vec![Step::Respond(
        429,
        vec![("retry-after", "3600".into())],
        "",
    )])
    .await;
    let clock = MockClock::new();
    let client = client(&clock);

    let response = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap();

    assert_eq!(response.status(), 429);
    assert!(matches!(
        report(&response),
        Some((1, Some(StopReason::RetryAfterAboveCeiling { .. })))
    ));
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn h3_a_post_is_retried_only_with_a_key_and_always_the_same_key() {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Reset,
        Step::Respond(503, vec![], "busy"),
        Step::Respond(201, vec![], "created"),
    ])
    .await;
    let clock = MockClock::new();
    let client = client(&clock);

    let unkeyed = client.post(server.url("/orders")).body("{}").send();
    let response = drive(&clock, &[], unkeyed).await.unwrap();
    assert_eq!(
        report(&response),
        Some((1, Some(StopReason::NotIdempotent)))
    );

    let keyed = client
        .post(server.url("/orders"))
        .body("{\"sku\":42}")
        .with_extension(IdempotencyKey::new("order-42").unwrap())
        .send();
    let response = drive(&clock, &[], keyed).await.unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(report(&response), Some((3, None)));

    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    assert!(!seen[0].headers.contains_key("idempotency-key"));
    for request in &seen[1..] {
        assert_eq!(request.headers["idempotency-key"], "order-42");
        assert_eq!(request.body, "{\"sku\":42}");
    }
}

#[tokio::test]
async fn h5_a_call_without_an_answer_says_how_many_attempts_and_why() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let clock = MockClock::new();
    let client = client(&clock);

    let error = drive(&clock, &[], client.get(url).send())
        .await
        .unwrap_err();

    let error = our_error(&error);
    assert_eq!(
        (error.attempts(), error.reason()),
        (3, StopReason::Exhausted)
    );
    assert!(
        error
            .to_string()
            .contains("gave up after 3 attempts: attempts exhausted"),
        "{error}"
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
    let client = client(&clock);

    let mut response = drive(&clock, &[], client.get(server.url("/events")).send())
        .await
        .unwrap();
    assert_eq!(
        response.url().as_str(),
        server.url("/events"),
        "the URL survives"
    );
    assert_eq!(response.chunk().await.unwrap().unwrap(), "data: one\n\n");
    let error = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => assert!(chunk.is_empty()),
            Ok(None) => panic!("the stream ended cleanly, but the server cut it"),
            Err(error) => break error,
        }
    };

    let ours = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
        .find_map(|e| e.downcast_ref::<Error>())
        .expect("the retry's error is in the chain");
    assert_eq!(ours.reason(), StopReason::AfterEvent);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn h4_an_event_stream_cut_before_its_first_event_is_retried() {
    let server = Server::start(vec![
        Step::EventsThenCut(vec![": ping\n\n"]),
        Step::Events(vec!["data: two\n\n"]),
    ])
    .await;
    let clock = MockClock::new();
    let client = client(&clock);

    let response = drive(&clock, &[], client.get(server.url("/events")).send())
        .await
        .unwrap();

    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(response.text().await.unwrap(), "data: two\n\n");
    assert_eq!(server.seen().len(), 2);
}

fn with_middleware(
    middleware: RetryMiddleware<retry_http::DefaultClassify, MockClock>,
) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
        .with(middleware)
        .build()
}

#[tokio::test]
async fn b3_http_an_open_breaker_refuses_before_sending_and_a_probe_closes_it() {
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let breaker = Arc::new(
        CircuitBreaker::builder()
            .name("api")
            .consecutive_failures(2)
            .break_duration(Duration::from_secs(5))
            .build()
            .unwrap(),
    );
    let retry = HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
        .breaker(Arc::clone(&breaker))
        .build()
        .unwrap();
    let client = with_middleware(retry.middleware());

    // Two 503s open the circuit: the third attempt is not made.
    let response = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(matches!(
        report(&response),
        Some((2, Some(StopReason::CircuitOpen(_))))
    ));

    // Refused before anything is sent.
    let error = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap_err();
    let ours = our_error(&error);
    assert_eq!(ours.attempts(), 0);
    assert!(ours.is_refused());
    let StopReason::CircuitOpen(open) = ours.reason() else {
        panic!("{ours}");
    };
    assert_eq!(open.retry_after(), Some(Duration::from_secs(5)));
    assert_eq!(server.seen().len(), 2);

    // After the break, a probe; its success closes the circuit.
    clock.advance(Duration::from_secs(5));
    let response = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(breaker.state(clock.now()), CircuitState::Closed);
    assert_eq!(server.seen().len(), 3);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_an_exhausted_budget_returns_the_last_response_and_no_retry_is_sent() {
    let server = Server::start(vec![Step::Respond(503, vec![], "busy")]).await;
    let clock = MockClock::new();
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.0)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let retry = HttpRetry::builder()
        .clock(clock.clone())
        .budget(budget)
        .build()
        .unwrap();
    let client = with_middleware(retry.middleware());

    let response = drive(&clock, &[], client.get(server.url("/")).send())
        .await
        .unwrap();

    assert_eq!(response.status(), 503);
    assert!(matches!(
        report(&response),
        Some((1, Some(StopReason::BudgetExhausted(_))))
    ));
    assert_eq!(response.text().await.unwrap(), "busy");
    assert!(clock.sleeps().is_empty());
    assert_eq!(server.seen().len(), 1);
    server.assert_script_done();
}

#[tokio::test]
async fn b3_http_clones_of_the_middleware_share_one_budget() {
    let server = Server::start(vec![
        Step::Respond(200, vec![], ""),
        Step::Respond(503, vec![], ""),
        Step::Respond(200, vec![], ""),
        Step::Respond(503, vec![], ""),
    ])
    .await;
    let clock = MockClock::new();
    let budget = Arc::new(
        RetryBudget::builder()
            .ratio(0.5)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let retry = HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
        .budget(Arc::clone(&budget))
        .build()
        .unwrap();
    let middleware = retry.middleware();
    let a = with_middleware(middleware.clone());
    let b = with_middleware(middleware);

    let response = drive(&clock, &[], a.get(server.url("/")).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // `a`'s request earns `b` its retry.
    let response = drive(&clock, &[], b.get(server.url("/")).send())
        .await
        .unwrap();
    assert_eq!(
        (response.status().as_u16(), report(&response)),
        (200, Some((2, None)))
    );
    // `b` spent it: `a`'s retry is refused.
    let response = drive(&clock, &[], a.get(server.url("/")).send())
        .await
        .unwrap();
    assert!(matches!(
        report(&response),
        Some((1, Some(StopReason::BudgetExhausted(_))))
    ));
    let snapshot = budget.snapshot(clock.now());
    assert_eq!((snapshot.requests, snapshot.retries), (3, 1));
    assert_eq!(server.seen().len(), 4);
    server.assert_script_done();
}

#[tokio::test]
async fn h5_reqwest_each_call_names_its_own_host_after_a_call_to_another() {
    // The middleware reuses the last call's copy of its host: a call to another host after it
    // must still name its own, and a call back to the first the first.
    let a = Server::start(vec![
        Step::Respond(200, vec![], "ok"),
        Step::Reset,
        Step::Reset,
        Step::Reset,
    ])
    .await;
    let b = Server::start(vec![Step::Reset, Step::Reset, Step::Reset]).await;
    let clock = MockClock::new();
    let client = client(&clock);
    let host = |url: String| {
        url.trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned()
    };

    let response = drive(&clock, &[], client.get(a.url("/")).send()).await;
    assert_eq!(response.unwrap().status(), 200);
    let error = drive(&clock, &[], client.get(b.url("/")).send())
        .await
        .unwrap_err();
    assert_eq!(our_error(&error).host(), Some(host(b.url("/")).as_str()));
    let error = drive(&clock, &[], client.get(a.url("/")).send())
        .await
        .unwrap_err();
    assert_eq!(our_error(&error).host(), Some(host(a.url("/")).as_str()));
}

/// The extensions of a call, as the middleware after the retry's sees them: what each attempt
/// started from, and a mark of its own added.
mod extensions {
    use super::*;

    use std::sync::Mutex;

    use http::Extensions;
    use reqwest_middleware::{Middleware, Next};

    #[derive(Clone, Debug, PartialEq)]
    struct Given(u32);

    #[derive(Clone, Debug, PartialEq)]
    struct Added(u32);

    /// What each attempt's extensions held, in order.
    type Seen = Arc<Mutex<Vec<(Option<Given>, Option<Added>)>>>;

    /// Records what each attempt's extensions held, then adds its own mark.
    #[derive(Default)]
    struct Recording(Seen);

    #[async_trait::async_trait]
    impl Middleware for Recording {
        async fn handle(
            &self,
            request: reqwest::Request,
            extensions: &mut Extensions,
            next: Next<'_>,
        ) -> reqwest_middleware::Result<reqwest::Response> {
            let seen = (
                extensions.get::<Given>().cloned(),
                extensions.get::<Added>().cloned(),
            );
            let attempt = {
                let mut seen_so_far = self.0.lock().unwrap();
                seen_so_far.push(seen);
                seen_so_far.len() as u32
            };
            extensions.insert(Added(attempt));
            next.run(request, extensions).await
        }
    }

    fn client(clock: &MockClock) -> (ClientWithMiddleware, Seen) {
        let recording = Recording::default();
        let seen = Arc::clone(&recording.0);
        let retry = HttpRetry::builder()
            .options(RetryOptions::new().with_jitter(Jitter::None))
            .clock(clock.clone())
            .build()
            .unwrap();
        let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
            .with(retry.middleware())
            .with(recording)
            .build();
        (client, seen)
    }

    /// Runs a GET against `script` with extensions holding `Given(7)`: its answer's status,
    /// what each attempt's extensions held, and the caller's extensions after the call.
    async fn call(script: Vec<Step>) -> (u16, Vec<(Option<Given>, Option<Added>)>, Extensions) {
        let server = Server::start(script).await;
        let clock = MockClock::new();
        let (client, seen) = client(&clock);
        let request = client.get(server.url("/")).build().unwrap();
        let mut given = Extensions::new();
        given.insert(Given(7));

        let call = client.execute_with_extensions(request, &mut given);
        let response = drive(&clock, &[], call).await.unwrap();

        server.assert_script_done();
        let seen = seen.lock().unwrap().clone();
        (response.status().as_u16(), seen, given)
    }

    #[tokio::test]
    async fn h5_every_attempt_starts_from_the_extensions_as_the_caller_gave_them() {
        let busy = || Step::Respond(503, vec![], "busy");
        let (status, seen, _) = call(vec![busy(), busy(), Step::Respond(200, vec![], "ok")]).await;

        assert_eq!(status, 200);
        // No attempt sees what an earlier attempt added.
        let as_given = (Some(Given(7)), None);
        assert_eq!(seen, [as_given.clone(), as_given.clone(), as_given]);
    }

    #[tokio::test]
    async fn h5_what_the_chain_adds_to_a_first_answer_reaches_the_caller() {
        // As it would without the retry: the first attempt runs with the caller's extensions.
        let (status, seen, given) = call(vec![Step::Respond(200, vec![], "ok")]).await;

        assert_eq!(status, 200);
        assert_eq!(seen, [(Some(Given(7)), None)]);
        assert_eq!(given.get::<Added>(), Some(&Added(1)));
        assert_eq!(given.get::<Given>(), Some(&Given(7)));
    }
}
