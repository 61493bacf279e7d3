//! Which outcomes are worth another attempt: the default classification and the predicate
//! that replaces it.
//!
//! The classification only *diagnoses* an outcome ("the server was overloaded", "the
//! connection was reset"). Whether the request may really be sent again also depends on its
//! method, its idempotency key and its body, which `judge.rs` weighs afterwards; a predicate
//! cannot make a POST without a key retryable.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};

/// What one attempt produced, as a [`Classify`] predicate sees it.
#[derive(Clone, Copy, Debug)]
pub struct Outcome<'a> {
    method: &'a Method,
    kind: Kind<'a>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind<'a> {
    /// A response head arrived.
    Response(StatusCode, &'a HeaderMap),
    /// The exchange failed before the response head arrived.
    Transport(&'a (dyn StdError + 'static)),
    /// A server-sent-event stream failed after its head, before its first event.
    Stream(&'a (dyn StdError + 'static)),
    /// The attempt ran out of its time before the response was established.
    TimedOut(Duration),
}

impl<'a> Outcome<'a> {
    pub(crate) fn new(method: &'a Method, kind: Kind<'a>) -> Self {
        Outcome { method, kind }
    }

    /// The request's method.
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// The response's status, when a response head arrived.
    pub fn status(&self) -> Option<StatusCode> {
        match self.kind {
            Kind::Response(status, _) => Some(status),
            _ => None,
        }
    }

    /// The response's headers, when a response head arrived.
    pub fn headers(&self) -> Option<&'a HeaderMap> {
        match self.kind {
            Kind::Response(_, headers) => Some(headers),
            _ => None,
        }
    }

    /// The error, when the exchange failed before the response was established: before
    /// its head arrived, or (for a server-sent-event stream) before its first event.
    pub fn error(&self) -> Option<&'a (dyn StdError + 'static)> {
        match self.kind {
            Kind::Transport(error) | Kind::Stream(error) => Some(error),
            _ => None,
        }
    }

    /// The per-attempt timeout, when the attempt ran out of time before the response was
    /// established.
    pub fn timed_out(&self) -> Option<Duration> {
        match self.kind {
            Kind::TimedOut(timeout) => Some(timeout),
            _ => None,
        }
    }

    /// What the default classification says: retry 408, 409, 425, 429 and every 5xx; a
    /// connection refused, reset or aborted; a connection closed or timed out before the
    /// response head; an attempt timeout; and a server-sent-event stream that broke before
    /// its first event. Everything else is final: other statuses, DNS and TLS failures,
    /// invalid requests, errors it does not recognise.
    pub fn retryable_by_default(&self) -> bool {
        match self.kind {
            Kind::Response(status, _) => retryable_status(status),
            Kind::Transport(error) => retryable_transport(error),
            Kind::Stream(_) | Kind::TimedOut(_) => true,
        }
    }

    /// What counts against a circuit breaker by default: signs that the server is down or
    /// overloaded — a 408, a 429 or any 5xx, and every failure before the response was
    /// established (a connection refused or reset, a DNS or TLS failure, an attempt timeout,
    /// an event stream that broke before its first event). Any other response is an answer
    /// the server chose to give (a 404, a 409 conflict): the server is up, and it counts as
    /// a success.
    pub fn breaker_counts_by_default(&self) -> bool {
        match self.kind {
            Kind::Response(status, _) => breaker_status(status),
            Kind::Transport(_) | Kind::Stream(_) | Kind::TimedOut(_) => true,
        }
    }
}

