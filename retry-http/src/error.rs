//! How a call ends without an answer ([`Error`]), why its retries stopped ([`StopReason`]),
//! and what a response says of its attempts ([`RetryReport`]).

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use http::{Method, StatusCode};
use retry_toolkit::{BudgetExhausted, CircuitOpen};

use crate::classify::sources;
use crate::target::Target;

/// A boxed error that can cross threads: what an attempt failed with.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Why the retries of a call stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// Every allowed attempt was made.
    Exhausted,
    /// The outcome is not worth another attempt (a 404, a DNS failure, what a predicate
    /// refused).
    NotRetryable,
    /// The request may already have taken effect, and its method does not allow a repeat:
    /// a POST, a PATCH (or another method that is neither safe nor idempotent) without an
    /// `Idempotency-Key`.
    NotIdempotent,
    /// The request's body cannot be sent a second time (a stream).
    NotReplayable,
    /// The server asked to wait longer than the policy allows.
    RetryAfterAboveCeiling {
        /// What the server asked for.
        retry_after: Duration,
        /// The longest hint the policy honours.
        ceiling: Duration,
    },
    /// The server asked to wait past the call's deadline.
    RetryAfterBeyondDeadline {
        /// What the server asked for.
        retry_after: Duration,
    },
    /// The call's deadline passed.
    DeadlineExceeded,
    /// The call was cancelled.
    Cancelled,
    /// The response's head had arrived when its body failed: a response is never replayed
    /// once it is established.
    AfterHead,
    /// A server-sent-event stream failed after delivering an event: never replayed.
    AfterEvent,
    /// The request's idempotency key is not a valid header value, or contradicts an
    /// `Idempotency-Key` header the request already carries. Nothing was sent.
    InvalidIdempotencyKey,
    /// The policy's circuit breaker refused: before the first attempt (nothing was sent;
    /// the server is being given a break), or before a retry (the circuit opened meanwhile,
    /// or would still be open when the retry was due).
    CircuitOpen(CircuitOpen),
    /// The policy's shared retry budget refused the retry: recent calls already spent the
    /// retries it allows. The call ended at once, without waiting.
    BudgetExhausted(BudgetExhausted),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Exhausted => f.write_str("attempts exhausted"),
            StopReason::NotRetryable => f.write_str("not retryable"),
            StopReason::NotIdempotent => f.write_str(
                "not retried: the method is not idempotent and the request has no \
                 Idempotency-Key, so it may already have taken effect",
            ),
            StopReason::NotReplayable => {
                f.write_str("not retried: the request body cannot be sent again")
            }
            StopReason::RetryAfterAboveCeiling {
                retry_after,
                ceiling,
            } => write!(
                f,
                "the server asked to retry after {retry_after:?}, more than the {ceiling:?} allowed"
            ),
            StopReason::RetryAfterBeyondDeadline { retry_after } => write!(
                f,
                "the server asked to retry after {retry_after:?}, past the deadline"
            ),
            StopReason::DeadlineExceeded => f.write_str("deadline exceeded"),
            StopReason::Cancelled => f.write_str("cancelled"),
            StopReason::AfterHead => f.write_str(
                "the response body failed after its head had arrived; a response is never replayed",
            ),
            StopReason::AfterEvent => f.write_str(
                "the event stream failed after delivering an event; a stream is never replayed",
            ),
            StopReason::InvalidIdempotencyKey => f.write_str(
                "the idempotency key is invalid: it is not a valid header value, or differs \
                 from the Idempotency-Key header the request already carries",
            ),
            StopReason::CircuitOpen(open) => open.fmt(f),
            StopReason::BudgetExhausted(exhausted) => exhausted.fmt(f),
        }
    }
}

