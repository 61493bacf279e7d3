//! A PostgreSQL connection lost in the middle of a store write loses no work and does not
//! poison the pool (P2, S12, S4).
//!
//! Every write of `retry_durable_work` passes a statement trigger that takes a shared advisory
//! lock; while the test holds that lock, the store's statement has done its work (rows claimed,
//! removed, inserted) and waits there, uncommitted, and the test terminates its backend with
//! `pg_terminate_backend`. For each write: the store reports an error (never a silent success),
//! the server rolled the statement back whole, the SAME store's next call works (the dead
//! connection did not go back to the pool: before the jobs side dropped lost connections, that
//! call failed too), and every item still runs exactly once — claimed again once its lease is
//! over, finished once, and gone. Times are the store's arguments (no clock, no sleeps).

use crate::conformance;
use crate::support::chain;
use crate::support::postgres as pg;

use std::future::Future;

use conformance::at;
use retry_durable::{
    BackendKind, DeadReason, Finish, Finished, Inserted, NewDeadLetter, NewWork, NextStep,
    PostgresStore, Store, StoreError, WorkRecord, WorkState,
};
use retry_toolkit::store::Revision;

const OWNER: &str = "o";
/// How the test finds the store's connections in `pg_stat_activity`.
const APPLICATION: &str = "lost_store";
/// The advisory lock the trigger waits on while the test holds it.
const STALL: i64 = 4242;

/// Queued work of [`OWNER`] due at `due_ms`.
fn work(due_ms: u64) -> NewWork {
    conformance::work(OWNER, "send", due_ms)
}

fn removed(now_ms: u64) -> Finish {
    Finish {
        dead_letter: None,
        then: NextStep::Remove,
        now: at(now_ms),
        keep_key_until: None,
        history: Vec::new(),
    }
}

fn dead_lettered(now_ms: u64) -> Finish {
    Finish {
        dead_letter: Some(NewDeadLetter {
            reason: DeadReason::Exhausted,
            attempts: 1,
            last_error: Some("down".to_owned()),
            failed_at: at(now_ms),
        }),
        then: NextStep::Remove,
        now: at(now_ms),
        keep_key_until: None,
        history: Vec::new(),
    }
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A store on a database of its own whose work table stalls its writes on demand, and the
/// connections that stall and end them.
struct Lab {
    store: PostgresStore,
    /// Holds [`STALL`] while a store statement is to wait.
    locker: tokio_postgres::Client,
    /// Finds the waiting backend and ends it.
    killer: tokio_postgres::Client,
}

/// How the test ends the waiting statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// `pg_terminate_backend`: the session is gone.
    Terminate,
    /// `pg_cancel_backend`: the statement fails, the session lives on.
    Cancel,
}

impl Lab {
    async fn new() -> Lab {
        let url = pg::database_url().await;
        let store = PostgresStore::connect(&format!("{url} application_name={APPLICATION}"))
            .await
            .unwrap();
        let locker = client(&url).await;
        locker
            .batch_execute(&format!(
                "CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN PERFORM pg_advisory_xact_lock_shared({STALL}); RETURN NULL; END $$;
                 CREATE TRIGGER stall AFTER INSERT OR UPDATE OR DELETE ON retry_durable_work
                     FOR EACH STATEMENT EXECUTE FUNCTION stall();"
            ))
            .await
            .unwrap();
        Lab {
            store,
            locker,
            killer: client(&url).await,
        }
    }

