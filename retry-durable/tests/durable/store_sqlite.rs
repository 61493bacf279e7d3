//! The store conformance suite on SQLite, each case on a real file in its own temporary
//! directory.

use crate::conformance;

fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = retry_durable::SqliteStore::open(dir.path().join("jobs.db")).expect("open");
    (store, dir)
}

conformance_suite!(fresh());

/// The same suite with the statements on the caller's thread.
mod on_the_callers_thread {
    use super::conformance;
    use crate::conformance_suite;

    fn fresh() -> (retry_durable::SqliteStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let options = retry_durable::SqliteOptions {
            runs_on: retry_durable::RunsOn::CallerThread,
            ..retry_durable::SqliteOptions::default()
        };
        let store = retry_durable::SqliteStore::open_with(dir.path().join("jobs.db"), options)
            .expect("open");
        (store, dir)
    }

    conformance_suite!(fresh());
}

/// S17 on SQLite: a batch of ends is one transaction, each item in a savepoint of its own. An
/// item whose statement fails (here a trigger refuses to delete its row) rolls back alone —
/// its dead letter too — and its neighbours are written in the same commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_item_of_a_batch_rolls_back_alone() {
    use retry_durable::{DeadReason, Finish, Finished, NewDeadLetter, NextStep, Store, WorkState};

    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("jobs.db");
    let store = retry_durable::SqliteStore::open(&path).expect("open");
    for handler in ["a", "poison", "b"] {
        store
            .insert(conformance::work("o", handler, 0))
            .await
            .unwrap();
    }
    let claimed = store
        .claim("o", conformance::at(0), conformance::at(1_000), 3)
        .await
        .unwrap()
        .work;
    assert_eq!(claimed.len(), 3);
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER poison BEFORE DELETE ON work WHEN old.handler = 'poison'
             BEGIN SELECT RAISE(ABORT, 'poisoned'); END;",
        )
        .unwrap();
    let batch = claimed
        .iter()
        .map(|record| Finished {
            id: record.id,
            revision: record.revision,
            finish: Finish {
                dead_letter: Some(NewDeadLetter {
                    reason: DeadReason::Exhausted,
                    attempts: 1,
                    last_error: Some("down".to_owned()),
                    failed_at: conformance::at(5),
                }),
                then: NextStep::Remove,
                now: conformance::at(5),
                keep_key_until: None,
                history: Vec::new(),
            },
        })
        .collect();
    let done = store
        .finish_and_claim(batch, "o", conformance::at(5), conformance::at(100), 0)
        .await;
    let answers: Vec<Option<bool>> = done
        .finished
        .iter()
        .map(|a| a.as_ref().ok().copied())
        .collect();
    assert_eq!(answers, [Some(true), None, Some(true)]);
    let error = done.finished[1].as_ref().unwrap_err().to_string();
    assert!(error.contains("poisoned"), "{error}");

    let poison = store.get(claimed[1].id).await.unwrap().unwrap();
    assert_eq!(
        (poison.state, poison.revision),
        (WorkState::Running, claimed[1].revision),
        "the failed item is untouched"
    );
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    let ids: Vec<_> = letters.iter().map(|d| d.work_id).collect();
    assert_eq!(
        ids,
        [claimed[0].id, claimed[2].id],
        "the failed item's dead letter rolled back with it"
    );
    assert_eq!(store.get(claimed[0].id).await.unwrap(), None);
    assert_eq!(store.get(claimed[2].id).await.unwrap(), None);
}