/// A call that ended without a response: how many attempts ran, why they stopped, and the
/// last failure.
///
/// A call whose last attempt got a response (a 503 after every attempt, a 429 asking for too
/// long a wait) returns that response instead, with a [`RetryReport`] in its extensions.
///
/// The message says what happened (the method, the host, the attempts, the reason, the last
/// status); the last failure is the error's [`source`](StdError::source) (and
/// [`cause`](Error::cause)), so a report that walks the chain — anyhow's `{:#}`, a logger's —
/// prints each cause once, and a search of the chain for an `io::ErrorKind` finds it.
///
/// ```
/// # fn show(error: &retry_http::Error) {
/// // "GET http://api.example/report gave up after 3 attempts: attempts exhausted", then the
/// // last failure and its own causes.
/// let mut chain: Option<&(dyn std::error::Error + 'static)> = Some(error);
/// while let Some(e) = chain {
///     eprintln!("{e}");
///     chain = e.source();
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Error {
    // Boxed: a `Result<Response, Error>` stays the size of the response.
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// `None` only when the wrapped service failed before any request reached it.
    target: Option<Target>,
    attempts: u32,
    reason: StopReason,
    status: Option<StatusCode>,
    cause: Option<BoxError>,
}

impl Error {
    pub(crate) fn new(target: Option<Target>, attempts: u32, reason: StopReason) -> Self {
        Error {
            inner: Box::new(Inner {
                target,
                attempts,
                reason,
                status: None,
                cause: None,
            }),
        }
    }

    pub(crate) fn with_cause(mut self, cause: Option<BoxError>) -> Self {
        self.inner.cause = cause;
        self
    }

    pub(crate) fn with_status(mut self, status: Option<StatusCode>) -> Self {
        self.inner.status = status;
        self
    }

    /// Attempts started (0 when the request was refused before anything was sent).
    pub fn attempts(&self) -> u32 {
        self.inner.attempts
    }

    /// Why the retries stopped.
    pub fn reason(&self) -> StopReason {
        self.inner.reason
    }

    /// The status of the last response, if an attempt got one.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.status
    }

    /// The request's method (`None` when the wrapped service failed before it was given a
    /// request: its readiness check).
    pub fn method(&self) -> Option<&Method> {
        self.inner.target.as_ref().map(|t| &t.method)
    }

    /// The request's host and port (`-` for a relative URI; `None` as for
    /// [`method`](Error::method)).
    pub fn host(&self) -> Option<&str> {
        self.inner.target.as_ref().map(Target::host)
    }

    /// The last failure: the transport's error, the body's, or the attempt timeout (the
    /// same as [`source`](StdError::source), with `Send + Sync`).
    pub fn cause(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        self.inner.cause.as_deref().map(open)
    }

    /// The last failure, by value. (An error another reqwest middleware raised comes in a
    /// private wrapper here; read it through [`cause`](Error::cause) or the error's
    /// [`source`](StdError::source), which give that middleware's own error.)
    pub fn into_cause(self) -> Option<BoxError> {
        self.inner.cause
    }

    /// Whether the call was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.reason == StopReason::Cancelled
    }

    /// Whether the call's deadline passed.
    pub fn is_deadline(&self) -> bool {
        self.inner.reason == StopReason::DeadlineExceeded
    }

    /// Whether the policy's shared circuit breaker or retry budget stopped the call
    /// ([`StopReason::CircuitOpen`], [`StopReason::BudgetExhausted`]).
    pub fn is_refused(&self) -> bool {
        matches!(
            self.inner.reason,
            StopReason::CircuitOpen(_) | StopReason::BudgetExhausted(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let this = &*self.inner;
        match &this.target {
            Some(target) => write!(f, "{target}")?,
            None => f.write_str("the HTTP service")?,
        }
        match this.reason {
            StopReason::AfterHead | StopReason::AfterEvent => {
                write!(f, ": {} ({})", this.reason, Attempts(this.attempts))?
            }
            // Refused before anything was sent: no attempt to count.
            StopReason::CircuitOpen(_) | StopReason::InvalidIdempotencyKey
                if this.attempts == 0 =>
            {
                write!(f, " not sent: {}", this.reason)?
            }
            _ => write!(
                f,
                " gave up after {}: {}",
                Attempts(this.attempts),
                this.reason
            )?,
        }
        if let Some(status) = this.status {
            write!(f, "; last status {status}")?;
        }
        Ok(())
    }
}

/// The last failure is the source; the message does not repeat it.
impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self.cause() {
            Some(cause) => Some(cause),
            None => None,
        }
    }
}