/// Decides whether an outcome is worth another attempt (a diagnosis: the method, its key and
/// the body still decide whether the request may be sent again).
///
/// Any `Fn(&Outcome<'_>) -> bool + Send + Sync + 'static` is one; [`DefaultClassify`] is the
/// default.
///
/// ```
/// use http::StatusCode;
/// use retry_http::{HttpRetry, Outcome};
///
/// // Also retry a 404 (a read replica that lags behind), otherwise the default.
/// let retry = HttpRetry::builder()
///     .classify(|outcome: &Outcome<'_>| {
///         outcome.status() == Some(StatusCode::NOT_FOUND) || outcome.retryable_by_default()
///     })
///     .build()?;
/// # let _ = retry;
/// # Ok::<(), retry_http::BuildError>(())
/// ```
pub trait Classify: Send + Sync + 'static {
    /// `true` if `outcome` is worth another attempt.
    fn is_retryable(&self, outcome: &Outcome<'_>) -> bool;
}

impl<F> Classify for F
where
    F: Fn(&Outcome<'_>) -> bool + Send + Sync + 'static,
{
    fn is_retryable(&self, outcome: &Outcome<'_>) -> bool {
        self(outcome)
    }
}

/// The default classification: [`Outcome::retryable_by_default`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultClassify;

impl Classify for DefaultClassify {
    #[inline]
    fn is_retryable(&self, outcome: &Outcome<'_>) -> bool {
        outcome.retryable_by_default()
    }
}

/// 408 Request Timeout, 409 Conflict, 425 Too Early, 429 Too Many Requests and every 5xx.
pub(crate) fn retryable_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 425 | 429 | 500..=599)
}

/// 408 Request Timeout, 429 Too Many Requests and every 5xx: the statuses of a server in
/// trouble.
pub(crate) fn breaker_status(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 429 | 500..=599)
}

/// A transport error worth another attempt: found anywhere in its chain of sources.
fn retryable_transport(error: &(dyn StdError + 'static)) -> bool {
    sources(error).any(|e| {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::TimedOut
            );
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
            // The connection closed before the response head (a server closing an idle
            // pooled connection, a crash): nothing of the answer arrived.
            return hyper.is_incomplete_message() || hyper.is_timeout();
        }
        #[cfg(feature = "reqwest")]
        if let Some(reqwest) = e.downcast_ref::<reqwest::Error>() {
            return reqwest.is_timeout();
        }
        false
    })
}

/// Whether the request certainly never reached the server: the connection was never made.
/// Sending it again is then a first run, whatever its method.
pub(crate) fn never_sent(error: &(dyn StdError + 'static)) -> bool {
    sources(error).any(|e| {
        if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            return client.is_connect();
        }
        #[cfg(feature = "reqwest")]
        if let Some(reqwest) = e.downcast_ref::<reqwest::Error>() {
            return reqwest.is_connect();
        }
        e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::ConnectionRefused)
    })
}

/// `error` and its sources, outermost first; at most 64 (a cycle of sources would otherwise
/// never end).
pub(crate) fn sources<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |e| (*e).source()).take(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h1_statuses() {
        let retried: Vec<u16> = (100..=599)
            .filter(|&code| retryable_status(StatusCode::from_u16(code).unwrap()))
            .collect();
        let mut expected = vec![408, 409, 425, 429];
        expected.extend(500..=599);
        assert_eq!(retried, expected);
    }

    #[test]
    fn b3_statuses_that_count_against_the_breaker() {
        let counted: Vec<u16> = (100..=599)
            .filter(|&code| breaker_status(StatusCode::from_u16(code).unwrap()))
            .collect();
        let mut expected = vec![408, 429];
        expected.extend(500..=599);
        assert_eq!(counted, expected);
    }

    #[test]
    fn h1_transport_errors_found_in_the_chain() {
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error")
            }
        }
        impl StdError for Wrapper {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let reset = Wrapper(io::ErrorKind::ConnectionReset.into());
        let refused = Wrapper(io::ErrorKind::ConnectionRefused.into());
        let other = Wrapper(io::Error::other("certificate expired"));
        assert!(retryable_transport(&reset));
        assert!(retryable_transport(&refused));
        assert!(!retryable_transport(&other));
        assert!(never_sent(&refused));
        assert!(!never_sent(&reset));
    }
}
