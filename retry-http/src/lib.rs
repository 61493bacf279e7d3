//! HTTP retry that knows status codes, `Retry-After`, method safety and streams: a tower
//! layer for any `http::Request` service (hyper-util's client, a tower stack) and a
//! reqwest-middleware middleware, sharing one policy built from retry-toolkit's options.
//!
//! Retrying an HTTP call is easy to get wrong in ways that only show in production: a POST
//! that reached the server but lost its answer is sent again and charges a card twice; a
//! server's `Retry-After: 86400` parks the caller for a day; a stream that already delivered
//! half an answer is replayed from the start. This crate retries what is safe to retry and
//! says why it stopped when it does not.
//!
//! - **What is retried:** 408, 409, 425, 429 and 5xx responses, and transport failures before
//!   the response head (connection refused, reset or closed, a timeout) — a predicate
//!   ([`Classify`]) changes the diagnosis.
//! - **`Retry-After`** (seconds or an HTTP date) replaces the computed backoff; a hint above
//!   the policy's ceiling (60 s by default) or past the deadline ends the call at once with
//!   that response. A malformed value is ignored.
//! - **Method safety:** GET, HEAD, OPTIONS and TRACE are reads and PUT and DELETE idempotent,
//!   so they are retried; POST, PATCH and other methods only with an `Idempotency-Key`
//!   header, which stays the same on every attempt (put an
//!   [`IdempotencyKey`](retry_toolkit::effects::IdempotencyKey) in the request's extensions and
//!   the layer writes it; derive it from your operation's id, never at random). A request
//!   that certainly never reached the server (the connection was refused) is retried
//!   whatever its method: that is not a repeat.
//! - **Bodies and streams:** only a replayable body ([`ReplayBody`]) is sent again. A
//!   response is final once its head arrives — an event stream once its first event
//!   arrives — and a failure after that is returned, never replayed.
//! - **Time:** exponential backoff with full jitter (retry-toolkit's loop and options, validated
//!   as everywhere), a per-attempt timeout, an overall deadline, an idle timeout for bodies and
//!   cancellation, all on an injectable clock, so tests run on the testkit's mock clock
//!   without sleeping. The attempt timeout and the deadline cover the response body the
//!   caller reads, not only its head; a body that runs out fails with [`BodyTimedOut`] and is
//!   never replayed.
//!
//! **No time limit is the default.** Without an attempt timeout and a deadline, a server that
//! accepts and never answers, or sends a head and stalls its body, holds the call forever.
//! [`HttpRetryBuilder::bounded`] sets both in one line.
//! - **Shared protection:** a [`RetryBudget`](retry_toolkit::RetryBudget) and a
//!   [`CircuitBreaker`](retry_toolkit::CircuitBreaker) shared by every call to a dependency
//!   ([`HttpRetryBuilder::budget`], [`HttpRetryBuilder::breaker`]): when a host is down,
//!   retries add a fraction to its load instead of multiplying it, and an open circuit
//!   refuses calls before anything is sent. By default 408, 429, 5xx and failures before the
//!   response count against the breaker; a 404 does not
//!   ([`HttpRetryBuilder::breaker_counts`] changes that).
//!
//! # The tower layer
//!
//! ```no_run
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use retry_toolkit::RetryOptions;
//! use retry_toolkit::effects::IdempotencyKey;
//! use retry_http::HttpRetry;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let retry = HttpRetry::builder()
//!     .options(RetryOptions::new().with_max_attempts(4))
//!     .bounded(Duration::from_secs(10), Duration::from_secs(30)) // without it, no limit
//!     .build()?;
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let mut client = ServiceBuilder::new().layer(retry.layer()).service(client);
//!
//! // A POST is retried only with a stable key: the same on every attempt.
//! let mut request = http::Request::post("http://127.0.0.1:8080/orders")
//!     .body(Full::new(Bytes::from_static(b"{\"sku\":42}")))?;
//! request.extensions_mut().insert(IdempotencyKey::new("order-42")?);
//! let response = client.ready().await?.call(request).await?;
//! let body = response.into_body().collect().await?.to_bytes();
//! # let _ = body;
//! # Ok(()) }
//! ```
//!
//! A call ends with the response when a response came (the last 503 when every attempt got
//! one, a 429 whose `Retry-After` is too long): [`RetryReport::of`] its extensions says how
//! many attempts it took and why the retries stopped. It ends with an [`Error`] when no
//! response came: its message says how many attempts ran and the [`StopReason`]; the last
//! failure is its `source()`, so anyhow's `{:#}` or a walk of the chain (for an
//! `io::ErrorKind`, for your own error type raised by another reqwest middleware) finds it.
//!
//! # Logs
//!
//! Events under the target `retry_http`, with the method, the host and the status (or the
//! error):
//!
//! | event | level | fields |
//! |-------|-------|--------|
//! | `http attempt failed; retrying` | WARN | `method`, `host`, `status` or `error`, `attempt`, `delay` |
//! | `http retry gave up` | INFO | `method`, `host`, `status` (if a response came), `attempts`, `reason` |
//! | `http request refused` | INFO | `method`, `host`, `reason` (an invalid idempotency key, an open circuit) |
//!
//! The loop underneath reports too, under `retry_toolkit` (its `error` field names the method,
//! the host and the status); filter it out with `retry_toolkit=off` to keep only these.
//!
//! # Features
//!
//! | feature   | default | what it adds |
//! |-----------|---------|--------------|
//! | `reqwest` | no      | `RetryMiddleware` for reqwest-middleware, on reqwest without a TLS backend of its own |
//! | `metrics` | no      | counts through the `metrics` facade: `retry_http_retries_total`, and `retry_http_gave_up_total` by `reason` (the stop reason; static names and labels) |

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod attempt;
mod body;
mod bound;
mod classify;
mod config;
mod error;
mod judge;
mod layer;
mod method;
mod metrics;
mod protect;
#[cfg(feature = "reqwest")]
mod reqwest;
mod retry_after;
mod sse;
mod target;

pub use body::{ReplayBody, ResponseBody};
pub use bound::{BodyTimedOut, Bound};
pub use classify::{Classify, DefaultClassify, Outcome};
pub use config::{BuildError, HttpRetry, HttpRetryBuilder};
pub use error::{AttemptTimedOut, BoxError, Error, RetryReport, StopReason};
pub use layer::{ResponseFuture, RetryLayer, RetryService};
pub use method::IDEMPOTENCY_KEY;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use reqwest::RetryMiddleware;
pub use retry_after::parse_retry_after;
