//! What kind of storage failure an error is, for callers that decide by it: wait and try
//! again (busy), reconnect or fail over (connection), or give up (other).
//!
//! Shared by every store's error ([`LedgerError`](super::LedgerError) here, the durable
//! stores' in retry-durable), so that one `match` serves them all. Compiled without the
//! `effects` feature, like the other store primitives.

use std::fmt;

/// Why a storage backend failed, as far as a caller can act on it. The error it came from is
/// the error's [`source`](std::error::Error::source), for the details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// Another writer holds what this one needs: a lock held past the busy timeout, a
    /// deadlock, a serialization failure, a contended key. Nothing was written; the same
    /// call may well succeed a moment later.
    Busy,
    /// The store could not be reached, or the connection broke under the call: a server that
    /// is down or ended the session, a pool with no connection to give, a file that cannot be
    /// opened. Whether a write that was under way happened is not known.
    Connection,
    /// Anything else the backend reported: a statement it refused, a full disk, a value it
    /// could not encode.
    Other,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Busy => "busy",
            BackendKind::Connection => "connection",
            BackendKind::Other => "other",
        })
    }
}
