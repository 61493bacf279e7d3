//! The events a call emits name its method, host and status, as the stock fmt subscriber
//! prints them.

use crate::support;

use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retry_http::HttpRetry;
use retry_testkit::MockClock;
use retry_toolkit::{Jitter, RetryOptions};
use support::{Server, Step, drive};
use tower::{Service, ServiceBuilder, ServiceExt};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn r4_a_retry_and_a_give_up_are_logged_with_method_host_and_status() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = Server::start(vec![
        Step::Respond(503, vec![("retry-after", "1".into())], "busy"),
        Step::Respond(429, vec![("retry-after", "600".into())], "later"),
    ])
    .await;
    let clock = MockClock::new();
    let retry = HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
        .build()
        .unwrap();
    let inner = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(inner);
    let request = Request::get(server.url("/items"))
        .body(Full::new(Bytes::new()))
        .unwrap();

    let call = client.ready().await.unwrap().call(request);
    let response = drive(&clock, &[], call).await.unwrap();
    assert_eq!(response.status(), 429);

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let host = server.addr.to_string();
    let retried = log
        .lines()
        .find(|l| l.contains("retry_http") && l.contains("http attempt failed; retrying"))
        .unwrap_or_else(|| panic!("no retry event in:\n{log}"));
    for field in [
        "method=GET",
        &format!("host={host}"),
        "status=503",
        "attempt=1",
        "delay=1s",
    ] {
        assert!(retried.contains(field), "{field} missing from: {retried}");
    }
    let gave_up = log
        .lines()
        .find(|l| l.contains("retry_http") && l.contains("http retry gave up"))
        .unwrap_or_else(|| panic!("no give-up event in:\n{log}"));
    for field in [
        "method=GET",
        &format!("host={host}"),
        "status=429",
        "attempts=2",
        "more than the 60s allowed",
    ] {
        assert!(gave_up.contains(field), "{field} missing from: {gave_up}");
    }
}
