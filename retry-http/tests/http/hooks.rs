//! What a caller can see of a call (SPEC H2, H5, T1): HTTP-date hints on the injected clock,
//! the `notify` hook, a `RetryReport` for every response, and a refused idempotency key that
//! says so. Through the tower layer and the reqwest middleware, against a real server on
//! 127.0.0.1, on the mock clock.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retry_http::{DefaultClassify, HttpRetry, HttpRetryBuilder, Outcome, RetryReport, StopReason};
use retry_testkit::MockClock;
use retry_toolkit::effects::IdempotencyKey;
use retry_toolkit::{Jitter, RetryOptions};
use support::{Server, Step};
use tower::{Service, ServiceBuilder, ServiceExt};

const MS: Duration = Duration::from_millis(1);

/// What the hook saw: the status or the error's text, the attempt, the delay.
type Seen = Arc<Mutex<Vec<(String, u32, Duration)>>>;

fn builder(clock: &MockClock) -> HttpRetryBuilder<DefaultClassify, MockClock> {
    HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
}

fn noting(clock: &MockClock) -> (HttpRetry<DefaultClassify, MockClock>, Seen) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let retry = builder(clock)
        .attempt_timeout(Duration::from_secs(1))
        .notify(move |outcome: &Outcome<'_>, attempt, delay| {
            let what = match (outcome.status(), outcome.error(), outcome.timed_out()) {
                (Some(status), _, _) => status.as_u16().to_string(),
                (_, Some(error), _) => format!("error: {error}"),
                (_, _, Some(timeout)) => format!("timed out after {timeout:?}"),
                _ => "?".to_owned(),
            };
            log.lock().unwrap().push((what, attempt, delay));
        })
        .build()
        .unwrap();
    (retry, seen)
}

fn tower_client(
    retry: &HttpRetry<DefaultClassify, MockClock>,
) -> retry_http::RetryService<
    Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    DefaultClassify,
    MockClock,
> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    ServiceBuilder::new().layer(retry.layer()).service(client)
}

fn get(url: String) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

fn oct_21_2015_072800() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480)
}

fn flaky() -> Vec<Step> {
    vec![
        Step::Respond(503, vec![], "busy"),
        Step::Hang,
        Step::Respond(200, vec![], "ok"),
    ]
}

const EXPECTED_NOTES: [(&str, u32, Duration); 2] = [
    ("503", 1, Duration::from_millis(200)),
    ("timed out after 1s", 2, Duration::from_millis(400)),
];

fn notes(seen: &Seen) -> Vec<(String, u32, Duration)> {
    seen.lock().unwrap().clone()
}

fn expected() -> Vec<(String, u32, Duration)> {
    EXPECTED_NOTES
        .iter()
        .map(|(w, a, d)| ((*w).to_owned(), *a, *d))
        .collect()
}

#[tokio::test]
async fn h5_notify_is_called_before_each_wait_with_what_failed() {
    let server = Server::start(flaky()).await;
    let clock = MockClock::new();
    let (retry, seen) = noting(&clock);
    let mut client = tower_client(&retry);

    let call = client.ready().await.unwrap().call(get(server.url("/")));
    let response = clock.run_watching(server.io(), call).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(notes(&seen), expected());
    // The waits the hook announced are the backoffs the loop slept (the rest are timers).
    let backoffs: Vec<_> = clock
        .sleeps()
        .into_iter()
        .filter(|d| *d != Duration::from_secs(1))
        .collect();
    assert_eq!(backoffs, [200 * MS, 400 * MS]);
}

#[tokio::test]
async fn h5_a_first_answer_carries_a_report_of_one_attempt() {
    let server = Server::start(vec![Step::Respond(200, vec![], "ok")]).await;
    let clock = MockClock::new();
    let (retry, seen) = noting(&clock);
    let mut client = tower_client(&retry);

    let call = client.ready().await.unwrap().call(get(server.url("/")));
    let response = clock.run_watching(server.io(), call).await.unwrap();

    let report = RetryReport::of(response.extensions());
    assert_eq!((report.attempts, report.stopped), (1, None));
    assert!(notes(&seen).is_empty(), "no retry, no notification");
}

