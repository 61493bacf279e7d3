//! Method safety, in the vocabulary of effects: what sending a request again may do.
//!
//! GET, HEAD, OPTIONS and TRACE are reads; PUT and DELETE are idempotent writes by the
//! protocol's own definition (the target URI is what makes a repeat the same write); every
//! other method — POST, PATCH, CONNECT, extensions — is a side effect unless the request
//! carries an `Idempotency-Key`, which turns it into an idempotent write keyed by it. The
//! retry decision is then `retry_toolkit::effects::decide_retry`'s, the same rule that guards
//! agent tool calls: an outcome that may have taken effect is repeated only for a read or a
//! keyed idempotent write.

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Uri};
use retry_toolkit::effects::{
    CommitState, IdempotencyKey, RefuseReason, RetryDecision, RetryFacts, ToolEffect, decide_retry,
};

use crate::error::StopReason;

/// The `Idempotency-Key` request header (the IETF httpapi draft's name, as Stripe and most
/// payment APIs spell it).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// What a request's method and key say about sending it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Safety {
    /// A read: repeating it changes nothing.
    Read,
    /// Idempotent by its method (PUT, DELETE).
    IdempotentMethod,
    /// Keyed: the request carries this non-blank `Idempotency-Key`.
    Keyed(IdempotencyKey),
    /// A side effect: may be repeated only if it certainly was never sent.
    SideEffect,
}

impl Safety {
    /// The safety of a request with `method` and `headers`.
    pub(crate) fn of(method: &Method, headers: &HeaderMap) -> Self {
        match *method {
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE => Safety::Read,
            Method::PUT | Method::DELETE => Safety::IdempotentMethod,
            _ => match key_of(headers).map(IdempotencyKey::new) {
                Some(Ok(key)) => Safety::Keyed(key),
                _ => Safety::SideEffect,
            },
        }
    }

    /// Whether an outcome diagnosed `retryable` may be followed by another attempt, and if
    /// not, why. `never_sent`: the request certainly did not reach the server.
    pub(crate) fn decide(
        &self,
        retryable: bool,
        never_sent: bool,
        uri: &Uri,
    ) -> Result<(), StopReason> {
        let commit = if never_sent {
            CommitState::NotStarted
        } else {
            CommitState::Unknown
        };
        let (effect, key) = match self {
            Safety::Read => (ToolEffect::Read, None),
            // The protocol makes a repeat of a PUT or DELETE to the same URI the same write:
            // the URI is its key.
            Safety::IdempotentMethod => (
                ToolEffect::IdempotentWrite,
                IdempotencyKey::new(uri.to_string()).ok(),
            ),
            Safety::Keyed(key) => (ToolEffect::IdempotentWrite, Some(key.clone())),
            Safety::SideEffect => (ToolEffect::SideEffect, None),
        };
        // The loop counts attempts and watches the deadline; these facts ask only the effect
        // contract and the diagnosis.
        let mut facts = RetryFacts::new(effect, commit).with_retryable(retryable);
        if let Some(key) = key {
            facts = facts.with_idempotency_key(key);
        }
        match decide_retry(&facts) {
            RetryDecision::Retry => Ok(()),
            RetryDecision::Refuse(RefuseReason::NotRetryable) => Err(StopReason::NotRetryable),
            RetryDecision::Refuse(_) => Err(StopReason::NotIdempotent),
        }
    }
}

/// The request's `Idempotency-Key`, when it has one that is visible ASCII and not blank.
fn key_of(headers: &HeaderMap) -> Option<&str> {
    let key = headers.get(IDEMPOTENCY_KEY)?.to_str().ok()?;
    (!key.trim().is_empty()).then_some(key)
}

/// Puts the caller's key (a request extension) into the `Idempotency-Key` header. A header
/// that is already there must say the same.
pub(crate) fn apply_key(headers: &mut HeaderMap, key: &IdempotencyKey) -> Result<(), StopReason> {
    let value =
        HeaderValue::from_str(key.as_str()).map_err(|_| StopReason::InvalidIdempotencyKey)?;
    match headers.get(IDEMPOTENCY_KEY) {
        Some(present) if *present != value => Err(StopReason::InvalidIdempotencyKey),
        Some(_) => Ok(()),
        None => {
            headers.insert(IDEMPOTENCY_KEY, value);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(key: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static(key));
        headers
    }

    #[test]
    fn h3_method_safety() {
        let none = HeaderMap::new();
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert_eq!(Safety::of(&m, &none), Safety::Read, "{m}");
        }
        for m in [Method::PUT, Method::DELETE] {
            assert_eq!(Safety::of(&m, &none), Safety::IdempotentMethod, "{m}");
        }
        let custom = Method::from_bytes(b"PURGE").unwrap();
        for m in [Method::POST, Method::PATCH, Method::CONNECT, custom] {
            assert_eq!(Safety::of(&m, &none), Safety::SideEffect, "{m}");
            let key = IdempotencyKey::new("order-7").unwrap();
            assert_eq!(Safety::of(&m, &keyed("order-7")), Safety::Keyed(key), "{m}");
            assert_eq!(Safety::of(&m, &keyed("  ")), Safety::SideEffect, "{m}");
        }
    }

    #[test]
    fn h3_a_side_effect_is_repeated_only_when_never_sent() {
        let uri = Uri::from_static("http://example.com/orders");
        let none = HeaderMap::new();
        let post = Safety::of(&Method::POST, &none);
        assert_eq!(
            post.decide(true, false, &uri),
            Err(StopReason::NotIdempotent)
        );
        assert_eq!(post.decide(true, true, &uri), Ok(()));
        assert_eq!(
            post.decide(false, true, &uri),
            Err(StopReason::NotRetryable)
        );
        let headers = keyed("order-7");
        let keyed = Safety::of(&Method::POST, &headers);
        assert_eq!(keyed.decide(true, false, &uri), Ok(()));
        let put = Safety::of(&Method::PUT, &none);
        assert_eq!(put.decide(true, false, &uri), Ok(()));
    }

    #[test]
    fn a4_the_key_goes_into_the_header_once() {
        let mut headers = HeaderMap::new();
        let key = IdempotencyKey::new("run-1:call-2").unwrap();
        assert_eq!(apply_key(&mut headers, &key), Ok(()));
        assert_eq!(apply_key(&mut headers, &key), Ok(()));
        assert_eq!(headers.get(IDEMPOTENCY_KEY).unwrap(), "run-1:call-2");
        let other = IdempotencyKey::new("run-1:call-3").unwrap();
        assert_eq!(
            apply_key(&mut headers, &other),
            Err(StopReason::InvalidIdempotencyKey)
        );
        let newline = IdempotencyKey::new("a\nb").unwrap();
        assert_eq!(
            apply_key(&mut HeaderMap::new(), &newline),
            Err(StopReason::InvalidIdempotencyKey)
        );
    }
}