    /// The store's connections to the server, by backend pid.
    async fn store_backends(&self) -> Vec<i32> {
        self.killer
            .query(
                "SELECT pid FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = $1 ORDER BY pid",
                &[&APPLICATION],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }

    /// Runs `write` until its statement waits in the trigger, having done its work, and ends
    /// it there as `end` says; then at once `next`, the store's next call (a read, which the
    /// trigger does not stall). Nothing else runs between the two: a dead connection given
    /// back to the pool has no time to notice it is closed before `next` asks for one, which
    /// is the case the pool's own check misses.
    async fn end_during<T, N>(
        &self,
        end: End,
        write: impl Future<Output = T>,
        next: impl Future<Output = N>,
    ) -> (T, N) {
        self.locker
            .execute("SELECT pg_advisory_lock($1)", &[&STALL])
            .await
            .unwrap();
        let stop = async {
            // No sleep: each look is a round trip to the server, and the write needs a few.
            let pid: i32 = loop {
                let waiting = self
                    .killer
                    .query(
                        "SELECT pid FROM pg_stat_activity
                         WHERE datname = current_database() AND application_name = $1
                             AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                        &[&APPLICATION],
                    )
                    .await
                    .unwrap();
                if let Some(row) = waiting.first() {
                    break row.get(0);
                }
                tokio::task::yield_now().await;
            };
            let function = match end {
                End::Terminate => "pg_terminate_backend",
                End::Cancel => "pg_cancel_backend",
            };
            let ended: bool = self
                .killer
                .query_one(&format!("SELECT {function}($1)"), &[&pid])
                .await
                .unwrap()
                .get(0);
            assert!(ended, "{function}({pid}) found no backend");
        };
        let (written, ()) = tokio::join!(write, stop);
        let after = next.await;
        self.locker
            .execute("SELECT pg_advisory_unlock($1)", &[&STALL])
            .await
            .unwrap();
        (written, after)
    }

    async fn lose_during<T, N>(
        &self,
        write: impl Future<Output = T>,
        next: impl Future<Output = N>,
    ) -> (T, N) {
        self.end_during(End::Terminate, write, next).await
    }

    /// New work, and the same claimed at 0 under a lease until 1 000.
    async fn running(&self) -> (WorkRecord, WorkRecord) {
        let new = new(self.store.insert(work(0)).await.unwrap());
        let claim = self.store.claim(OWNER, at(0), at(1_000), 1).await.unwrap();
        assert_eq!(
            claim.work.iter().map(|r| r.id).collect::<Vec<_>>(),
            [new.id]
        );
        (new, claim.work[0].clone())
    }

    async fn row(&self, record: &WorkRecord) -> Option<WorkRecord> {
        self.store.get(record.id).await.unwrap()
    }

    async fn dead_letters(&self) -> usize {
        self.store
            .dead_letters(OWNER, None, 100)
            .await
            .unwrap()
            .len()
    }

    /// Everything left runs exactly once from `now_ms` on: claimed once (these ids and no
    /// others), finished once, gone; and nothing is claimable after.
    async fn each_runs_once_from(&self, now_ms: u64, mut expected: Vec<WorkRecord>) {
        let claim = self
            .store
            .claim(OWNER, at(now_ms), at(now_ms + 1_000), 100)
            .await
            .unwrap();
        let mut ids: Vec<_> = claim.work.iter().map(|r| r.id).collect();
        ids.sort();
        expected.sort_by_key(|r| r.id);
        let want: Vec<_> = expected.iter().map(|r| r.id).collect();
        assert_eq!(ids, want, "claimable after the loss");
        for record in &claim.work {
            let done = self
                .store
                .finish(record.id, record.revision, removed(now_ms + 1))
                .await
                .unwrap();
            assert!(done, "{} could not be finished", record.id);
            assert_eq!(self.row(record).await, None);
        }
        let later = self
            .store
            .claim(OWNER, at(now_ms + 1_000_000), at(now_ms + 1_001_000), 100)
            .await
            .unwrap();
        assert!(later.work.is_empty(), "ran twice: {:?}", later.work);
    }
}

/// A write whose connection was lost fails with a connection error that a caller can branch
/// on, and whose `source()` chain reaches tokio-postgres's error (issue 28).
fn lost<T: std::fmt::Debug>(what: &str, result: Result<T, StoreError>) {
    let error = match result {
        Err(error) => error,
        Ok(done) => panic!("{what} with its connection lost succeeded: {done:?}"),
    };
    assert_eq!(
        error.kind(),
        Some(BackendKind::Connection),
        "{what} with its connection lost: {error:?}"
    );
    let Some((depth, driver)) = chain::find::<tokio_postgres::Error>(&error) else {
        panic!("{what}: no tokio-postgres error in the chain of {error:?}")
    };
    assert!(
        depth >= 1,
        "{what}: the driver's error is a source, not the error"
    );
    // pg_terminate_backend: the server ends the session (57P01), or the socket closes first.
    let ended = driver.as_db_error().map(|db| db.code().code().to_owned());
    assert!(
        ended.as_deref() == Some("57P01") || driver.is_closed() || ended.is_none(),
        "{what}: {driver:?}"
    );
}

/// The answer of the store's first call after a loss, which must work.
fn first<T>(answer: Result<T, StoreError>) -> T {
    answer.unwrap_or_else(|e| panic!("the first call after the loss failed: {e}"))
}

fn new(inserted: Inserted) -> WorkRecord {
    match inserted {
        Inserted::New(record) => record,
        Inserted::Existing(record) => panic!("expected a new row, got existing {}", record.id),
    }
}

#[tokio::test]
async fn p2_a_connection_lost_mid_claim_claims_nothing_and_the_store_carries_on() {
    let lab = Lab::new().await;
    let a = new(lab.store.insert(work(0)).await.unwrap());
    let b = new(lab.store.insert(work(0)).await.unwrap());
    let before = lab.store_backends().await;
    let (claimed, a_now) = lab
        .lose_during(
            lab.store.claim(OWNER, at(10), at(1_010), 10),
            lab.store.get(a.id),
        )
        .await;
    lost("claim", claimed);
    // The claim was rolled back whole: both rows as they were, no attempt spent.
    assert_eq!(first(a_now), Some(a.clone()));
    assert_eq!(lab.row(&b).await, Some(b.clone()));
    assert_ne!(lab.store_backends().await, before, "no new connection");
    lab.each_runs_once_from(20, vec![a, b]).await;
}

#[tokio::test]
async fn s12_a_connection_lost_mid_finish_writes_nothing_and_the_item_runs_again_after_its_lease() {
    let lab = Lab::new().await;
    let (a, running) = lab.running().await;
    let (finished, now) = lab
        .lose_during(
            lab.store.finish(running.id, running.revision, removed(5)),
            lab.store.get(running.id),
        )
        .await;
    lost("finish", finished);
    // Still running under its claim: the DELETE was rolled back.
    assert_eq!(first(now), Some(running.clone()));
    // Not claimable while the lease runs…
    let early = lab
        .store
        .claim(OWNER, at(999), at(1_999), 10)
        .await
        .unwrap();
    assert!(early.work.is_empty(), "claimed inside its lease: {early:?}");
    // …claimable once it is over, as a new attempt that fences the old claim out.
    let again = lab
        .store
        .claim(OWNER, at(1_000), at(2_000), 10)
        .await
        .unwrap();
    assert_eq!(again.work.len(), 1);
    let retried = &again.work[0];
    assert_eq!((retried.id, retried.attempt), (a.id, 2));
    let stale = lab
        .store
        .finish(running.id, running.revision, removed(1_001))
        .await
        .unwrap();
    assert!(!stale, "the lost claim finished the re-claimed item");
    assert!(
        lab.store
            .finish(retried.id, retried.revision, removed(1_002))
            .await
            .unwrap()
    );
    lab.each_runs_once_from(1_000_000, vec![]).await;
}

#[tokio::test]
async fn s4_a_connection_lost_mid_dead_letter_writes_neither_half() {
    let lab = Lab::new().await;
    let (a, running) = lab.running().await;
    // The dead letter is written first, then the row removed: the loss comes at the removal.
    let (finished, letters) = lab
        .lose_during(
            lab.store
                .finish(running.id, running.revision, dead_lettered(5)),
            lab.store.dead_letters(OWNER, None, 100),
        )
        .await;
    lost("a dead-lettering finish", finished);
    assert_eq!(first(letters), [], "half a dead-lettering survived");
    assert_eq!(lab.row(&running).await, Some(running.clone()));
    // After the lease, the item runs again and is dead-lettered once.
    let retried = lab
        .store
        .claim(OWNER, at(1_000), at(2_000), 10)
        .await
        .unwrap()
        .work;
    assert_eq!(retried.iter().map(|r| r.id).collect::<Vec<_>>(), [a.id]);
    assert!(
        lab.store
            .finish(retried[0].id, retried[0].revision, dead_lettered(1_001))
            .await
            .unwrap()
    );
    assert_eq!(lab.dead_letters().await, 1);
    lab.each_runs_once_from(1_000_000, vec![]).await;
}

#[tokio::test]
async fn s12_a_connection_lost_mid_finish_and_claim_writes_nothing_and_claims_nothing() {
    let lab = Lab::new().await;
    let (a, running) = lab.running().await;
    let b = new(lab.store.insert(work(0)).await.unwrap());
    let ended = Finished {
        id: running.id,
        revision: running.revision,
        finish: removed(5),
    };
    let (batch, now) = lab
        .lose_during(
            lab.store
                .finish_and_claim(vec![ended], OWNER, at(5), at(1_005), 10),
            lab.store.get(running.id),
        )
        .await;
    // Neither half is reported as done.
    assert_eq!(batch.finished.len(), 1);
    lost(
        "the batch's attempt",
        batch.finished.into_iter().next().unwrap(),
    );
    lost("the batch's claim", batch.claim);
    // Nothing was written: the ended attempt still holds its claim, the other item waits.
    assert_eq!(first(now), Some(running.clone()));
    assert_eq!(lab.row(&b).await, Some(b.clone()));
    // The waiting item is claimable at once, the running one once its lease is over.
    let now = lab.store.claim(OWNER, at(6), at(1_006), 10).await.unwrap();
    assert_eq!(now.work.iter().map(|r| r.id).collect::<Vec<_>>(), [b.id]);
    let later = lab
        .store
        .claim(OWNER, at(1_000), at(2_000), 10)
        .await
        .unwrap();
    let retried = &later.work[0];
    assert_eq!(
        (later.work.len(), retried.id, retried.attempt),
        (1, a.id, 2)
    );
    // Each completes once, in one batch with the next claim (which finds nothing).
    let done = lab
        .store
        .finish_and_claim(
            [(retried, 1_001), (&now.work[0], 1_001)]
                .into_iter()
                .map(|(r, ms)| Finished {
                    id: r.id,
                    revision: r.revision,
                    finish: removed(ms),
                })
                .collect(),
            OWNER,
            at(1_001),
            at(2_001),
            10,
        )
        .await;
    assert_eq!(
        done.finished
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>(),
        [true, true]
    );
    assert!(done.claim.unwrap().work.is_empty());
    lab.each_runs_once_from(1_000_000, vec![]).await;
}

#[tokio::test]
async fn p1_a_connection_lost_mid_enqueue_writes_nothing_and_the_enqueue_can_be_repeated() {
    let lab = Lab::new().await;
    let mut keyed = work(0);
    keyed.key = Some("once".to_owned());
    let (inserted, listed) = lab
        .lose_during(
            lab.store.insert(keyed.clone()),
            lab.store.list(OWNER, None, 10),
        )
        .await;
    lost("enqueue", inserted);
    // Nothing was written, and the key is free: repeating the enqueue writes the row once.
    assert_eq!(
        first(listed).records,
        [],
        "an enqueue that failed wrote a row"
    );
    let record = new(lab.store.insert(keyed.clone()).await.unwrap());
    match lab.store.insert(keyed).await.unwrap() {
        Inserted::Existing(existing) => assert_eq!(existing, record),
        Inserted::New(again) => panic!("a second row {} for the key", again.id),
    }
    // Without a key too.
    let (inserted, listed) = lab
        .lose_during(lab.store.insert(work(0)), lab.store.list(OWNER, None, 10))
        .await;
    lost("enqueue", inserted);
    assert_eq!(first(listed).records, std::slice::from_ref(&record));
    let plain = new(lab.store.insert(work(0)).await.unwrap());
    lab.each_runs_once_from(10, vec![record, plain]).await;
}

/// A statement that fails without ending its session (a cancel, SQLSTATE 57014: class 57
/// like an operator's shutdown, but not 57P) keeps its connection: the pool is not emptied
/// by ordinary errors.
#[tokio::test]
async fn a_failed_statement_whose_session_lives_keeps_its_connection() {
    let lab = Lab::new().await;
    let a = new(lab.store.insert(work(0)).await.unwrap());
    let before = lab.store_backends().await;
    assert_eq!(before.len(), 1, "one connection in use");
    let (claimed, now) = lab
        .end_during(
            End::Cancel,
            lab.store.claim(OWNER, at(10), at(1_010), 10),
            lab.store.get(a.id),
        )
        .await;
    assert!(
        matches!(&claimed, Err(e) if e.kind() == Some(BackendKind::Other) && e.to_string().contains("57014")),
        "a cancelled claim: {claimed:?}"
    );
    assert_eq!(first(now).map(|r| r.state), Some(WorkState::Waiting));
    assert_eq!(
        lab.store_backends().await,
        before,
        "the connection was replaced"
    );
    assert_eq!(lab.row(&a).await.map(|r| r.revision), Some(Revision::FIRST));
    lab.each_runs_once_from(20, vec![a]).await;
}