#[tokio::test]
async fn h2_a_date_hint_without_a_date_header_follows_the_mock_clock() {
    // 10 s after the mock clock's wall time; the machine's clock would read it as past.
    let server = Server::start(vec![
        Step::Respond(
            429,
            vec![("retry-after", "Wed, 21 Oct 2015 07:28:10 GMT".into())],
            "slow down",
        ),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new().with_wall_time(oct_21_2015_072800());
    clock.advance(Duration::from_secs(4)); // the policy reads the clock's time, whenever
    let retry = builder(&clock).build().unwrap();
    let mut client = tower_client(&retry);

    let call = client.ready().await.unwrap().call(get(server.url("/")));
    let response = clock.run_watching(server.io(), call).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(clock.sleeps(), [Duration::from_secs(6)]);
}

#[tokio::test]
async fn h5_an_invalid_idempotency_key_says_so_and_that_nothing_was_sent() {
    let server = Server::start(vec![]).await;
    let clock = MockClock::new();
    let retry = builder(&clock).build().unwrap();
    let mut client = tower_client(&retry);
    let mut request = Request::post(server.url("/orders"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    request
        .extensions_mut()
        .insert(IdempotencyKey::new("line\nbreak").unwrap());

    let call = client.ready().await.unwrap().call(request);
    let error = clock.run_watching(server.io(), call).await.unwrap_err();

    assert_eq!(
        (error.reason(), error.attempts()),
        (StopReason::InvalidIdempotencyKey, 0)
    );
    let message = error.to_string();
    assert_eq!(
        message,
        format!(
            "POST {} not sent: the idempotency key is invalid: it is not a valid header \
             value, or differs from the Idempotency-Key header the request already carries",
            server.addr
        )
    );
    assert!(!message.contains("failed after"), "{message}");
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn h5_an_outer_layer_answered_at_once_reports_its_own_single_attempt() {
    // The inner layer retries the 503 and reports 2 attempts; the outer layer's first attempt
    // got that answer, so the caller reads the outer call's report: 1 attempt.
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();
    let inner = builder(&clock).build().unwrap();
    let outer = builder(&clock).build().unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new()
        .layer(outer.layer())
        .layer(inner.layer())
        .service(client);

    let call = client.ready().await.unwrap().call(get(server.url("/")));
    let response = clock.run_watching(server.io(), call).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let report = RetryReport::of(response.extensions());
    assert_eq!((report.attempts, report.stopped), (1, None));
    assert_eq!(server.seen().len(), 2);
}

#[cfg(feature = "reqwest")]
mod through_reqwest {
    use super::*;
    use support::{reqwest_client as client, reqwest_get};

    fn report(response: &reqwest::Response) -> Option<(u32, Option<StopReason>)> {
        let report = RetryReport::of(response.extensions());
        Some((report.attempts, report.stopped))
    }

    #[tokio::test]
    async fn h5_reqwest_notify_is_called_before_each_wait_with_what_failed() {
        let server = Server::start(flaky()).await;
        let clock = MockClock::new();
        let (retry, seen) = noting(&clock);
        let client = client(&retry);

        let response = reqwest_get(&clock, &server, &client).await.unwrap();

        assert_eq!(response.status(), 200);
        assert_eq!(report(&response), Some((3, None)));
        assert_eq!(notes(&seen), expected());
    }

    #[tokio::test]
    async fn h5_reqwest_a_first_answer_carries_a_report_of_one_attempt() {
        let server = Server::start(vec![Step::Respond(200, vec![], "ok")]).await;
        let clock = MockClock::new();
        let client = client(&builder(&clock).build().unwrap());

        let response = reqwest_get(&clock, &server, &client).await.unwrap();

        assert_eq!(report(&response), Some((1, None)));
    }

    #[tokio::test]
    async fn h2_reqwest_a_date_hint_follows_the_mock_clock() {
        let server = Server::start(vec![
            Step::Respond(
                503,
                vec![("retry-after", "Wed, 21 Oct 2015 07:28:10 GMT".into())],
                "busy",
            ),
            Step::Respond(200, vec![], "ok"),
        ])
        .await;
        let clock = MockClock::new().with_wall_time(oct_21_2015_072800());
        let client = client(&builder(&clock).build().unwrap());

        let response = reqwest_get(&clock, &server, &client).await.unwrap();

        assert_eq!(response.status(), 200);
        assert_eq!(clock.sleeps(), [Duration::from_secs(10)]);
    }

    #[tokio::test]
    async fn h5_reqwest_an_invalid_idempotency_key_says_so_and_that_nothing_was_sent() {
        let server = Server::start(vec![]).await;
        let clock = MockClock::new();
        let client = client(&builder(&clock).build().unwrap());

        let error = clock
            .run_watching(
                server.io(),
                client
                    .post(server.url("/orders"))
                    .header("idempotency-key", "a")
                    .with_extension(IdempotencyKey::new("b").unwrap())
                    .send(),
            )
            .await
            .unwrap_err();

        let error = support::middleware_error(error);
        let ours = error.downcast_ref::<retry_http::Error>().unwrap();
        assert_eq!(
            (ours.reason(), ours.attempts()),
            (StopReason::InvalidIdempotencyKey, 0)
        );
        assert!(
            ours.to_string().starts_with(&format!(
                "POST {} not sent: the idempotency key is invalid",
                server.addr
            )),
            "{ours}"
        );
        assert!(server.seen().is_empty());
    }
}
