//! Call identity and idempotency keys, and the hash that pins a key to its arguments.
//!
//! A retry can only be deduplicated downstream if it carries the *same* key as the first
//! try, so the key is derived from the logical identity of the call — `"{run_id}:{call_id}"` —
//! and never drawn at random. A key that comes back with *different* arguments is a bug (or
//! a collision of ids) and is refused: the ledger stores an [`ArgsHash`] of the arguments the
//! key was first used with, the rule of Stripe's and AWS Powertools' idempotency.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

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
/// The pending-call ledger is keyed by it; the [`IdempotencyKey`] is derived from it.
///
/// ```
/// use retry_core::effects::CallKey;
///
/// let key = CallKey::new("run-7", "call-2")?;
/// assert_eq!(key.idempotency_key().as_str(), "run-7:call-2");
/// assert!(CallKey::new("run:7", "call-2").is_err()); // would be ambiguous
/// # Ok::<(), retry_core::effects::KeyError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "RawCallKey")]
pub struct CallKey {
    run_id: String,
    call_id: String,
}

#[derive(Deserialize)]
struct RawCallKey {
    run_id: String,
    call_id: String,
}

impl TryFrom<RawCallKey> for CallKey {
    type Error = KeyError;

    fn try_from(raw: RawCallKey) -> Result<Self, KeyError> {
        CallKey::new(raw.run_id, raw.call_id)
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
        Ok(CallKey { run_id, call_id })
    }

    /// The run.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The call within the run.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The stable key `"{run_id}:{call_id}"`: the same for every attempt of this call.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!("{}:{}", self.run_id, self.call_id))
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
        write!(f, "{}:{}", self.run_id, self.call_id)
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
/// use retry_core::effects::IdempotencyKey;
///
/// assert_eq!(IdempotencyKey::new("invoice-42")?.as_str(), "invoice-42");
/// assert!(IdempotencyKey::new("  ").is_err());
/// # Ok::<(), retry_core::effects::KeyError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
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

/// SHA-256 of a call's arguments in canonical JSON, kept beside the idempotency key so that
/// the key reused with different arguments is refused.
///
/// **Canonical JSON** here: no whitespace; object members sorted by key (byte order of the
/// UTF-8 key); arrays in order; strings escaped as `serde_json` writes them; numbers as
/// `serde_json` writes them (so `1` and `1.0` differ, as they do in the JSON text). The same
/// arguments therefore hash the same whatever order a model emitted their fields in, in
/// every process, on every platform.
///
/// **Why SHA-256**: its output is fixed by a standard (FIPS 180-4), so it never changes with
/// a Rust release (the std `DefaultHasher` may) and a SQL ledger can compute or check it
/// itself; and it resists collisions even when the arguments are chosen by someone trying
/// (FNV or xxHash do not), so different arguments cannot pass for the same ones. 32 bytes
/// per call is a small price for a ledger row.
///
/// ```
/// use retry_core::effects::ArgsHash;
/// use serde_json::json;
///
/// let a = ArgsHash::of(&json!({"to": "ana@example.com", "amount": 10}));
/// let b = ArgsHash::of(&json!({"amount": 10, "to": "ana@example.com"}));
/// assert_eq!(a, b); // member order does not matter
/// assert_ne!(a, ArgsHash::of(&json!({"amount": 11, "to": "ana@example.com"})));
/// assert!(a.to_string().starts_with("sha256:"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ArgsHash([u8; 32]);

const HASH_PREFIX: &str = "sha256:";

impl ArgsHash {
    /// The hash of `args` in canonical JSON.
    pub fn of(args: &Value) -> Self {
        let mut hasher = Sha256::new();
        canonical_json(args, &mut |bytes| hasher.update(bytes));
        ArgsHash(hasher.finalize().into())
    }

    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HASH_PREFIX)?;
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Text that is not `sha256:` followed by 64 lowercase hex digits — the one form an
/// [`ArgsHash`] is written in, so that two spellings of one hash never compare unequal as text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an argument hash: expected `sha256:` followed by 64 lowercase hex digits")]
pub struct BadArgsHash(String);

impl TryFrom<String> for ArgsHash {
    type Error = BadArgsHash;

