//! The layer's metrics (V3): retries and calls that gave up, by stop reason, read back from the
//! `metrics` facade's debugging recorder installed for the test's thread, against a real server
//! on 127.0.0.1. Every wait is on the mock clock.

use crate::support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use retry_http::HttpRetry;
use retry_testkit::MockClock;
use retry_toolkit::{Jitter, RetryOptions};
use support::{Server, Step, drive};
use tower::{Service, ServiceBuilder, ServiceExt};

type Body = Full<Bytes>;

/// A counter's name, labels and count.
type Count = (String, Vec<(String, String)>, u64);

/// Each of the layer's counters recorded since the last read (reading resets them), by name
/// and labels. The core's own series (`retry_…`, counted for every loop, this layer's
/// included, when the core's `metrics` feature is on too) are left out.
fn counts(snapshotter: &Snapshotter) -> Vec<Count> {
    let mut all: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let labels = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            Some((key.key().name().to_owned(), labels, n))
        })
        .filter(|(name, _, n)| *n > 0 && name.starts_with("retry_http_"))
        .collect();
    all.sort();
    all
}

fn gave_up(reason: &str) -> Count {
    (
        "retry_http_gave_up_total".to_owned(),
        vec![("reason".to_owned(), reason.to_owned())],
        1,
    )
}

fn retries(n: u64) -> Count {
    ("retry_http_retries_total".to_owned(), Vec::new(), n)
}

/// Sends `request` through the layer (fixed waits, no jitter) and returns the status.
async fn status(clock: &MockClock, request: Request<Body>) -> StatusCode {
    let retry = HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
        .build()
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(client);
    let call = client.ready().await.unwrap().call(request);
    drive(clock, &[], call).await.unwrap().status()
}

fn get(url: String) -> Request<Body> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

#[tokio::test]
async fn v3_retries_are_counted_and_a_success_gives_up_nothing() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = Server::start(vec![
        Step::Respond(503, vec![], "busy"),
        Step::Respond(200, vec![], "ok"),
        Step::Respond(200, vec![], "ok"),
    ])
    .await;
    let clock = MockClock::new();

    assert_eq!(status(&clock, get(server.url("/"))).await, StatusCode::OK);
    assert_eq!(counts(&snapshotter), [retries(1)]);
    assert_eq!(status(&clock, get(server.url("/"))).await, StatusCode::OK);
    assert_eq!(counts(&snapshotter), []);
    server.assert_script_done();
}

#[tokio::test]
async fn v3_a_call_that_gives_up_counts_its_stop_reason() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = Server::start(vec![
        Step::Respond(503, vec![], "one"),
        Step::Respond(503, vec![], "two"),
        Step::Respond(503, vec![], "three"),
        Step::Respond(503, vec![], "a post"),
    ])
    .await;
    let clock = MockClock::new();

    let last = status(&clock, get(server.url("/"))).await;
    assert_eq!(last, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(counts(&snapshotter), [gave_up("exhausted"), retries(2)]);

    // A POST without an idempotency key is not repeated: one attempt, and why.
    let post = Request::post(server.url("/orders"))
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    assert_eq!(status(&clock, post).await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(counts(&snapshotter), [gave_up("not_idempotent")]);
    server.assert_script_done();
}
