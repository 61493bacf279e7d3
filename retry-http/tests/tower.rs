//! The tower layer around hyper-util's client, against a real server on 127.0.0.1 that
//! scripts its faults. Every wait is on the mock clock: no test sleeps in wall time.

mod support;

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_core::effects::IdempotencyKey;
use retry_core::{CancelToken, Jitter, RetryOptions};
use retry_http::{
    BuildError, Error, HttpRetry, Outcome, ResponseBody, RetryReport, RetryService, StopReason,
};
use retry_testkit::{MockClock, SleepStatus};
use support::{Server, Step, drive};
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
    let report = response.extensions().get::<RetryReport>()?;
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

    let response = send(&clock, &mut client, get(&server.url("/"))).await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(report(&response), Some((2, None)));
    assert_eq!(text(response).await, "ok");
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
    assert_eq!(clock.elapsed(), Duration::from_secs(2));
    assert_eq!(server.seen().len(), 2);
    server.assert_script_done();
}

