//! [`ArgsHash`]: the hash that pins an idempotency key to its arguments.
//!
//! A key that comes back with *different* arguments is a bug (or a collision of ids) and is
//! refused: the ledger stores an [`ArgsHash`] of the arguments the key was first used with,
//! the rule of Stripe's and AWS Powertools' idempotency.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::canonical;

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
/// use retry_toolkit::effects::ArgsHash;
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
        canonical::write(args, &mut |bytes| hasher.update(bytes));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hashing_survives_deep_nesting() {
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
