//! Call identity and idempotency keys.
//!
//! A retry can only be deduplicated downstream if it carries the *same* key as the first
//! try, so the key is derived from the logical identity of the call — `"{run_id}:{call_id}"` —
//! and never drawn at random. Compiled without the `effects` feature: the retry-safety rules
//! need the key, and a durable job store names its work with one.

use std::fmt;
use std::sync::Arc;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

/// Ids that cannot name a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The run id is empty.
    #[error("the run id is empty: a call needs the id of the run it belongs to")]
    EmptyRunId,
    /// The call id is empty.
    #[error("the call id is empty: a call needs an id that stays the same across retries")]
    EmptyCallId,
    /// The run id contains `:`, which would make `"{run_id}:{call_id}"` ambiguous.
    #[error(
        "the run id `{0}` contains `:`; the idempotency key `{{run_id}}:{{call_id}}` would be ambiguous"
    )]
    RunIdContainsColon(String),
    /// A caller-chosen idempotency key is empty or blank.
    #[error("an idempotency key must not be empty or blank: an empty key deduplicates nothing")]
    EmptyIdempotencyKey,
}

/// The identity of one tool call: the run it belongs to and the call's id within the run
/// (the id the model gave the call, for an agent).
///
/// The pending-call ledger is keyed by it; the [`IdempotencyKey`] is derived from it. Cheap
/// to clone: the two ids live in one shared allocation, so the ledger's copy, the tool's
/// context and every result name the call without copying its text.
///
/// ```
/// use retry_toolkit::effects::CallKey;
///
/// let key = CallKey::new("run-7", "call-2")?;
/// assert_eq!(key.idempotency_key().as_str(), "run-7:call-2");
/// assert!(CallKey::new("run:7", "call-2").is_err()); // would be ambiguous
/// # Ok::<(), retry_toolkit::effects::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "RawCallKey"))]
pub struct CallKey(Arc<Ids>);

/// The ids of a [`CallKey`], compared and hashed run first, as the two fields they were.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Ids {
    run_id: String,
    call_id: String,
}

#[cfg(feature = "serde")]
#[derive(Deserialize)]
struct RawCallKey {
    run_id: String,
    call_id: String,
}

#[cfg(feature = "serde")]
impl TryFrom<RawCallKey> for CallKey {
    type Error = KeyError;

    fn try_from(raw: RawCallKey) -> Result<Self, KeyError> {
        CallKey::new(raw.run_id, raw.call_id)
    }
}

/// Written as `{"run_id": …, "call_id": …}`, the form it is read back from, without copying
/// the ids.
#[cfg(feature = "serde")]
impl Serialize for CallKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename = "CallKey")]
        struct Fields<'a> {
            run_id: &'a str,
            call_id: &'a str,
        }
        Fields {
            run_id: self.run_id(),
            call_id: self.call_id(),
        }
        .serialize(serializer)
    }
}

impl fmt::Debug for CallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallKey")
            .field("run_id", &self.0.run_id)
            .field("call_id", &self.0.call_id)
            .finish()
    }
}

impl CallKey {
    /// Names call `call_id` of run `run_id`.
    ///
    /// # Errors
    ///
    /// [`KeyError`] if either id is empty, or the run id contains `:`.
    pub fn new(run_id: impl Into<String>, call_id: impl Into<String>) -> Result<Self, KeyError> {
        let (run_id, call_id) = (run_id.into(), call_id.into());
        check_run_id(&run_id)?;
        if call_id.is_empty() {
            return Err(KeyError::EmptyCallId);
        }
        Ok(CallKey(Arc::new(Ids { run_id, call_id })))
    }

    /// The run.
    pub fn run_id(&self) -> &str {
        &self.0.run_id
    }

    /// The call within the run.
    pub fn call_id(&self) -> &str {
        &self.0.call_id
    }

    /// The stable key `"{run_id}:{call_id}"`: the same for every attempt of this call.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(self.to_string())
    }
}

/// Checks a run id on its own (for listing a run's calls).
pub(crate) fn check_run_id(run_id: &str) -> Result<(), KeyError> {
    if run_id.is_empty() {
        Err(KeyError::EmptyRunId)
    } else if run_id.contains(':') {
        Err(KeyError::RunIdContainsColon(run_id.to_owned()))
    } else {
        Ok(())
    }
}

impl fmt::Display for CallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0.run_id, self.0.call_id)
    }
}

/// A key that a downstream system uses to recognise a repeat of the same write.
///
/// Derived by the runtime as `"{run_id}:{call_id}"` ([`CallKey::idempotency_key`]) and handed
/// to every tool in its [`ToolContext`](super::ToolContext); an `idempotent-write` tool must
/// pass it on (as Stripe's `Idempotency-Key` header, a unique column, a conditional put).
/// Never empty.
///
/// ```
/// use retry_toolkit::effects::IdempotencyKey;
///
/// assert_eq!(IdempotencyKey::new("invoice-42")?.as_str(), "invoice-42");
/// assert!(IdempotencyKey::new("  ").is_err());
/// # Ok::<(), retry_toolkit::effects::KeyError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "String", into = "String"))]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// A caller-chosen key, for work that is not a tool call of a run (a background job with
    /// its own stable identity).
    ///
    /// # Errors
    ///
    /// [`KeyError::EmptyIdempotencyKey`] if `key` is empty or only whitespace.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        if key.trim().is_empty() {
            return Err(KeyError::EmptyIdempotencyKey);
        }
        Ok(IdempotencyKey(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;

    fn try_from(key: String) -> Result<Self, KeyError> {
        IdempotencyKey::new(key)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> String {
        key.0
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