/// The error a boxed cause stands for: itself, or, for an error another reqwest middleware
/// raised, that middleware's own error (so that `downcast_ref` finds its type).
pub(crate) fn open<'a>(
    error: &'a (dyn StdError + Send + Sync + 'static),
) -> &'a (dyn StdError + Send + Sync + 'static) {
    #[cfg(feature = "reqwest")]
    if let Some(kept) = error.downcast_ref::<crate::reqwest::Kept>() {
        return &*kept.0;
    }
    error
}

/// `error` and its causes, `: `-separated, each once (wrappers often repeat their cause).
pub(crate) fn write_chain(
    f: &mut fmt::Formatter<'_>,
    error: &(dyn StdError + 'static),
) -> fmt::Result {
    let mut previous = String::new();
    let mut first = true;
    for e in sources(error) {
        let text = e.to_string();
        if text.is_empty() || previous.contains(&text) {
            continue;
        }
        if !first {
            f.write_str(": ")?;
        }
        f.write_str(&text)?;
        first = false;
        previous = text;
    }
    Ok(())
}

/// What a response says of its call's attempts: how many the call took — 1 when the first
/// answered — and, when its retries stopped on this response (a 503 after every attempt, a
/// POST without a key that was not retried), why.
///
/// Read it with [`RetryReport::of`] from the extensions of a response the layer or the
/// middleware returned. A response that needed a retry, or whose retries stopped, carries it
/// in its extensions; a first answer does not (inserting it would cost every successful call
/// its allocations), and `of` reads its absence as "1 attempt, nothing stopped".
///
/// ```
/// use retry_http::{RetryReport, StopReason};
///
/// # fn check(response: http::Response<()>) {
/// let report = RetryReport::of(response.extensions());
/// println!("{} attempt(s); stopped: {:?}", report.attempts, report.stopped);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryReport {
    /// Attempts made, this one included.
    pub attempts: u32,
    /// Why the retries stopped on this response, when it is one worth retrying (`None` for
    /// a response that needed no retry).
    pub stopped: Option<StopReason>,
}

impl RetryReport {
    pub(crate) fn new(attempts: u32, stopped: Option<StopReason>) -> Self {
        RetryReport { attempts, stopped }
    }

    /// The report of the response whose extensions these are (`response.extensions()`, of
    /// an `http::Response` or a `reqwest::Response`): the one it carries, or, when it carries
    /// none, the report of a first answer — 1 attempt, nothing stopped.
    pub fn of(extensions: &http::Extensions) -> RetryReport {
        extensions
            .get::<RetryReport>()
            .copied()
            .unwrap_or(RetryReport::FIRST)
    }

    /// A call answered by its first attempt: what a response without a report means.
    const FIRST: RetryReport = RetryReport {
        attempts: 1,
        stopped: None,
    };

    /// Whether a response must carry this report: all but a first answer's, which
    /// [`RetryReport::of`] reads from its absence.
    pub(crate) fn is_first(&self) -> bool {
        *self == RetryReport::FIRST
    }
}

/// A count of attempts as a sentence says it: "1 attempt", "2 attempts".
struct Attempts(u32);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => f.write_str("1 attempt"),
            n => write!(f, "{n} attempts"),
        }
    }
}

/// The attempt ran out of its time before the response was established.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no response within the attempt timeout of {0:?}")]
pub struct AttemptTimedOut(pub Duration);