    fn try_from(text: String) -> Result<Self, BadArgsHash> {
        // Digit by digit: `u8::from_str_radix` would also take `+` and uppercase letters.
        fn nibble(digit: u8) -> Option<u8> {
            match digit {
                b'0'..=b'9' => Some(digit - b'0'),
                b'a'..=b'f' => Some(digit - b'a' + 10),
                _ => None,
            }
        }
        let parsed = text
            .strip_prefix(HASH_PREFIX)
            .filter(|hex| hex.len() == 64)
            .and_then(|hex| {
                let mut bytes = [0u8; 32];
                for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
                    let [high, low] = pair else { return None };
                    *byte = (nibble(*high)? << 4) | nibble(*low)?;
                }
                Some(bytes)
            });
        match parsed {
            Some(bytes) => Ok(ArgsHash(bytes)),
            None => Err(BadArgsHash(text)),
        }
    }
}

impl From<ArgsHash> for String {
    fn from(hash: ArgsHash) -> String {
        hash.to_string()
    }
}

/// Writes `value` as canonical JSON into `out`, without recursion (arguments built in code
/// can nest deeper than the stack would like).
fn canonical_json(value: &Value, out: &mut impl FnMut(&[u8])) {
    enum Step<'a> {
        Value(&'a Value),
        Text(&'static str),
        Key(&'a str),
    }
    /// Hands what `serde_json` writes straight on: a long string is escaped without a copy.
    struct Sink<'a>(&'a mut dyn FnMut(&[u8]));
    impl std::io::Write for Sink<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            (self.0)(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let string = |s: &str, out: &mut dyn FnMut(&[u8])| {
        // Writing a `str` into a sink that never fails cannot fail; if it somehow did, the
        // escaped debug form still makes the hash depend on every byte of `s`.
        if serde_json::to_writer(Sink(out), s).is_err() {
            out(format!("{s:?}").as_bytes());
        }
    };
    let mut stack = vec![Step::Value(value)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Text(text) => out(text.as_bytes()),
            Step::Key(key) => {
                string(key, out);
                out(b":");
            }
            Step::Value(Value::Null) => out(b"null"),
            Step::Value(Value::Bool(b)) => out(if *b { b"true" } else { b"false" }),
            Step::Value(Value::Number(n)) => out(n.to_string().as_bytes()),
            Step::Value(Value::String(s)) => string(s, out),
            Step::Value(Value::Array(items)) => {
                out(b"[");
                stack.push(Step::Text("]"));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Step::Value(item));
                    if i > 0 {
                        stack.push(Step::Text(","));
                    }
                }
            }
            Step::Value(Value::Object(members)) => {
                out(b"{");
                stack.push(Step::Text("}"));
                let mut sorted: Vec<_> = members.iter().collect();
                sorted.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                for (i, (key, item)) in sorted.into_iter().enumerate().rev() {
                    stack.push(Step::Value(item));
                    stack.push(Step::Key(key));
                    if i > 0 {
                        stack.push(Step::Text(","));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(value: &Value) -> String {
        let mut bytes = Vec::new();
        canonical_json(value, &mut |b| bytes.extend_from_slice(b));
        String::from_utf8(bytes).unwrap_or_default()
    }

    #[test]
    fn canonical_json_sorts_members_and_drops_whitespace() {
        let value = json!({"b": [1, {"z": null, "a": true}], "a": "x\"y", "é": 1.5});
        assert_eq!(
            canonical(&value),
            r#"{"a":"x\"y","b":[1,{"a":true,"z":null}],"é":1.5}"#
        );
        assert_eq!(canonical(&json!([])), "[]");
        assert_eq!(canonical(&json!({})), "{}");
    }

    #[test]
    fn canonical_json_survives_deep_nesting() {
        let mut value = json!(0);
        for _ in 0..100_000 {
            value = Value::Array(vec![value]);
        }
        let _ = ArgsHash::of(&value);
        // Dropping a deeply nested `Value` recurses inside serde_json; unwind it by hand.
        let mut current = value;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn hash_is_the_documented_sha256_of_the_canonical_text() {
        // sha256("{}"), computable with any sha256 tool: `printf '{}' | sha256sum`.
        assert_eq!(
            ArgsHash::of(&json!({})).to_string(),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn hash_round_trips_through_its_text() {
        let hash = ArgsHash::of(&json!({"a": 1}));
        assert_eq!(ArgsHash::try_from(hash.to_string()), Ok(hash));
        assert!(ArgsHash::try_from("sha256:zz".to_owned()).is_err());
        assert!(ArgsHash::try_from(format!("md5:{}", "0".repeat(64))).is_err());
    }
}
