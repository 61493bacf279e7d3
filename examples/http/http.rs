//! HTTP retry against a flaky server this example starts on 127.0.0.1: hyper-util's client
//! behind the retry layer, and what it does with each fault.
//!
//! Run with `cargo run -p retry-examples-http --example http`. Real time: about two seconds, most of it the one
//! second a server's `Retry-After` asks for.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retry_http::{HttpRetry, RetryReport};
use retry_toolkit::RetryOptions;
use retry_toolkit::effects::IdempotencyKey;
use tower::{Service, ServiceBuilder, ServiceExt};

/// What the flaky server does with each request, in order.
enum Fault {
    /// Answer with this status, `Retry-After` (if any) and body.
    Answer(u16, Option<&'static str>, &'static str),
    /// Drop the connection before answering.
    Drop,
    /// Send one server-sent event, then drop the connection.
    EventThenDrop,
}

type Script = Arc<Mutex<VecDeque<Fault>>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let script: Script = Arc::new(Mutex::new(VecDeque::from([
        // GET /report
        Fault::Answer(503, Some("1"), "busy"),
        Fault::Drop,
        Fault::Answer(200, None, "quarterly report"),
        // POST /orders without a key
        Fault::Answer(503, None, "busy"),
        // POST /orders with a key
        Fault::Answer(503, None, "busy"),
        Fault::Answer(201, None, "order 42 created"),
        // GET /quota
        Fault::Answer(429, Some("3600"), "come back in an hour"),
        // GET /events
        Fault::EventThenDrop,
    ])));
    let addr = serve(Arc::clone(&script)).await?;
    let url = |path: &str| format!("http://{addr}{path}");

    let retry = HttpRetry::builder()
        .options(
            RetryOptions::new()
                .with_max_attempts(3)
                .with_base_delay_ms(100),
        )
        .attempt_timeout(Duration::from_secs(5))
        .deadline(Duration::from_secs(20))
        .build()?;
    println!(
        "policy: {} attempts, Retry-After honoured up to {:?}",
        retry.policy().max_attempts(),
        retry.policy().max_retry_after()
    );
    let inner = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new().layer(retry.layer()).service(inner);
    let started = Instant::now();

    println!("\nGET /report: a 503 asking for 1 s, then a dropped connection, then the answer");
    let response = client.ready().await?.call(get(&url("/report"))).await?;
    let tries = attempts(&response);
    let body = response.into_body().collect().await?.to_bytes();
    println!(
        "client: {body:?} after {tries} attempts, {:.1?} in",
        started.elapsed()
    );

    println!("\nPOST /orders without an Idempotency-Key: a 503 is not retried");
    let response = client
        .ready()
        .await?
        .call(post(&url("/orders"), None))
        .await?;
    println!("client: {} ({})", response.status(), stopped(&response));

    println!("\nPOST /orders with the key \"order-42\": retried, the same key each time");
    let request = post(&url("/orders"), Some(IdempotencyKey::new("order-42")?));
    let response = client.ready().await?.call(request).await?;
    println!(
        "client: {} after {} attempts",
        response.status(),
        attempts(&response)
    );

    println!("\nGET /quota: a 429 asking for an hour is returned at once");
    let response = client.ready().await?.call(get(&url("/quota"))).await?;
    println!("client: {} ({})", response.status(), stopped(&response));

    println!("\nGET /events: a stream cut after its first event is an error, not a second request");
    let response = client.ready().await?.call(get(&url("/events"))).await?;
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    println!("client: event {:?}", String::from_utf8_lossy(data));
                }
            }
            Err(error) => {
                // The message says what happened; the cause is its source.
                let cause = std::error::Error::source(&error).map(ToString::to_string);
                println!("client: {error}: {}", cause.unwrap_or_default());
                break;
            }
        }
    }
    println!("\ndone in {:.1?}", started.elapsed());
    Ok(())
}

fn get(url: &str) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = url.parse().unwrap_or_default();
    request
}

fn post(url: &str, key: Option<IdempotencyKey>) -> Request<Full<Bytes>> {
    let mut request = get(url);
    *request.method_mut() = http::Method::POST;
    *request.body_mut() = Full::new(Bytes::from_static(b"{\"sku\":42}"));
    if let Some(key) = key {
        request.extensions_mut().insert(key);
    }
    request
}

fn attempts<B>(response: &Response<B>) -> u32 {
    RetryReport::of(response.extensions()).attempts
}

fn stopped<B>(response: &Response<B>) -> String {
    let report = RetryReport::of(response.extensions());
    match report.stopped {
        Some(reason) => format!("{reason}; {} attempt(s)", report.attempts),
        None => "answered".to_owned(),
    }
}

// ------------------------------------------------------------------ the flaky server

/// Starts the server on a random port of 127.0.0.1; it plays `script`, one fault per request.
async fn serve(script: Script) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let script = Arc::clone(&script);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let fault = script.lock().map(|mut s| s.pop_front()).unwrap_or(None);
                    answer(request, fault)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn answer(
    request: Request<Incoming>,
    fault: Option<Fault>,
) -> Result<Response<Scripted>, std::io::Error> {
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|k| k.to_str().ok())
        .map(|k| format!(" (Idempotency-Key: {k})"))
        .unwrap_or_default();
    let line = format!("server: {} {}{key}", request.method(), request.uri().path());
    match fault {
        Some(Fault::Answer(status, retry_after, body)) => {
            let hint = retry_after
                .map(|s| format!(", Retry-After: {s}"))
                .unwrap_or_default();
            println!("{line} -> {status}{hint}");
            let mut response = Response::new(Scripted::new(body, false));
            *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static(seconds));
            }
            Ok(response)
        }
        Some(Fault::Drop) => {
            println!("{line} -> connection dropped before answering");
            Err(std::io::Error::other("dropped"))
        }
        Some(Fault::EventThenDrop) => {
            println!("{line} -> one event, then connection dropped");
            let mut response = Response::new(Scripted::new("data: hello\n\n", true));
            response.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("text/event-stream"),
            );
            Ok(response)
        }
        None => {
            println!("{line} -> 500 (no fault left in the script)");
            let mut response = Response::new(Scripted::new("unexpected request", false));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            Ok(response)
        }
    }
}

/// A body of one chunk that ends, or breaks the connection once the chunk has been flushed.
struct Scripted {
    chunk: Option<Bytes>,
    breaks: bool,
    flushed: bool,
}

impl Scripted {
    fn new(chunk: &'static str, breaks: bool) -> Self {
        Scripted {
            chunk: Some(Bytes::from_static(chunk.as_bytes())),
            breaks,
            flushed: false,
        }
    }
}

impl Body for Scripted {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(chunk) = self.chunk.take() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if !self.breaks {
            return Poll::Ready(None);
        }
        if !self.flushed {
            // One turn for hyper to send the event before the connection breaks.
            self.flushed = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Some(Err(std::io::Error::other("stream cut"))))
    }
}
