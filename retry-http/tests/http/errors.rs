//! SPEC H7: errors keep their chain. `Display` says what happened, `source()` returns the last
//! cause (never both), and errors raised by other reqwest middlewares keep their type and
//! their I/O kind. Real server on 127.0.0.1, mock clock.

use crate::support;

use std::error::Error as StdError;
use std::io;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retry_http::{DefaultClassify, Error, HttpRetry, StopReason};
use retry_testkit::MockClock;
use retry_toolkit::{Jitter, RetryOptions};
use support::{Server, Step};
use tower::{Service, ServiceBuilder, ServiceExt};

fn retry(clock: &MockClock) -> HttpRetry<DefaultClassify, MockClock> {
    HttpRetry::builder()
        .options(RetryOptions::new().with_jitter(Jitter::None))
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// The first `io::ErrorKind` in `error`'s chain.
fn io_kind(error: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        next = e.source();
    }
    None
}

#[tokio::test]
async fn h7_display_says_what_happened_and_the_source_is_the_last_cause() {
    let server = Server::start(vec![Step::Reset, Step::Reset, Step::Reset]).await;
    let clock = MockClock::new();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new()
        .layer(retry(&clock).layer())
        .service(client);
    let request = Request::get(server.url("/"))
        .body(Full::new(Bytes::new()))
        .unwrap();

    let call = client.ready().await.unwrap().call(request);
    let error = clock.run_watching(server.io(), call).await.unwrap_err();

    assert_eq!(
        error.to_string(),
        format!(
            "GET {} gave up after 3 attempts: attempts exhausted",
            server.addr
        )
    );
    let source = error.source().expect("the last cause is the source");
    assert!(std::ptr::addr_eq(
        source,
        error.cause().expect("the same as cause()")
    ));
    assert_eq!(io_kind(&error), Some(io::ErrorKind::ConnectionReset));
    // anyhow prints the chain: the message once, then each cause.
    let report = format!("{:#}", anyhow::Error::from(error));
    assert_eq!(report.matches("gave up").count(), 1, "{report}");
    assert!(
        report.starts_with(&format!(
            "GET {} gave up after 3 attempts: attempts exhausted: ",
            server.addr
        )),
        "{report}"
    );
    assert_eq!(server.seen().len(), 3);
}

#[test]
fn h7_an_error_without_a_cause_has_no_source() {
    // A call refused before anything was sent has no cause to chain.
    let retry = HttpRetry::builder().build().unwrap();
    let mut service = ServiceBuilder::new()
        .layer(retry.layer())
        .service(tower::service_fn(|_: Request<Full<Bytes>>| async {
            Ok::<_, io::Error>(http::Response::new(Full::new(Bytes::new())))
        }));
    let mut request = Request::post("http://127.0.0.1:9/")
        .body(Full::new(Bytes::new()))
        .unwrap();
    request
        .headers_mut()
        .insert("idempotency-key", "a".parse().unwrap());
    request
        .extensions_mut()
        .insert(retry_toolkit::effects::IdempotencyKey::new("b").unwrap());
    let error: Error = futures_ready(service.call(request)).unwrap_err();
    assert_eq!(error.reason(), StopReason::InvalidIdempotencyKey);
    assert!(error.source().is_none());
}

/// A future that is ready at its first poll.
fn futures_ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("not ready at once"),
    }
}

#[cfg(feature = "reqwest")]
mod through_reqwest {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use http::Extensions;
    use reqwest_middleware::{ClientBuilder, Middleware, Next};

    /// The caller's own error, raised by a middleware of theirs.
    #[derive(Debug, thiserror::Error)]
    #[error("blocked by policy {0}")]
    struct PolicyViolation(&'static str);

    /// A middleware inside the retry's: its first `fail` calls fail with `make()`, the rest
    /// go through.
    struct Failing<F> {
        fail: u32,
        calls: Arc<AtomicU32>,
        make: F,
    }

    #[async_trait::async_trait]
    impl<F> Middleware for Failing<F>
    where
        F: Fn() -> anyhow::Error + Send + Sync + 'static,
    {
        async fn handle(
            &self,
            request: reqwest::Request,
            extensions: &mut Extensions,
            next: Next<'_>,
        ) -> reqwest_middleware::Result<reqwest::Response> {
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail {
                return Err(reqwest_middleware::Error::Middleware((self.make)()));
            }
            next.run(request, extensions).await
        }
    }

    fn client<F>(
        clock: &MockClock,
        fail: u32,
        make: F,
    ) -> (reqwest_middleware::ClientWithMiddleware, Arc<AtomicU32>)
    where
        F: Fn() -> anyhow::Error + Send + Sync + 'static,
    {
        let calls = Arc::new(AtomicU32::new(0));
        let failing = Failing {
            fail,
            calls: Arc::clone(&calls),
            make,
        };
        let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
            .with(retry(clock).middleware())
            .with(failing)
            .build();
        (client, calls)
    }

    #[tokio::test]
    async fn h7_reqwest_another_middlewares_error_keeps_its_type() {
        let server = Server::start(vec![]).await;
        let clock = MockClock::new();
        let (client, calls) = client(&clock, 1, || PolicyViolation("no-egress").into());

        let error = support::reqwest_get(&clock, &server, &client)
            .await
            .unwrap_err();

        let error = support::middleware_error(error);
        let ours = error.downcast_ref::<Error>().unwrap();
        assert_eq!(
            (ours.reason(), ours.attempts()),
            (StopReason::NotRetryable, 1)
        );
        // The caller's own type, found by a walk of the chain and through `cause()`.
        let found = error
            .chain()
            .find_map(|e| e.downcast_ref::<PolicyViolation>());
        assert_eq!(found.map(|p| p.0), Some("no-egress"));
        assert!(ours.cause().unwrap().is::<PolicyViolation>());
        let report = format!("{error:#}");
        assert_eq!(
            report,
            format!(
                "GET {} gave up after 1 attempt: not retryable: blocked by policy no-egress",
                server.addr
            )
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(server.seen().is_empty());
    }

    #[tokio::test]
    async fn h7_reqwest_an_io_reset_raised_by_another_middleware_is_retried() {
        let server = Server::start(vec![Step::Respond(200, vec![], "ok")]).await;
        let clock = MockClock::new();
        let (client, calls) = client(&clock, 1, || {
            io::Error::new(io::ErrorKind::ConnectionReset, "reset by a proxy").into()
        });

        let response = support::reqwest_get(&clock, &server, &client)
            .await
            .unwrap();

        assert_eq!(response.status(), 200);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(server.seen().len(), 1);
    }

    #[tokio::test]
    async fn h7_reqwest_an_io_kind_is_found_by_walking_the_chain() {
        let server = Server::start(vec![]).await;
        let clock = MockClock::new();
        let (client, _) = client(&clock, 3, || {
            anyhow::Error::from(io::Error::new(io::ErrorKind::ConnectionReset, "reset"))
                .context("proxy hop")
        });

        let error = support::reqwest_get(&clock, &server, &client)
            .await
            .unwrap_err();

        let error = support::middleware_error(error);
        let ours = error.downcast_ref::<Error>().unwrap();
        assert_eq!((ours.reason(), ours.attempts()), (StopReason::Exhausted, 3));
        assert_eq!(io_kind(ours), Some(io::ErrorKind::ConnectionReset));
        assert_eq!(
            format!("{error:#}"),
            format!(
                "GET {} gave up after 3 attempts: attempts exhausted: proxy hop: reset",
                server.addr
            )
        );
    }
}
