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

/// How many transactions were committed to the file's write-ahead log since it was last
/// truncated: the frames that end a commit (a non-zero database size in their header) and
/// carry the log's current salt (older frames beyond a restart do not).
fn commits_in_wal(path: &std::path::Path) -> usize {
    let wal = std::fs::read(path.with_extension("db-wal")).unwrap_or_default();
    let Some(header) = wal.get(..32) else {
        return 0;
    };
    let word = |bytes: &[u8], at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    let page_size = word(header, 8) as usize;
    let salt = &header[16..24];
    wal[32..]
        .chunks(24 + page_size)
        .filter(|frame| frame.len() == 24 + page_size)
        .filter(|frame| &frame[8..16] == salt && word(frame, 4) != 0)
        .count()
}

/// S17 on SQLite, group commit: writes that arrive at the store's thread together share one
/// transaction and one commit. Here 25 calls queue behind a write lock held by another
/// connection — 12 ends of attempts, 12 enqueues and a batch — and are written in at most a
/// few commits (one each before). In their middle, an end whose statement fails (a trigger
/// refuses to delete its row), an end whose claim is stale and a batch refused at its second
/// item roll back alone: the failed end's dead letter and the batch's first row are not
/// written, every neighbour is. Every caller told "ok" is in the file, seen at once through
/// another connection and after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_concurrent_writes_share_a_commit_and_a_failing_one_rolls_back_alone() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    use retry_durable::{
        Batch, DeadReason, Finish, Inserted, NewDeadLetter, NextStep, SqliteStore, Store,
        StoreError, WorkState,
    };

    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::open(&path).expect("open");
    for i in 0..12 {
        let handler = if i == 5 { "poison" } else { "a" };
        store
            .insert(conformance::work("o", handler, 0))
            .await
            .unwrap();
    }
    let claimed = store
        .claim("o", conformance::at(0), conformance::at(1_000), 12)
        .await
        .unwrap()
        .work;
    assert_eq!(claimed.len(), 12);
    let held = retry_durable::NewWork {
        key: Some("held".to_owned()),
        ..conformance::work("o", "a", 60_000)
    };
    store.insert(held).await.unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER poison BEFORE DELETE ON work WHEN old.handler = 'poison'
             BEGIN SELECT RAISE(ABORT, 'poisoned'); END;
             PRAGMA wal_checkpoint(TRUNCATE);",
        )
        .unwrap();
    assert_eq!(commits_in_wal(&path), 0, "the log starts empty");

    enum Answer {
        Finished(Result<bool, StoreError>),
        Inserted(Box<Result<Inserted, StoreError>>),
        Batch(Result<Batch, StoreError>),
    }
    let end = || Finish {
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
    };
    let mut calls: Vec<Pin<Box<dyn Future<Output = Answer> + '_>>> = Vec::new();
    for (i, record) in claimed.iter().enumerate() {
        let revision = if i == 8 {
            record.revision.checked_next().unwrap()
        } else {
            record.revision
        };
        let store = &store;
        calls.push(Box::pin(async move {
            Answer::Finished(store.finish(record.id, revision, end()).await)
        }));
        let new = retry_durable::NewWork {
            key: Some(format!("new-{i}")),
            ..conformance::work("o", "a", 60_000)
        };
        calls.push(Box::pin(async move {
            Answer::Inserted(Box::new(store.insert(new).await))
        }));
        if i == 6 {
            let batch = vec![
                retry_durable::NewWork {
                    key: Some("fresh".to_owned()),
                    ..conformance::work("o", "a", 60_000)
                },
                retry_durable::NewWork {
                    key: Some("held".to_owned()),
                    ..conformance::work("o", "b", 60_000)
                },
            ];
            calls.push(Box::pin(async move {
                Answer::Batch(store.insert_many(batch).await)
            }));
        }
    }
    // Hold the write lock while every call is sent (one poll each), so that they queue.
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::future::poll_fn(|cx| {
        for call in &mut calls {
            assert!(
                call.as_mut().poll(cx).is_pending(),
                "a write ran under the lock"
            );
        }
        Poll::Ready(())
    })
    .await;
    other.execute_batch("ROLLBACK").unwrap();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await);
    }

    let mut new_ids = Vec::new();
    let mut ends = Vec::new();
    for answer in answers {
        match answer {
            Answer::Finished(done) => ends.push(done.map_err(|e| e.to_string())),
            Answer::Inserted(inserted) => match *inserted {
                Ok(Inserted::New(record)) => new_ids.push(record.id),
                other => panic!("an enqueue failed: {other:?}"),
            },
            Answer::Batch(batch) => assert!(
                matches!(batch, Ok(Batch::Conflict { index: 1, .. })),
                "{batch:?}"
            ),
        }
    }
    for (i, done) in ends.iter().enumerate() {
        match i {
            5 => assert!(
                done.as_ref().is_err_and(|e| e.contains("poisoned")),
                "{done:?}"
            ),
            8 => assert_eq!(done, &Ok(false), "the stale end"),
            _ => assert_eq!(done, &Ok(true), "end {i}"),
        }
    }
    assert_eq!(new_ids.len(), 12);
    let commits = commits_in_wal(&path);
    assert!(
        (1..=3).contains(&commits),
        "25 writes that queued together took {commits} commits"
    );

    // Every answer is in the file: through another connection while the store is open, then
    // after both are closed and the file reopened.
    let (new_ids, claimed) = (&new_ids, &claimed);
    let check = |store: SqliteStore| async move {
        for id in new_ids {
            assert!(
                store.get(*id).await.unwrap().is_some(),
                "enqueued {id} lost"
            );
        }
        let letters: Vec<_> = store
            .dead_letters("o", None, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.work_id)
            .collect();
        let ended: Vec<_> = claimed
            .iter()
            .enumerate()
            .filter(|(i, _)| ![5, 8].contains(i))
            .map(|(_, r)| r.id)
            .collect();
        assert_eq!(
            letters, ended,
            "the failed end's dead letter rolled back alone"
        );
        for i in [5, 8] {
            let left = store.get(claimed[i].id).await.unwrap().unwrap();
            assert_eq!(
                (left.state, left.revision),
                (WorkState::Running, claimed[i].revision),
                "item {i} untouched"
            );
        }
        let listed = store.list("o", None, 100).await.unwrap().records;
        assert!(
            listed.iter().all(|r| r.key.as_deref() != Some("fresh")),
            "the refused batch's first row was kept"
        );
    };
    check(SqliteStore::open(&path).expect("a second connection")).await;
    drop(store);
    drop(other);
    check(SqliteStore::open(&path).expect("reopen")).await;
}
