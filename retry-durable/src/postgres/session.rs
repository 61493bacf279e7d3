//! Whether a failed statement took its connection with it, and giving a connection back to the
//! pool only when it did not: the one rule for the jobs and the ledger on PostgreSQL.

use std::fmt;

use deadpool_postgres::Object;
use retry_toolkit::effects::{BackendKind, LedgerError};

use super::failed;
use crate::store::StoreError;

/// Whether `error` ended the session: the connection is closed or broke under the statement
/// (an I/O error), or the server ended it — a connection exception (class 08), an operator or
/// a timeout stopping it (57P…), or any error it reports as fatal (by the severity the
/// protocol sends unlocalised; the localised text only from servers too old to send it).
pub(crate) fn lost(error: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::Severity;
    let io = std::error::Error::source(error).is_some_and(|s| s.is::<std::io::Error>());
    let fatal = error.as_db_error().is_some_and(|e| {
        let code = e.code().code();
        let severe = match e.parsed_severity() {
            Some(severity) => matches!(severity, Severity::Fatal | Severity::Panic),
            None => matches!(e.severity(), "FATAL" | "PANIC"),
        };
        code.starts_with("08") || code.starts_with("57P") || severe
    });
    error.is_closed() || io || fatal
}

/// A statement that failed, as the store reports it, and whether its session went with it.
#[derive(Debug)]
pub(crate) struct Failed {
    error: StoreError,
    session_lost: bool,
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Failed {}

impl From<tokio_postgres::Error> for Failed {
    fn from(error: tokio_postgres::Error) -> Self {
        Failed {
            session_lost: lost(&error),
            error: failed(error),
        }
    }
}

/// A failure that was not the database's (a value out of range, a corrupt row): the session
/// is fine.
impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Failed {
            error,
            session_lost: false,
        }
    }
}

impl From<Failed> for StoreError {
    fn from(failed: Failed) -> Self {
        failed.error
    }
}

/// An error that can say its session is gone.
pub(crate) trait Outcome {
    /// Whether the connection that reported this is gone.
    fn session_lost(&self) -> bool;
}

impl Outcome for Failed {
    fn session_lost(&self) -> bool {
        self.session_lost
    }
}

/// The ledger's failures keep the store's kind: a statement whose session ended is of
/// [`BackendKind::Connection`] (see [`kind_of`](super::kind_of)), and nothing else is.
impl Outcome for LedgerError {
    fn session_lost(&self) -> bool {
        self.kind() == Some(BackendKind::Connection)
    }
}

/// Gives `client` back to the pool, unless `result` says its connection is gone. The pool
/// tells a dead connection by `is_closed` alone, which a connection that died under our
/// statement may not say yet: handed out again, it would fail the next statement too (the
/// recovery right after a lost connection, say).
pub(crate) fn release<T, E: Outcome>(client: Object, result: &Result<T, E>) {
    if result.as_ref().err().is_some_and(Outcome::session_lost) {
        drop(Object::take(client));
    }
}
