//! Writing work in the caller's own transaction: the store's insert statements, run on a
//! connection the store does not own.
//!
//! The statements are the store's own ([`insert`](super::insert),
//! [`insert_batch`](super::insert::insert_batch)), written against [`Conn`] so that they run alike on
//! the pool's connections and on a caller's `tokio_postgres` or deadpool transaction.

use std::future::Future;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Row, Statement};

use super::{Failed, failed};
use crate::record::NewWork;
use crate::store::{Batch, Inserted, StoreError};

/// What the store's insert statements need of a connection. Public in a private module: the
/// bound of [`PostgresTransaction`], which no other crate can implement.
pub trait Conn: Sync {
    /// A prepared statement, from the connection's cache where it has one.
    fn prepare_cached(&self, sql: &str) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// At most one row of `statement`.
    fn query_opt(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send;

    /// Every row of `statement`.
    fn query(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send;

    /// The rows `statement` changed.
    fn execute(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    /// Statements without parameters or rows (savepoints).
    fn batch_execute(&self, sql: &str) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The methods of [`Conn`] for a type that derefs to a `tokio_postgres` client or
/// transaction (`$driver`) and caches statements with `$prepare`. The paths are spelled out:
/// `self.query_opt(…)` would find [`Conn`]'s own method first and call itself.
macro_rules! forward {
    ($prepare:path, $driver:ty) => {
        fn prepare_cached(
            &self,
            sql: &str,
        ) -> impl Future<Output = Result<Statement, Error>> + Send {
            $prepare(self, sql)
        }

        fn query_opt(
            &self,
            statement: &Statement,
            params: &[&(dyn ToSql + Sync)],
        ) -> impl Future<Output = Result<Option<Row>, Error>> + Send {
            <$driver>::query_opt(self, statement, params)
        }

        fn query(
            &self,
            statement: &Statement,
            params: &[&(dyn ToSql + Sync)],
        ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send {
            <$driver>::query(self, statement, params)
        }

        fn execute(
            &self,
            statement: &Statement,
            params: &[&(dyn ToSql + Sync)],
        ) -> impl Future<Output = Result<u64, Error>> + Send {
            <$driver>::execute(self, statement, params)
        }

        fn batch_execute(&self, sql: &str) -> impl Future<Output = Result<(), Error>> + Send {
            <$driver>::batch_execute(self, sql)
        }
    };
}

/// The pool's connections: statements cached per connection.
impl Conn for deadpool_postgres::Object {
    forward!(
        deadpool_postgres::ClientWrapper::prepare_cached,
        tokio_postgres::Client
    );
}

/// A transaction on a pool's connection (the store's batches, or a caller's deadpool
/// transaction): statements cached per connection.
impl Conn for deadpool_postgres::Transaction<'_> {
    forward!(
        deadpool_postgres::Transaction::prepare_cached,
        tokio_postgres::Transaction<'_>
    );
}

/// A caller's plain `tokio_postgres` transaction: no statement cache, so each statement is
/// prepared on the way (one more round trip).
impl Conn for tokio_postgres::Transaction<'_> {
    fn prepare_cached(&self, sql: &str) -> impl Future<Output = Result<Statement, Error>> + Send {
        self.prepare(sql)
    }

    fn query_opt(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send {
        tokio_postgres::Transaction::query_opt(self, statement, params)
    }

    fn query(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send {
        tokio_postgres::Transaction::query(self, statement, params)
    }

    fn execute(
        &self,
        statement: &Statement,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        tokio_postgres::Transaction::execute(self, statement, params)
    }

    fn batch_execute(&self, sql: &str) -> impl Future<Output = Result<(), Error>> + Send {
        tokio_postgres::Transaction::batch_execute(self, sql)
    }
}

/// An open PostgreSQL transaction of the caller's that durable work can be written in:
/// a [`tokio_postgres::Transaction`], or a [`deadpool_postgres::Transaction`] (whose
/// statements are then prepared once per connection). Sealed: implemented for those two.
pub trait PostgresTransaction: Conn {}

impl PostgresTransaction for tokio_postgres::Transaction<'_> {}

impl PostgresTransaction for deadpool_postgres::Transaction<'_> {}

/// [`Store::insert`](crate::Store::insert) in the caller's transaction. A key already held
/// writes nothing (`ON CONFLICT DO NOTHING`), so no statement fails on it and the caller's
/// transaction goes on.
pub(crate) async fn insert(tx: &impl Conn, work: NewWork) -> Result<Inserted, StoreError> {
    Ok(super::insert(tx, work).await?)
}

/// The savepoint that makes a batch all or nothing inside the caller's transaction.
const SAVEPOINT: &str = "SAVEPOINT retry_durable_batch";
const RELEASE: &str = "RELEASE SAVEPOINT retry_durable_batch";
const ROLL_BACK: &str =
    "ROLLBACK TO SAVEPOINT retry_durable_batch; RELEASE SAVEPOINT retry_durable_batch";

/// [`Store::insert_many`](crate::Store::insert_many) in the caller's transaction, under a
/// savepoint: a conflict or a failed statement rolls back this batch's rows only, and the
/// caller's transaction stays usable (unless the connection itself is gone).
pub(crate) async fn insert_many(tx: &impl Conn, batch: Vec<NewWork>) -> Result<Batch, StoreError> {
    tx.batch_execute(SAVEPOINT).await.map_err(failed)?;
    let result: Result<Batch, Failed> = super::insert::insert_batch(tx, batch).await;
    let end = match &result {
        Ok(Batch::Written(_)) => RELEASE,
        _ => ROLL_BACK,
    };
    let ended = tx.batch_execute(end).await;
    // The batch's own failure says more than the rollback's that followed it.
    let batch = result?;
    ended.map_err(failed)?;
    Ok(batch)
}
