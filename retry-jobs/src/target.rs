//! Which store a command works on: a SQLite file or a PostgreSQL database, named by one
//! string (the `--database` argument or `DATABASE_URL`).
//!
//! [`Store`] returns `impl Future`, so it cannot be a trait object; [`Opened`] is the one
//! place that chooses between the two stores, and it is itself a [`Store`], so every view and
//! action is written once, over any store.

use std::fmt;
use std::path::{Path, PathBuf};

use retry_durable::{
    AttemptRecord, Batch, Claim, DeadLetter, DeadLetterId, Finish, Finished, FinishedAndClaimed,
    Inserted, Listing, NewWork, PostgresStore, QuarantinedWork, Released, SqliteStore, Store,
    StoreError, WorkCounts, WorkFilter, WorkId, WorkRecord, WorkState,
};
use retry_toolkit::store::{Revision, Timestamp};

/// Where the store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A SQLite file (it must exist: a typo does not create an empty database).
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (`postgres://…` or `postgresql://…`).
    Postgres(String),
}

/// Why a target could not be opened.
#[derive(Debug)]
pub enum TargetError {
    /// Nothing was named (no `--database`, no `DATABASE_URL`), or an empty string.
    Missing,
    /// The SQLite file does not exist.
    NoSuchFile(PathBuf),
    /// The store could not be opened or reached.
    Store(StoreError),
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::Missing => f.write_str(
                "no store given: pass `--database <FILE or postgres://URL>` or set DATABASE_URL",
            ),
            TargetError::NoSuchFile(path) => write!(
                f,
                "no such file `{}`: give the path of an existing jobs database (nothing is created)",
                path.display()
            ),
            TargetError::Store(e) => write!(f, "cannot open the store: {e}"),
        }
    }
}

impl std::error::Error for TargetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TargetError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl Target {
    /// Reads a target: a `postgres://` or `postgresql://` URL, or else a path to a SQLite
    /// file (`sqlite://` in front is allowed and dropped).
    ///
    /// # Errors
    /// [`TargetError::Missing`] for an empty string.
    pub fn parse(text: &str) -> Result<Target, TargetError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(TargetError::Missing);
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Target::Postgres(text.to_owned()));
        }
        let path = text.strip_prefix("sqlite://").unwrap_or(text);
        Ok(Target::Sqlite(PathBuf::from(path)))
    }

    /// Opens the store. A SQLite file must exist; a PostgreSQL server must answer.
    ///
    /// # Errors
    /// [`TargetError::NoSuchFile`], or the store's error ([`TargetError::Store`]).
    pub async fn open(&self) -> Result<Opened, TargetError> {
        match self {
            Target::Sqlite(path) => {
                if !Path::new(path).exists() {
                    return Err(TargetError::NoSuchFile(path.clone()));
                }
                SqliteStore::open(path)
                    .map(Opened::Sqlite)
                    .map_err(TargetError::Store)
            }
            Target::Postgres(url) => PostgresStore::connect(url)
                .await
                .map(Opened::Postgres)
                .map_err(TargetError::Store),
        }
    }
}

/// An open store of either kind. Cloning shares the connection (pool) as the store's own
/// clone does, so one opened store can serve a `Jobs` and the views at once.
#[derive(Clone, Debug)]
pub enum Opened {
    /// A SQLite file.
    Sqlite(SqliteStore),
    /// A PostgreSQL database.
    Postgres(PostgresStore),
}

/// Writes each listed `Store` method as a call of the same method, with the same arguments,
/// on whichever store is open: the signatures below are the whole of what `Opened` does.
macro_rules! forward {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?;)*) => {
        $(
            async fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
                match self {
                    Opened::Sqlite(store) => store.$name($($arg),*).await,
                    Opened::Postgres(store) => store.$name($($arg),*).await,
                }
            }
        )*
    };
}

impl Store for Opened {
    forward! {
        fn insert(&self, work: NewWork) -> Result<Inserted, StoreError>;
        fn insert_many(&self, batch: Vec<NewWork>) -> Result<Batch, StoreError>;
        fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError>;
        fn list(&self, owner: &str, after: Option<WorkId>, limit: u32) -> Result<Listing, StoreError>;
        fn list_where(
            &self,
            owner: &str,
            filter: &WorkFilter,
            after: Option<WorkId>,
            limit: u32,
        ) -> Result<Listing, StoreError>;
        fn claim(
            &self,
            owner: &str,
            now: Timestamp,
            lease_until: Timestamp,
            limit: u32,
        ) -> Result<Claim, StoreError>;
        fn extend_lease(
            &self,
            id: WorkId,
            revision: Revision,
            until: Timestamp,
            now: Timestamp,
        ) -> Result<bool, StoreError>;
        fn release_lease(
            &self,
            id: WorkId,
            revision: Revision,
            now: Timestamp,
            history: Vec<AttemptRecord>,
        ) -> Result<bool, StoreError>;
        fn unclaim(&self, id: WorkId, revision: Revision, now: Timestamp) -> Result<bool, StoreError>;
        fn finish(&self, id: WorkId, revision: Revision, finish: Finish) -> Result<bool, StoreError>;
        fn finish_and_claim(
            &self,
            finished: Vec<Finished>,
            owner: &str,
            now: Timestamp,
            lease_until: Timestamp,
            limit: u32,
        ) -> FinishedAndClaimed;
        fn quarantine(
            &self,
            id: WorkId,
            claimed_until: Timestamp,
            reason: String,
            now: Timestamp,
        ) -> Result<bool, StoreError>;
        fn quarantined(
            &self,
            owner: &str,
            after: Option<WorkId>,
            limit: u32,
        ) -> Result<Vec<QuarantinedWork>, StoreError>;
        fn release(&self, owner: &str, id: WorkId, now: Timestamp) -> Result<Released, StoreError>;
        fn purge_quarantined(&self, owner: &str, id: WorkId) -> Result<bool, StoreError>;
        fn cancel(&self, id: WorkId, now: Timestamp) -> Result<Option<WorkState>, StoreError>;
        fn next_due(&self, owner: &str) -> Result<Option<Timestamp>, StoreError>;
        fn dead_letters(
            &self,
            owner: &str,
            after: Option<DeadLetterId>,
            limit: u32,
        ) -> Result<Vec<DeadLetter>, StoreError>;
        fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetter>, StoreError>;
        fn redrive(&self, id: DeadLetterId, work: NewWork) -> Result<Option<WorkRecord>, StoreError>;
        fn purge(&self, id: DeadLetterId) -> Result<bool, StoreError>;
        fn purge_kept_keys(&self, owner: &str, now: Timestamp, limit: u32) -> Result<u64, StoreError>;
        fn listen(&self, owner: &str, wake: &(dyn Fn() + Send + Sync));
        fn count_work(&self, owner: &str, now: Timestamp) -> Result<WorkCounts, StoreError>;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_postgres_and_everything_else_a_file() {
        assert_eq!(
            Target::parse("postgres://u@h/db").ok(),
            Some(Target::Postgres("postgres://u@h/db".into()))
        );
        assert_eq!(
            Target::parse("postgresql://h/db").ok(),
            Some(Target::Postgres("postgresql://h/db".into()))
        );
        assert_eq!(
            Target::parse("jobs.db").ok(),
            Some(Target::Sqlite("jobs.db".into()))
        );
        assert_eq!(
            Target::parse("sqlite://data/jobs.db").ok(),
            Some(Target::Sqlite("data/jobs.db".into()))
        );
        assert!(matches!(Target::parse("  "), Err(TargetError::Missing)));
    }
}
