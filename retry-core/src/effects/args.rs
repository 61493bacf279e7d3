//! [`CallArgs`]: a call's arguments and their [`ArgsHash`], recorded once and shared.
//!
//! The arguments never change after a call is recorded, yet every write moves its record and
//! the ledger in memory keeps a copy of it: held in one shared allocation, the arguments are
//! not copied per write (nor per ledger copy), a compare-and-swap finds them unchanged by
//! address before it compares them, and a [`CallRecord`](super::CallRecord) is small enough
//! to move without a call to `memcpy`.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde_json::Value;

use super::hash::ArgsHash;
use super::json::{self, MAX_JSON_DEPTH};

/// A call's JSON arguments with their [`ArgsHash`]; cheap to clone (the clones share them).
/// Dereferences to the arguments.
///
/// Made with [`new`](Self::new), they are hashed and their depth is measured once, there; a
/// record holding them is checked without walking them again, by every ledger, since nothing
/// can change them after.
///
/// ```
/// use retry_toolkit::effects::{ArgsHash, CallArgs};
/// use serde_json::json;
///
/// let args = CallArgs::new(json!({"to": "ana@example.com"}));
/// assert_eq!(args["to"], "ana@example.com");
/// assert_eq!(args.hash(), ArgsHash::of(&json!({"to": "ana@example.com"})));
/// assert_eq!(args.clone(), args);
/// ```
#[derive(Clone)]
pub struct CallArgs(Arc<Shared>);

struct Shared {
    value: Value,
    hash: ArgsHash,
    /// Hashed here from `value`, and `value` nested at most [`MAX_JSON_DEPTH`] levels deep:
    /// what [`CallRecord::validate`](super::CallRecord::validate) would check of the
    /// arguments, known true for good (`value` never changes).
    checked: bool,
}

impl CallArgs {
    /// `value`, hashed now and its depth measured: the one way to arguments that a ledger
    /// need not hash or measure again (unless they are nested more than [`MAX_JSON_DEPTH`]
    /// levels deep, which [`CallRecord::validate`](super::CallRecord::validate) then refuses).
    /// Hashing and measuring are iterative, so arguments of any depth are safe here.
    pub fn new(value: Value) -> Self {
        let checked = !json::exceeds_depth(&value, MAX_JSON_DEPTH);
        let hash = ArgsHash::of(&value);
        CallArgs(Arc::new(Shared {
            value,
            hash,
            checked,
        }))
    }

    /// Arguments as a ledger stored them, with the hash stored beside them, **not** checked
    /// here: [`CallRecord::validate`](super::CallRecord::validate) checks it when the record
    /// is read back.
    pub fn from_stored(value: Value, hash: ArgsHash) -> Self {
        CallArgs(Arc::new(Shared {
            value,
            hash,
            checked: false,
        }))
    }

    /// Whether these arguments were hashed here ([`new`](Self::new)) and are within
    /// [`MAX_JSON_DEPTH`]: then their hash and depth need no check.
    pub(crate) fn checked(&self) -> bool {
        self.0.checked
    }

    /// The arguments.
    pub fn value(&self) -> &Value {
        &self.0.value
    }

    /// The hash recorded with them.
    pub fn hash(&self) -> ArgsHash {
        self.0.hash
    }

    /// Drops the arguments without recursing into them, if this is their last holder (they
    /// may be nested too deep to drop safely).
    pub(crate) fn discard(self) {
        if let Some(shared) = Arc::into_inner(self.0) {
            json::discard(shared.value);
        }
    }
}

impl Deref for CallArgs {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0.value
    }
}

impl From<Value> for CallArgs {
    /// [`CallArgs::new`].
    fn from(value: Value) -> Self {
        CallArgs::new(value)
    }
}

/// Equal if they are the same shared arguments, or have the same hash and the same value.
impl PartialEq for CallArgs {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash && self.0.value == other.0.value)
    }
}

impl fmt::Debug for CallArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallArgs")
            .field("value", &self.0.value)
            .field("hash", &self.0.hash)
            .finish()
    }
}
