//! The store contract's conformance suite (P1), written once against [`Store`] and run
//! unchanged against every backend: `conformance_suite!(fresh_store_expression)` expands to
//! one test per case. The expression yields `(store, guard)`; the guard (a temporary
//! directory, a server's database) lives until the test ends.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use retry_durable::{
    AttemptOutcome, AttemptRecord, Batch, DeadReason, Finish, Finished, Inserted, Misfire,
    NewDeadLetter, NewWork, NextStep, Store, Timing, Wait, WaitReason, WorkCounts, WorkRecord,
    WorkState,
};
use retry_toolkit::RetryOptions;
use retry_toolkit::store::{Revision, Timestamp};

pub const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

pub fn at(offset_ms: u64) -> Timestamp {
    Timestamp::from_millis(T0.as_millis() + offset_ms)
}

pub fn work(owner: &str, handler: &str, due_ms: u64) -> NewWork {
    NewWork {
        owner: owner.to_owned(),
        key: None,
        handler: handler.to_owned(),
        payload: r#"{"n":1}"#.to_owned(),
        options: RetryOptions::BUILTIN.with_max_attempts(4),
        retry_if: None,
        attempt_timeout: None,
        timing: Timing::Queued,
        due_at: at(due_ms),
        created_at: T0,
    }
}

fn new(inserted: Inserted) -> retry_durable::WorkRecord {
    match inserted {
        Inserted::New(record) => record,
        Inserted::Existing(record) => panic!("expected a new row, got existing {}", record.id),
    }
}

fn wait(due_ms: u64, attempt: u32) -> Finish {
    Finish {
        dead_letter: None,
        then: NextStep::Wait {
            due_at: at(due_ms),
            fire_at: at(0),
            attempt,
            last_error: Some("boom".to_owned()),
            last_delay_ms: 40,
        },
        now: at(1),
        keep_key_until: None,
        history: Vec::new(),
    }
}

fn dead(attempts: u32) -> Finish {
    Finish {
        dead_letter: Some(NewDeadLetter {
            reason: DeadReason::Exhausted,
            attempts,
            last_error: Some("still down".to_owned()),
            failed_at: at(5),
        }),
        then: NextStep::Remove,
        now: at(5),
        keep_key_until: None,
        history: Vec::new(),
    }
}

pub async fn p1_inserted_work_reads_back_as_written<S: Store>(store: S) {
    let mut spec = work("o", "send", 10);
    spec.key = Some("k-1".to_owned());
    spec.retry_if = Some("transient".to_owned());
    spec.timing = Timing::Cron {
        pattern: "0 9 * * MON-FRI".to_owned(),
        zone: "Europe/Prague".to_owned(),
        misfire: Misfire::CatchUp,
    };
    let record = new(store.insert(spec.clone()).await.unwrap());
    assert_eq!(record.owner, "o");
    assert_eq!(record.key.as_deref(), Some("k-1"));
    assert_eq!(record.handler, "send");
    assert_eq!(record.payload, spec.payload);
    assert_eq!(record.options, spec.options);
    assert_eq!(record.retry_if.as_deref(), Some("transient"));
    assert_eq!(record.timing, spec.timing);
    assert_eq!(record.state, WorkState::Waiting);
    assert_eq!(
        (record.attempt, record.due_at, record.fire_at),
        (0, at(10), at(10))
    );
    assert_eq!(
        (record.lease_until, record.last_error.as_deref()),
        (None, None)
    );
    assert_eq!(record.revision, Revision::FIRST);
    assert_eq!(store.get(record.id).await.unwrap(), Some(record.clone()));

    let every = Timing::Every {
        interval_ms: 60_000,
        misfire: Misfire::Skip,
    };
    let mut spec = work("o", "tick", 0);
    spec.timing = every.clone();
    let record = new(store.insert(spec).await.unwrap());
    assert_eq!(store.get(record.id).await.unwrap().unwrap().timing, every);
}

pub async fn s9_a_used_key_returns_the_existing_row_and_writes_nothing<S: Store>(store: S) {
    let mut first = work("o", "send", 0);
    first.key = Some("once".to_owned());
    let original = new(store.insert(first.clone()).await.unwrap());
    let mut again = first.clone();
    again.payload = r#"{"n":2}"#.to_owned();
    match store.insert(again).await.unwrap() {
        Inserted::Existing(existing) => assert_eq!(existing, original),
        Inserted::New(record) => panic!("a second row {} for the same key", record.id),
    }
    // Keys are per owner.
    let mut other_owner = first;
    other_owner.owner = "p".to_owned();
    new(store.insert(other_owner).await.unwrap());
    assert_eq!(store.list("o", None, 10).await.unwrap().len(), 1);
}

pub async fn p2_claim_takes_only_due_work_oldest_first<S: Store>(store: S) {
    let late = new(store.insert(work("o", "a", 30)).await.unwrap());
    let early = new(store.insert(work("o", "a", 10)).await.unwrap());
    let future = new(store.insert(work("o", "a", 1_000)).await.unwrap());
    new(store.insert(work("other", "a", 0)).await.unwrap());

    let claimed = store.claim("o", at(100), at(5_000), 10).await.unwrap().work;
    let ids: Vec<_> = claimed.iter().map(|r| r.id).collect();
    assert_eq!(ids, [early.id, late.id]);
    for record in &claimed {
        assert_eq!(record.state, WorkState::Running);
        assert_eq!(record.attempt, 1);
        assert_eq!(record.lease_until, Some(at(5_000)));
        assert_eq!(record.revision, Revision::FIRST.checked_next().unwrap());
        assert_eq!(store.get(record.id).await.unwrap().as_ref(), Some(record));
    }
    assert!(
        store
            .claim("o", at(100), at(200), 10)
            .await
            .unwrap()
            .work
            .is_empty(),
        "claimed twice"
    );
    let next = store
        .claim("o", at(1_000), at(6_000), 10)
        .await
        .unwrap()
        .work;
    assert_eq!(next.iter().map(|r| r.id).collect::<Vec<_>>(), [future.id]);
}

pub async fn p2_claim_respects_its_limit<S: Store>(store: S) {
    for due in 0..5 {
        new(store.insert(work("o", "a", due)).await.unwrap());
    }
    assert_eq!(
        store
            .claim("o", at(10), at(20), 2)
            .await
            .unwrap()
            .work
            .len(),
        2
    );
    assert_eq!(
        store
            .claim("o", at(10), at(20), 10)
            .await
            .unwrap()
            .work
            .len(),
        3
    );
    assert_eq!(
        store
            .claim("o", at(10), at(20), 10)
            .await
            .unwrap()
            .work
            .len(),
        0
    );
}

pub async fn p2_concurrent_claims_never_share_an_item<S: Store + Clone>(store: S) {
    for due in 0..40 {
        new(store.insert(work("o", "a", due)).await.unwrap());
    }
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = store.claim("o", at(100), at(10_000), 3).await.unwrap().work;
                if claimed.is_empty() {
                    return mine;
                }
                mine.extend(claimed.into_iter().map(|r| r.id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!(
        (count, all.len()),
        (40, 40),
        "every item claimed exactly once"
    );
}

pub async fn s12_an_expired_lease_is_claimed_again_and_fences_the_old_claim<S: Store>(store: S) {
    let id = new(store.insert(work("o", "a", 0)).await.unwrap()).id;
    let first = store
        .claim("o", at(0), at(100), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    assert!(
        store
            .claim("o", at(99), at(199), 1)
            .await
            .unwrap()
            .work
            .is_empty(),
        "lease still held"
    );
    let second = store
        .claim("o", at(100), at(300), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    assert_eq!(
        (second.id, second.attempt),
        (id, 2),
        "the lost attempt counts"
    );
    assert_ne!(second.revision, first.revision);

    // The first worker wakes up: nothing it writes lands.
    assert!(
        !store
            .extend_lease(id, first.revision, at(500), at(150))
            .await
            .unwrap()
    );
    assert!(!store.finish(id, first.revision, dead(1)).await.unwrap());
    assert!(!store.finish(id, first.revision, wait(10, 1)).await.unwrap());
    assert!(
        store.dead_letters("o", None, 10).await.unwrap().is_empty(),
        "stale dead letter written"
    );
    assert_eq!(store.get(id).await.unwrap(), Some(second.clone()));

    assert!(
        store
            .extend_lease(id, second.revision, at(900), at(150))
            .await
            .unwrap()
    );
    assert!(
        store
            .claim("o", at(400), at(500), 1)
            .await
            .unwrap()
            .work
            .is_empty(),
        "lease extended"
    );
    let extended = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (extended.lease_until, extended.revision),
        (Some(at(900)), second.revision)
    );
}

/// The queue-depth sample: rows by state, quarantined rows apart, leases that ended, one
/// owner only.
pub async fn v3_work_is_counted_by_state_per_owner<S: Store>(store: S) {
    assert_eq!(
        store.count_work("o", at(0)).await.unwrap(),
        WorkCounts::default()
    );
    let mut ids = Vec::new();
    for due in [0, 0, 0, 0, 5_000] {
        ids.push(new(store.insert(work("o", "a", due)).await.unwrap()).id);
    }
    store.insert(work("other", "a", 0)).await.unwrap();
    let running = store.claim("o", at(0), at(100), 2).await.unwrap().work;
    assert_eq!(running.len(), 2);
    store.cancel(ids[2], at(1)).await.unwrap();
    let bad = store.claim("o", at(1), at(50), 1).await.unwrap().work;
    assert_eq!(bad[0].id, ids[3]);
    assert!(
        store
            .quarantine(ids[3], at(50), "bad".to_owned(), at(2))
            .await
            .unwrap()
    );

    let counts = store.count_work("o", at(10)).await.unwrap();
    let by_state = counts.by_state();
    assert_eq!(
        by_state,
        [
            ("waiting", 1),
            ("running", 2),
            ("cancelled", 1),
            ("succeeded", 0),
            ("dead_lettered", 0),
            ("quarantined", 1),
        ]
    );
    assert_eq!(counts.expired_leases, 0);
    // At the leases' end, both running rows count as expired (still running).
    let later = store.count_work("o", at(100)).await.unwrap();
    assert_eq!((later.running, later.expired_leases), (2, 2));
    assert_eq!(store.count_work("other", at(100)).await.unwrap().waiting, 1);
}

pub async fn s5_a_retry_waits_as_a_row<S: Store>(store: S) {
    let id = new(store.insert(work("o", "a", 0)).await.unwrap()).id;
    let claim = store
        .claim("o", at(0), at(100), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    assert!(store.finish(id, claim.revision, wait(50, 1)).await.unwrap());
    let waiting = store.get(id).await.unwrap().unwrap();
    assert_eq!(waiting.state, WorkState::Waiting);
    assert_eq!(
        (waiting.due_at, waiting.attempt, waiting.lease_until),
        (at(50), 1, None)
    );
    assert_eq!(
        (waiting.last_error.as_deref(), waiting.last_delay_ms),
        (Some("boom"), 40)
    );
    assert_eq!(waiting.updated_at, at(1));
    assert!(
        store
            .claim("o", at(49), at(100), 1)
            .await
            .unwrap()
            .work
            .is_empty()
    );
    let again = store
        .claim("o", at(50), at(150), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    assert_eq!(again.attempt, 2);
    assert!(
        !store.finish(id, claim.revision, wait(60, 1)).await.unwrap(),
        "finish fenced"
    );
}

pub async fn s4_a_dead_letter_keeps_what_happened<S: Store>(store: S) {
    let mut spec = work("o", "send", 0);
    spec.key = Some("k".to_owned());
    spec.retry_if = Some("transient".to_owned());
    let id = new(store.insert(spec.clone()).await.unwrap()).id;
    let claim = store
        .claim("o", at(0), at(100), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    assert!(store.finish(id, claim.revision, dead(3)).await.unwrap());
    assert_eq!(
        store.get(id).await.unwrap(),
        None,
        "dead-lettered work is removed"
    );

    let letters = store.dead_letters("o", None, 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(
        (
            letter.work_id,
            letter.owner.as_str(),
            letter.handler.as_str()
        ),
        (id, "o", "send")
    );
    assert_eq!(
        (letter.payload.as_str(), letter.options),
        (spec.payload.as_str(), spec.options)
    );
    assert_eq!(
        (letter.retry_if.as_deref(), letter.kind.as_str()),
        (Some("transient"), "queue")
    );
    assert_eq!((letter.reason, letter.attempts), (DeadReason::Exhausted, 3));
    assert_eq!(letter.last_error.as_deref(), Some("still down"));
    assert_eq!(
        (letter.created_at, letter.fire_at, letter.failed_at),
        (T0, at(0), at(5))
    );
    assert_eq!(letter.redriven_as, None);
    assert_eq!(
        store.dead_letter(letter.id).await.unwrap().as_ref(),
        Some(letter)
    );

    // The key is free again once its work is gone.
    new(store.insert(spec).await.unwrap());
}

pub async fn s4_redrive_and_purge<S: Store>(store: S) {
    let id = new(store.insert(work("o", "send", 0)).await.unwrap()).id;
    let claim = store
        .claim("o", at(0), at(100), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    assert!(store.finish(id, claim.revision, dead(4)).await.unwrap());
    let letter = store.dead_letters("o", None, 10).await.unwrap().remove(0);

    let redriven = store
        .redrive(letter.id, work("o", "send", 7))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(redriven.id, id);
    assert_eq!((redriven.attempt, redriven.state), (0, WorkState::Waiting));
    let marked = store.dead_letter(letter.id).await.unwrap().unwrap();
    assert_eq!(marked.redriven_as, Some(redriven.id));
    assert_eq!(
        store
            .redrive(letter.id, work("o", "send", 7))
            .await
            .unwrap(),
        None,
        "re-driven twice"
    );
    assert_eq!(store.list("o", None, 10).await.unwrap().len(), 1);

    assert!(store.purge(letter.id).await.unwrap());
    assert!(!store.purge(letter.id).await.unwrap());
    assert_eq!(store.dead_letter(letter.id).await.unwrap(), None);
    assert_eq!(
        store
            .redrive(letter.id, work("o", "send", 7))
            .await
            .unwrap(),
        None
    );
}

pub async fn s13_cancel_keeps_the_row_and_stops_it<S: Store>(store: S) {
    let waiting = new(store.insert(work("o", "a", 0)).await.unwrap()).id;
    let running = new(store.insert(work("o", "a", 0)).await.unwrap()).id;
    let claim = store.claim("o", at(0), at(100), 2).await.unwrap().work;
    let running_claim = claim.iter().find(|r| r.id == running).unwrap().clone();
    let waiting_claim = claim.iter().find(|r| r.id == waiting).unwrap().clone();
    assert!(
        store
            .finish(waiting, waiting_claim.revision, wait(10, 1))
            .await
            .unwrap()
    );

    assert_eq!(
        store.cancel(waiting, at(2)).await.unwrap(),
        Some(WorkState::Waiting)
    );
    assert_eq!(
        store.cancel(running, at(2)).await.unwrap(),
        Some(WorkState::Running)
    );
    assert_eq!(
        store.cancel(running, at(3)).await.unwrap(),
        Some(WorkState::Cancelled)
    );
    assert_eq!(
        store
            .cancel(retry_durable::WorkId(987_654), at(3))
            .await
            .unwrap(),
        None
    );

    for id in [waiting, running] {
        let record = store.get(id).await.unwrap().unwrap();
        assert_eq!(
            (record.state, record.lease_until),
            (WorkState::Cancelled, None)
        );
    }
    assert!(
        store
            .claim("o", at(10_000), at(20_000), 10)
            .await
            .unwrap()
            .work
            .is_empty()
    );
    assert!(
        !store
            .finish(running, running_claim.revision, wait(10, 1))
            .await
            .unwrap()
    );
    assert!(
        !store
            .extend_lease(running, running_claim.revision, at(500), at(4))
            .await
            .unwrap()
    );
    assert_eq!(
        store.next_due("o").await.unwrap(),
        None,
        "cancelled work is never due"
    );
}

pub async fn next_due_is_the_earliest_due_time_or_lease_end<S: Store>(store: S) {
    assert_eq!(store.next_due("o").await.unwrap(), None);
    new(store.insert(work("o", "a", 500)).await.unwrap());
    new(store.insert(work("o", "a", 0)).await.unwrap());
    new(store.insert(work("other", "a", 1)).await.unwrap());
    assert_eq!(store.next_due("o").await.unwrap(), Some(at(0)));
    store.claim("o", at(0), at(300), 1).await.unwrap();
    assert_eq!(store.next_due("o").await.unwrap(), Some(at(300)));
}

pub async fn list_pages_in_id_order_per_owner<S: Store>(store: S) {
    let mut ids = Vec::new();
    for due in 0..5 {
        ids.push(new(store.insert(work("o", "a", due)).await.unwrap()).id);
        new(store.insert(work("p", "a", due)).await.unwrap());
    }
    let first = store.list("o", None, 2).await.unwrap();
    let rest = store.list("o", Some(first[1].id), 10).await.unwrap();
    let listed: Vec<_> = first.iter().chain(&rest).map(|r| r.id).collect();
    assert_eq!(listed, ids);
}

pub async fn a_repeating_schedule_is_rearmed_with_its_attempts_reset<S: Store>(store: S) {
    let mut spec = work("o", "tick", 0);
    spec.timing = Timing::Every {
        interval_ms: 1_000,
        misfire: Misfire::FireOnce,
    };
    let id = new(store.insert(spec).await.unwrap()).id;
    let claim = store
        .claim("o", at(0), at(100), 1)
        .await
        .unwrap()
        .work
        .remove(0);
    let rearm = Finish {
        dead_letter: Some(NewDeadLetter {
            reason: DeadReason::NotRetryable,
            attempts: 1,
            last_error: Some("bad".to_owned()),
            failed_at: at(3),
        }),
        then: NextStep::Wait {
            due_at: at(1_000),
            fire_at: at(1_000),
            attempt: 0,
            last_error: None,
            last_delay_ms: 0,
        },
        now: at(3),
        keep_key_until: None,
        history: Vec::new(),
    };
    assert!(store.finish(id, claim.revision, rearm).await.unwrap());
    let record = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (record.state, record.attempt, record.due_at, record.fire_at),
        (WorkState::Waiting, 0, at(1_000), at(1_000))
    );
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    assert_eq!(
        (letters.len(), letters[0].kind.as_str(), letters[0].fire_at),
        (1, "every", at(0))
    );
}

pub async fn times_and_counts_beyond_the_store_range_are_refused_not_wrapped<S: Store>(store: S) {
    let mut spec = work("o", "a", 0);
    spec.due_at = Timestamp::from_millis(u64::MAX);
    // A store either holds the value exactly or refuses it; it never stores something else.
    match store.insert(spec).await {
        Ok(Inserted::New(record)) => {
            assert_eq!(
                store.get(record.id).await.unwrap().unwrap().due_at,
                Timestamp::from_millis(u64::MAX)
            );
        }
        Ok(Inserted::Existing(_)) => panic!("no key was given"),
        Err(error) => assert!(error.to_string().contains("out of range"), "{error}"),
    }
    let _ = Duration::ZERO;
}

fn ending(record: &WorkRecord, finish: Finish) -> Finished {
    Finished {
        id: record.id,
        revision: record.revision,
        finish,
    }
}

/// Claims the one due item of owner `o` at `now`, leased until `until`.
async fn claim_one<S: Store>(store: &S, now: u64, until: u64) -> WorkRecord {
    let mut claimed = store.claim("o", at(now), at(until), 1).await.unwrap().work;
    assert_eq!(claimed.len(), 1, "one item due at {now}");
    claimed.remove(0)
}

pub async fn s12_a_batch_fences_each_attempt_on_its_own_revision<S: Store>(store: S) {
    let stale = new(store.insert(work("o", "a", 0)).await.unwrap());
    for due in 1..=2 {
        new(store.insert(work("o", "a", due)).await.unwrap());
    }
    let first = claim_one(&store, 0, 10).await;
    assert_eq!(first.id, stale.id);
    let retried = claim_one(&store, 1, 1_000).await;
    let exhausted = claim_one(&store, 2, 1_000).await;
    // The first claim's lease runs out and another worker takes the item over.
    let second = claim_one(&store, 20, 1_000).await;
    assert_eq!((second.id, second.attempt), (stale.id, 2));

    let batch = vec![
        ending(&first, dead(1)),
        ending(&retried, wait(50, 1)),
        ending(&exhausted, dead(1)),
        // The same claim again: the first of the two ends it.
        ending(&retried, wait(60, 1)),
    ];
    let done = store
        .finish_and_claim(batch, "o", at(30), at(1_030), 0)
        .await;
    let answers: Vec<bool> = done.finished.into_iter().map(Result::unwrap).collect();
    assert_eq!(answers, [false, true, true, false]);
    assert!(
        done.claim.unwrap().work.is_empty(),
        "a limit of 0 claims nothing"
    );

    assert_eq!(
        store.get(stale.id).await.unwrap(),
        Some(second),
        "the stale attempt wrote nothing"
    );
    let waiting = store.get(retried.id).await.unwrap().unwrap();
    assert_eq!(
        (
            waiting.state,
            waiting.due_at,
            waiting.attempt,
            waiting.lease_until
        ),
        (WorkState::Waiting, at(50), 1, None)
    );
    assert_eq!(waiting.last_error.as_deref(), Some("boom"));
    assert_eq!(store.get(exhausted.id).await.unwrap(), None);
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    let ids: Vec<_> = letters.iter().map(|d| d.work_id).collect();
    assert_eq!(ids, [exhausted.id], "only the live claim's dead letter");
}

pub async fn s4_dead_letters_in_a_batch_keep_what_happened<S: Store>(store: S) {
    let queued = new(store.insert(work("o", "send", 0)).await.unwrap());
    let mut every = work("o", "tick", 0);
    every.timing = Timing::Every {
        interval_ms: 60_000,
        misfire: Misfire::FireOnce,
    };
    let schedule = new(store.insert(every).await.unwrap());
    let claimed = store.claim("o", at(0), at(100), 10).await.unwrap().work;
    assert_eq!(claimed.len(), 2);
    let (queue_claim, schedule_claim) = if claimed[0].id == queued.id {
        (&claimed[0], &claimed[1])
    } else {
        (&claimed[1], &claimed[0])
    };
    let rearmed = Finish {
        dead_letter: Some(NewDeadLetter {
            reason: DeadReason::NotRetryable,
            attempts: 1,
            last_error: Some("bad request".to_owned()),
            failed_at: at(7),
        }),
        then: NextStep::Wait {
            due_at: at(60_000),
            fire_at: at(60_000),
            attempt: 0,
            last_error: None,
            last_delay_ms: 0,
        },
        now: at(7),
        keep_key_until: None,
        history: Vec::new(),
    };
    let batch = vec![
        ending(queue_claim, dead(3)),
        ending(schedule_claim, rearmed),
    ];
    let done = store.finish_and_claim(batch, "o", at(8), at(108), 5).await;
    let answers: Vec<bool> = done.finished.into_iter().map(Result::unwrap).collect();
    assert_eq!(answers, [true, true]);
    assert!(
        done.claim.unwrap().work.is_empty(),
        "nothing else is due: the schedule waits for its next tick"
    );

    assert_eq!(store.get(queued.id).await.unwrap(), None);
    let next = store.get(schedule.id).await.unwrap().unwrap();
    assert_eq!(
        (next.state, next.due_at, next.fire_at, next.attempt),
        (WorkState::Waiting, at(60_000), at(60_000), 0)
    );
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    assert_eq!(letters.len(), 2);
    let of = |id| {
        letters
            .iter()
            .find(|d| d.work_id == id)
            .expect("a dead letter")
    };
    let queue_letter = of(queued.id);
    assert_eq!(
        (
            queue_letter.reason,
            queue_letter.attempts,
            queue_letter.last_error.as_deref(),
            queue_letter.kind.as_str(),
            queue_letter.payload.as_str(),
            queue_letter.failed_at,
            queue_letter.fire_at,
        ),
        (
            DeadReason::Exhausted,
            3,
            Some("still down"),
            "queue",
            r#"{"n":1}"#,
            at(5),
            at(0)
        )
    );
    assert_eq!(queue_letter.options, queued.options);
    let schedule_letter = of(schedule.id);
    assert_eq!(
        (
            schedule_letter.reason,
            schedule_letter.attempts,
            schedule_letter.last_error.as_deref(),
            schedule_letter.kind.as_str(),
            schedule_letter.failed_at,
        ),
        (
            DeadReason::NotRetryable,
            1,
            Some("bad request"),
            "every",
            at(7)
        )
    );
}

pub async fn p2_an_empty_batch_claims_as_claim_does<S: Store>(store: S) {
    let late = new(store.insert(work("o", "a", 30)).await.unwrap());
    let early = new(store.insert(work("o", "a", 10)).await.unwrap());
    new(store.insert(work("o", "a", 1_000)).await.unwrap());

    let nothing = store
        .finish_and_claim(Vec::new(), "o", at(100), at(5_000), 0)
        .await;
    assert!(nothing.finished.is_empty());
    assert!(nothing.claim.unwrap().work.is_empty());
    assert_eq!(
        store.get(early.id).await.unwrap().unwrap().state,
        WorkState::Waiting,
        "a limit of 0 claims nothing"
    );

    let done = store
        .finish_and_claim(Vec::new(), "o", at(100), at(5_000), 10)
        .await;
    assert!(done.finished.is_empty());
    let claimed = done.claim.unwrap().work;
    assert_eq!(
        claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        [early.id, late.id]
    );
    for record in &claimed {
        assert_eq!(
            (record.state, record.attempt, record.lease_until),
            (WorkState::Running, 1, Some(at(5_000)))
        );
        assert_eq!(store.get(record.id).await.unwrap().as_ref(), Some(record));
    }
}

pub async fn p2_a_batch_and_the_next_claim_in_one_call<S: Store>(store: S) {
    let first = new(store.insert(work("o", "a", 0)).await.unwrap());
    let succeeded = new(store.insert(work("o", "a", 0)).await.unwrap());
    let second = new(store.insert(work("o", "a", 5)).await.unwrap());
    let third = new(store.insert(work("o", "a", 6)).await.unwrap());
    let running = store.claim("o", at(0), at(10), 2).await.unwrap().work;
    let ids: Vec<_> = running.iter().map(|r| r.id).collect();
    assert_eq!(ids, [first.id, succeeded.id]);
    let remove = Finish {
        dead_letter: None,
        then: NextStep::Remove,
        now: at(1),
        keep_key_until: None,
        history: Vec::new(),
    };

    // Its lease is over by now, so the claim alone would take it back; the retry that the
    // call writes is due at once. The call may claim it again, but only as a new claim —
    // never under the claim that just ended.
    let batch = vec![
        ending(&running[0], wait(15, 1)),
        ending(&running[1], remove),
    ];
    let done = store
        .finish_and_claim(batch, "o", at(20), at(1_020), 3)
        .await;
    assert!(
        done.finished
            .into_iter()
            .map(Result::unwrap)
            .eq([true, true])
    );
    assert_eq!(store.get(succeeded.id).await.unwrap(), None);
    let claimed = done.claim.unwrap().work;
    let mut ids: Vec<_> = claimed.iter().map(|r| r.id).collect();
    assert!(ids.starts_with(&[second.id, third.id]), "{claimed:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        claimed.len(),
        "an item claimed twice: {claimed:?}"
    );
    for record in &claimed {
        assert_eq!(record.state, WorkState::Running);
        assert_eq!(store.get(record.id).await.unwrap().as_ref(), Some(record));
    }
    match claimed.iter().find(|r| r.id == first.id) {
        Some(again) => {
            assert_eq!(again.attempt, 2, "the retry is the next attempt");
            assert!(again.revision > running[0].revision);
        }
        None => {
            let waiting = store.get(first.id).await.unwrap().unwrap();
            assert_eq!(
                (waiting.state, waiting.due_at, waiting.attempt),
                (WorkState::Waiting, at(15), 1)
            );
        }
    }
}

pub async fn p5_a_value_out_of_range_refuses_its_attempt_alone<S: Store>(store: S) {
    new(store.insert(work("o", "a", 0)).await.unwrap());
    let near = new(store.insert(work("o", "a", 1)).await.unwrap());
    let far = claim_one(&store, 0, 100).await;
    let near_claim = claim_one(&store, 1, 100).await;
    assert_eq!(near_claim.id, near.id);
    let mut never = wait(0, 1);
    if let NextStep::Wait { due_at, .. } = &mut never.then {
        *due_at = Timestamp::from_millis(u64::MAX);
    }
    let batch = vec![ending(&far, never), ending(&near_claim, dead(1))];
    let mut done = store.finish_and_claim(batch, "o", at(2), at(102), 0).await;
    assert!(
        done.finished.remove(1).unwrap(),
        "the other attempt is written"
    );
    assert_eq!(store.get(near.id).await.unwrap(), None);
    // A store holds the value exactly or refuses that attempt; it never stores something else.
    match done.finished.remove(0) {
        Ok(written) => {
            assert!(written);
            assert_eq!(
                store.get(far.id).await.unwrap().unwrap().due_at,
                Timestamp::from_millis(u64::MAX)
            );
        }
        Err(error) => {
            assert!(error.to_string().contains("out of range"), "{error}");
            assert_eq!(store.get(far.id).await.unwrap(), Some(far));
        }
    }
}

pub async fn s14_cancelled_work_no_longer_holds_its_key<S: Store>(store: S) {
    let mut keyed = work("o", "send", 0);
    keyed.key = Some("invoice-7".to_owned());
    let first = new(store.insert(keyed.clone()).await.unwrap());
    assert_eq!(
        store.cancel(first.id, at(1)).await.unwrap(),
        Some(WorkState::Waiting)
    );
    // The same work again is live work, not the cancelled row.
    let second = new(store.insert(keyed.clone()).await.unwrap());
    assert_ne!(second.id, first.id);
    assert_eq!(second.state, WorkState::Waiting);
    let cancelled = store.get(first.id).await.unwrap().unwrap();
    assert_eq!(
        (cancelled.state, cancelled.key.as_deref()),
        (WorkState::Cancelled, Some("invoice-7")),
        "the cancelled row keeps its key for inspection"
    );
    // The live row holds the key again.
    match store.insert(keyed.clone()).await.unwrap() {
        Inserted::Existing(existing) => assert_eq!(existing.id, second.id),
        Inserted::New(record) => panic!("a second live row {} for one key", record.id),
    }
    let claimed = store.claim("o", at(2), at(100), 10).await.unwrap().work;
    assert_eq!(
        claimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        [second.id]
    );
    // A running row holds its key too; cancelled while running, it frees it.
    assert_eq!(
        store.cancel(second.id, at(3)).await.unwrap(),
        Some(WorkState::Running)
    );
    let third = new(store.insert(keyed).await.unwrap());
    assert!(third.id != first.id && third.id != second.id);
}

fn kept(finish: Finish, until_ms: u64) -> Finish {
    Finish {
        keep_key_until: Some(at(until_ms)),
        ..finish
    }
}

fn removed() -> Finish {
    Finish {
        dead_letter: None,
        then: NextStep::Remove,
        now: at(5),
        keep_key_until: None,
        history: Vec::new(),
    }
}

pub async fn s14_a_finished_key_is_kept_until_its_retention_ends<S: Store>(store: S) {
    let mut keyed = work("o", "send", 0);
    keyed.key = Some("invoice-1".to_owned());
    let first = new(store.insert(keyed.clone()).await.unwrap());
    let claimed = claim_one(&store, 0, 100).await;
    assert!(
        store
            .finish(first.id, claimed.revision, kept(removed(), 1_000))
            .await
            .unwrap()
    );
    let done = store.get(first.id).await.unwrap().unwrap();
    assert_eq!(
        (done.state, done.due_at, done.lease_until),
        (WorkState::Succeeded, at(1_000), None)
    );
    assert!(done.revision > claimed.revision);
    assert_eq!(
        store.next_due("o").await.unwrap(),
        None,
        "kept work is never due"
    );
    assert!(
        store
            .claim("o", at(5_000), at(6_000), 10)
            .await
            .unwrap()
            .work
            .is_empty()
    );
    assert_eq!(
        store.cancel(first.id, at(6)).await.unwrap(),
        Some(WorkState::Succeeded),
        "finished work is not cancelled"
    );
    // Inside the retention the key answers with the finished row.
    let mut again = keyed.clone();
    again.created_at = at(999);
    match store.insert(again.clone()).await.unwrap() {
        Inserted::Existing(existing) => assert_eq!(existing, done),
        Inserted::New(record) => panic!("a new row {} inside the key's retention", record.id),
    }
    // The purge leaves it until its retention ends, then deletes it.
    assert_eq!(store.purge_kept_keys("o", at(999), 10).await.unwrap(), 0);
    assert_eq!(store.purge_kept_keys("p", at(1_000), 10).await.unwrap(), 0);
    assert_eq!(store.purge_kept_keys("o", at(1_000), 10).await.unwrap(), 1);
    assert_eq!(store.get(first.id).await.unwrap(), None);
    again.created_at = at(1_000);
    let second = new(store.insert(again).await.unwrap());
    assert_ne!(second.id, first.id);

    // Dead-lettered: kept with its dead letter; after the retention the first insert of its
    // key takes the key, purged or not.
    let mut other = work("o", "send", 0);
    other.key = Some("invoice-2".to_owned());
    let failed = new(store.insert(other.clone()).await.unwrap());
    let claimed = store.claim("o", at(0), at(100), 10).await.unwrap().work;
    let failed_claim = claimed.iter().find(|r| r.id == failed.id).unwrap();
    assert!(
        store
            .finish(failed.id, failed_claim.revision, kept(dead(1), 2_000))
            .await
            .unwrap()
    );
    let dead_row = store.get(failed.id).await.unwrap().unwrap();
    assert_eq!(
        (dead_row.state, dead_row.due_at),
        (WorkState::DeadLettered, at(2_000))
    );
    assert_eq!(store.dead_letters("o", None, 10).await.unwrap().len(), 1);
    other.created_at = at(2_000);
    let replaced = new(store.insert(other).await.unwrap());
    assert_ne!(replaced.id, failed.id);
    assert_eq!(store.get(failed.id).await.unwrap(), None);

    // Without a key there is nothing to keep: the row goes.
    let plain = new(store.insert(work("o", "send", 0)).await.unwrap());
    let claimed = store.claim("o", at(0), at(100), 10).await.unwrap().work;
    let plain_claim = claimed.iter().find(|r| r.id == plain.id).unwrap();
    assert!(
        store
            .finish(plain.id, plain_claim.revision, kept(removed(), 1_000))
            .await
            .unwrap()
    );
    assert_eq!(store.get(plain.id).await.unwrap(), None);
}

pub async fn s14_a_purge_of_kept_keys_is_bounded<S: Store>(store: S) {
    for n in 0..3 {
        let mut keyed = work("o", "send", 0);
        keyed.key = Some(format!("k-{n}"));
        new(store.insert(keyed).await.unwrap());
    }
    let claimed = store.claim("o", at(0), at(100), 10).await.unwrap().work;
    let finished = claimed
        .iter()
        .map(|r| Finished {
            id: r.id,
            revision: r.revision,
            finish: kept(removed(), 10),
        })
        .collect();
    let done = store
        .finish_and_claim(finished, "o", at(5), at(100), 0)
        .await;
    assert!(done.finished.iter().all(|a| matches!(a, Ok(true))));
    for record in &claimed {
        let kept = store.get(record.id).await.unwrap().unwrap();
        assert_eq!(kept.state, WorkState::Succeeded);
    }
    assert_eq!(store.purge_kept_keys("o", at(10), 2).await.unwrap(), 2);
    assert_eq!(store.purge_kept_keys("o", at(10), 2).await.unwrap(), 1);
    assert_eq!(store.purge_kept_keys("o", at(10), 2).await.unwrap(), 0);
    assert!(store.list("o", None, 10).await.unwrap().is_empty());
}

/// S14: a stopping worker releases a lease by moving it to now (`extend_lease` with
/// `until == now`): the item is due at once, its attempt counted. Fenced on the claim: a
/// stale release (the item re-claimed by another worker, or cancelled) changes nothing.
pub async fn s14_a_released_lease_is_due_at_once_and_a_stale_release_does_nothing<S: Store>(
    store: S,
) {
    let id = new(store.insert(work("o", "a", 0)).await.unwrap()).id;
    let first = claim_one(&store, 0, 60_000).await;
    assert!(
        store
            .extend_lease(id, first.revision, at(10), at(10))
            .await
            .unwrap()
    );
    assert_eq!(
        store.next_due("o").await.unwrap(),
        Some(at(10)),
        "not due at once"
    );
    let released = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (released.state, released.attempt, released.lease_until),
        (WorkState::Running, 1, Some(at(10)))
    );
    let second = claim_one(&store, 10, 60_010).await;
    assert_eq!(
        (second.id, second.attempt),
        (id, 2),
        "the released attempt counts"
    );

    // The first worker releases again (late): the second claim keeps its lease.
    assert!(
        !store
            .extend_lease(id, first.revision, at(20), at(20))
            .await
            .unwrap()
    );
    assert_eq!(store.get(id).await.unwrap(), Some(second.clone()));
    assert!(
        nothing_due(&store, 20).await,
        "a stale release freed another worker's claim"
    );

    // Cancelled work is not made due by a release.
    store.cancel(id, at(30)).await.unwrap();
    assert!(
        !store
            .extend_lease(id, second.revision, at(30), at(30))
            .await
            .unwrap()
    );
    assert_eq!(
        store.get(id).await.unwrap().map(|r| r.state),
        Some(WorkState::Cancelled)
    );
    assert!(nothing_due(&store, 30).await);
}

/// S17: a worker that batched its completions while its lease ran out cannot complete an item
/// that another worker re-claimed meanwhile, not even with a claim in the same call; the
/// batch's other items are written, and the worker learns which were refused. The item's new
/// owner still completes it.
pub async fn s17_a_stale_batch_cannot_complete_a_reclaimed_item<S: Store>(store: S) {
    let taken = new(store.insert(work("o", "a", 0)).await.unwrap());
    let kept = new(store.insert(work("o", "a", 1)).await.unwrap());
    let later = new(store.insert(work("o", "a", 500)).await.unwrap());
    let first = claim_one(&store, 0, 10).await;
    assert_eq!(first.id, taken.id);
    let mine = claim_one(&store, 1, 1_000).await;
    assert_eq!(mine.id, kept.id);
    // The lease of `first` runs out while its end waits in the batch: another worker takes it.
    let theirs = claim_one(&store, 20, 2_000).await;
    assert_eq!((theirs.id, theirs.attempt), (taken.id, 2));

    let batch = vec![ending(&first, dead(1)), ending(&mine, dead(1))];
    let done = store
        .finish_and_claim(batch, "o", at(600), at(1_600), 5)
        .await;
    let answers: Vec<bool> = done.finished.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        answers,
        [false, true],
        "the stale end refused, the live one written"
    );
    let claimed: Vec<_> = done.claim.unwrap().work.iter().map(|r| r.id).collect();
    assert_eq!(
        claimed,
        [later.id],
        "the re-claimed item is not claimed again under its live lease"
    );
    assert_eq!(
        store.get(taken.id).await.unwrap(),
        Some(theirs.clone()),
        "the stale batch wrote nothing to the re-claimed item"
    );
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    let ids: Vec<_> = letters.iter().map(|d| d.work_id).collect();
    assert_eq!(ids, [kept.id], "no dead letter for the refused end");

    // The same stale batch again, alone: still refused.
    let again = store
        .finish_and_claim(vec![ending(&first, dead(1))], "o", at(700), at(1_700), 0)
        .await;
    let again: Vec<bool> = again.finished.into_iter().map(Result::unwrap).collect();
    assert_eq!(again, [false]);
    let done = store
        .finish_and_claim(vec![ending(&theirs, dead(2))], "o", at(800), at(1_800), 0)
        .await;
    let done: Vec<bool> = done.finished.into_iter().map(Result::unwrap).collect();
    assert_eq!(done, [true], "the live claim completes it");
    assert_eq!(store.get(taken.id).await.unwrap(), None);
}

/// S17: a claim given back unstarted (a stopping worker's local queue) leaves the item waiting,
/// due at once, with its attempt count as before the claim, under a new revision; fenced like a
/// release, so a stale one changes nothing.
pub async fn s17_an_unstarted_claim_is_given_back_with_its_attempt<S: Store>(store: S) {
    let id = new(store.insert(work("o", "a", 0)).await.unwrap()).id;
    let first = claim_one(&store, 0, 60_000).await;
    assert_eq!(first.attempt, 1);
    assert!(store.unclaim(id, first.revision, at(10)).await.unwrap());
    let given_back = store.get(id).await.unwrap().unwrap();
    assert_eq!(
        (given_back.state, given_back.attempt, given_back.lease_until),
        (WorkState::Waiting, 0, None),
        "the attempt is given back"
    );
    assert_ne!(given_back.revision, first.revision, "a new revision");
    assert_eq!(
        store.next_due("o").await.unwrap(),
        Some(at(0)),
        "due at once, in its old place"
    );
    // The old claim is gone: it can neither give back nor finish again.
    assert!(!store.unclaim(id, first.revision, at(11)).await.unwrap());
    assert!(!store.finish(id, first.revision, dead(1)).await.unwrap());
    let second = claim_one(&store, 10, 60_010).await;
    assert_eq!(
        (second.id, second.attempt),
        (id, 1),
        "the next claim is attempt 1 again"
    );
    // A stale give-back does not free the new claim.
    assert!(!store.unclaim(id, first.revision, at(20)).await.unwrap());
    assert!(nothing_due(&store, 20).await);
    assert_eq!(store.get(id).await.unwrap(), Some(second));
}

/// Whether a claim at `now` finds nothing.
async fn nothing_due<S: Store>(store: &S, now: u64) -> bool {
    let claim = store
        .claim("o", at(now), at(now + 60_000), 1)
        .await
        .unwrap();
    claim.work.is_empty() && claim.corrupt.is_empty()
}

fn attempt_entry(attempt: u32, outcome: AttemptOutcome) -> AttemptRecord {
    AttemptRecord {
        attempt,
        started_at: at(u64::from(attempt) * 10),
        ended_at: at(u64::from(attempt) * 10 + 3),
        outcome,
        error: Some(format!("failure {attempt} <b>")),
        wait: (outcome == AttemptOutcome::Retrying).then_some(Wait {
            delay: Duration::from_millis(250),
            why: WaitReason::ServerHint,
        }),
    }
}

/// H (issue 30): the history given with an attempt's end is written with it, through
/// `finish` and through a batch, and copied to the dead letter that ends the run.
pub async fn h_history_is_written_with_each_end_and_kept_on_the_dead_letter<S: Store>(store: S) {
    let queued = new(store.insert(work("o", "a", 0)).await.unwrap());
    assert!(queued.history.is_empty(), "new work has no history");
    let claimed = claim_one(&store, 0, 100).await;
    let first = vec![attempt_entry(1, AttemptOutcome::Retrying)];
    let mut retry = wait(2, 1);
    retry.history = first.clone();
    assert!(
        store
            .finish(claimed.id, claimed.revision, retry)
            .await
            .unwrap()
    );
    let read = store.get(queued.id).await.unwrap().unwrap();
    assert_eq!(read.history(), first.as_slice());

    let claimed = claim_one(&store, 2, 100).await;
    assert_eq!(claimed.history, first, "a claim returns the history");
    let second = vec![first[0].clone(), attempt_entry(2, AttemptOutcome::Retrying)];
    let mut retry = wait(4, 2);
    retry.history = second.clone();
    let done = store
        .finish_and_claim(vec![ending(&claimed, retry)], "o", at(3), at(100), 0)
        .await;
    assert!(matches!(done.finished[..], [Ok(true)]));
    let read = store.get(queued.id).await.unwrap().unwrap();
    assert_eq!(read.history, second, "a batch writes the history too");

    let claimed = claim_one(&store, 4, 100).await;
    let last = vec![
        second[0].clone(),
        second[1].clone(),
        attempt_entry(3, AttemptOutcome::DeadLettered),
    ];
    let mut end = dead(3);
    end.history = last.clone();
    let done = store
        .finish_and_claim(vec![ending(&claimed, end)], "o", at(5), at(100), 0)
        .await;
    assert!(matches!(done.finished[..], [Ok(true)]));
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].history(),
        last.as_slice(),
        "the dead letter says why it died"
    );
    let one = store.dead_letter(letters[0].id).await.unwrap().unwrap();
    assert_eq!(one.history, last);

    // Through `finish` alone, a dead letter keeps it as well, and so does a row kept for its
    // key.
    let mut keyed = work("o", "b", 10);
    keyed.key = Some("k".to_owned());
    let keyed = new(store.insert(keyed).await.unwrap());
    let claimed = claim_one(&store, 10, 100).await;
    assert_eq!(claimed.id, keyed.id);
    let mut end = kept(dead(1), 1_000);
    end.history = vec![attempt_entry(1, AttemptOutcome::DeadLettered)];
    assert!(
        store
            .finish(claimed.id, claimed.revision, end.clone())
            .await
            .unwrap()
    );
    let read = store.get(keyed.id).await.unwrap().unwrap();
    assert_eq!(
        (read.state, &read.history),
        (WorkState::DeadLettered, &end.history)
    );
    let letters = store.dead_letters("o", None, 10).await.unwrap();
    assert_eq!(letters[1].history, end.history);

    // Re-driven work starts a history of its own; the dead letter keeps the old one.
    let again = store
        .redrive(letters[0].id, work("o", "a", 20))
        .await
        .unwrap()
        .unwrap();
    assert!(again.history.is_empty());
    assert_eq!(
        store
            .dead_letter(letters[0].id)
            .await
            .unwrap()
            .unwrap()
            .history,
        last
    );
}

/// H (issue 30): an end whose claim was lost writes no history, through `finish` or a batch.
pub async fn h_a_stale_end_writes_no_history<S: Store>(store: S) {
    let queued = new(store.insert(work("o", "a", 0)).await.unwrap());
    let stale = claim_one(&store, 0, 10).await;
    let current = claim_one(&store, 10, 100).await;
    assert_ne!(stale.revision, current.revision);
    let mut retry = wait(20, 1);
    retry.history = vec![attempt_entry(1, AttemptOutcome::Retrying)];
    assert!(
        !store
            .finish(stale.id, stale.revision, retry.clone())
            .await
            .unwrap()
    );
    let mut end = dead(1);
    end.history = retry.history.clone();
    assert!(
        !store
            .finish(stale.id, stale.revision, end.clone())
            .await
            .unwrap()
    );
    let done = store
        .finish_and_claim(
            vec![ending(&stale, retry), ending(&stale, end)],
            "o",
            at(11),
            at(100),
            0,
        )
        .await;
    assert!(
        done.finished.iter().all(|r| matches!(r, Ok(false))),
        "{:?}",
        done.finished
    );
    let read = store.get(queued.id).await.unwrap().unwrap();
    assert!(read.history.is_empty(), "{:?}", read.history);
    assert!(store.dead_letters("o", None, 10).await.unwrap().is_empty());
}

/// H (issue 30): releasing an abandoned attempt's lease writes the item's history with it;
/// a stale release writes nothing.
pub async fn h_a_released_lease_keeps_its_history_and_a_stale_release_writes_none<S: Store>(
    store: S,
) {
    let queued = new(store.insert(work("o", "a", 0)).await.unwrap());
    let stale = claim_one(&store, 0, 10).await;
    let current = claim_one(&store, 10, 100).await;
    let abandoned = vec![attempt_entry(2, AttemptOutcome::Abandoned)];
    assert!(
        !store
            .release_lease(stale.id, stale.revision, at(20), abandoned.clone())
            .await
            .unwrap()
    );
    let read = store.get(queued.id).await.unwrap().unwrap();
    assert!(read.history.is_empty(), "{:?}", read.history);
    assert_eq!(read.lease_until, Some(at(100)));

    assert!(
        store
            .release_lease(current.id, current.revision, at(20), abandoned.clone())
            .await
            .unwrap()
    );
    let read = store.get(queued.id).await.unwrap().unwrap();
    assert_eq!(
        (read.state, read.lease_until, read.attempt),
        (WorkState::Running, Some(at(20)), 2)
    );
    assert_eq!(read.history, abandoned);
    assert_eq!(store.next_due("o").await.unwrap(), Some(at(20)));
    let again = claim_one(&store, 20, 200).await;
    assert_eq!((again.attempt, again.history), (3, abandoned));
}

/// Items of a batch, `{"n":i}` each, created at 2 s (after the retention of the kept key below).
fn batch_of(count: usize) -> Vec<NewWork> {
    (0..count)
        .map(|i| NewWork {
            payload: format!(r#"{{"n":{i}}}"#),
            created_at: at(2_000),
            ..work("o", "send", 0)
        })
        .collect()
}

fn record_of(inserted: &Inserted) -> &WorkRecord {
    match inserted {
        Inserted::New(record) | Inserted::Existing(record) => record,
    }
}

fn keyed(mut work: NewWork, key: &str) -> NewWork {
    work.key = Some(key.to_owned());
    work
}

/// Issue 31 (S14): a batch answers as `insert` of its items one after another would, whatever
/// its size — 12,000 items, more than one statement's worth on PostgreSQL (5,000 rows) — with
/// ids in the batch's order: nothing for an empty batch; a key repeated in the middle (in the
/// same or a later chunk) answers with the first item that used it; a key held by live work
/// answers with it; a key whose kept row's retention is over is taken over, in its place in
/// the order; a repeated key with other work refuses the whole batch, naming the later item.
pub async fn s14_a_batch_of_any_size_answers_item_by_item_in_order<S: Store>(store: S) {
    match store.insert_many(Vec::new()).await.unwrap() {
        Batch::Written(written) => assert!(written.is_empty()),
        Batch::Conflict { index, .. } => panic!("an empty batch conflicted at {index}"),
    }
    assert!(store.list("o", None, 10).await.unwrap().records.is_empty());

    let live = new(store
        .insert(keyed(work("o", "send", 0), "live"))
        .await
        .unwrap());
    let old = new(store
        .insert(keyed(work("o", "send", 0), "kept"))
        .await
        .unwrap());
    let claimed = claim_one(&store, 0, 100).await;
    assert_eq!(claimed.id, live.id);
    let claimed_old = claim_one(&store, 0, 100).await;
    assert!(
        store
            .finish(old.id, claimed_old.revision, kept(removed(), 1_000))
            .await
            .unwrap()
    );

    let mut batch = batch_of(12_000);
    batch[3] = keyed(work("o", "send", 0), "live");
    batch[4_999] = keyed(batch[4_999].clone(), "edge");
    batch[5_000] = keyed(batch[4_999].clone(), "edge");
    batch[6_000] = keyed(batch[6_000].clone(), "kept");
    batch[7_000] = keyed(batch[7_000].clone(), "mid");
    batch[7_001] = keyed(batch[7_000].clone(), "mid");
    let Batch::Written(written) = store.insert_many(batch).await.unwrap() else {
        panic!("a batch of one work per key conflicted");
    };
    assert_eq!(written.len(), 12_000);
    let existing = |i: usize| match &written[i] {
        Inserted::Existing(record) => record.clone(),
        Inserted::New(record) => panic!("item {i} wrote row {}", record.id),
    };
    assert_eq!(existing(3).id, live.id);
    assert_eq!(existing(3).state, WorkState::Running);
    assert_eq!(existing(5_000).id, record_of(&written[4_999]).id);
    assert_eq!(existing(7_001).id, record_of(&written[7_000]).id);
    let mut previous = None;
    for (i, answer) in written.iter().enumerate() {
        if let Inserted::New(record) = answer {
            assert_eq!(record.payload, format!(r#"{{"n":{i}}}"#), "item {i}");
            assert_eq!((record.state, record.attempt), (WorkState::Waiting, 0));
            assert!(previous < Some(record.id), "item {i}: ids out of order");
            previous = Some(record.id);
        }
    }
    let taken_over = record_of(&written[6_000]);
    assert!(matches!(written[6_000], Inserted::New(_)));
    assert_eq!(taken_over.key.as_deref(), Some("kept"));
    assert_eq!(store.get(old.id).await.unwrap(), None);
    assert_eq!(
        store.get(taken_over.id).await.unwrap().as_ref(),
        Some(taken_over)
    );
    let stored = store.list("o", None, 20_000).await.unwrap().records;
    assert_eq!(stored.len(), 1 + 12_000 - 3);

    // The same key for other work, in two chunks: refused at the later item, nothing written.
    let mut batch = batch_of(12_000);
    batch[2_000] = keyed(batch[2_000].clone(), "twice");
    batch[11_500] = keyed(batch[11_500].clone(), "twice");
    match store.insert_many(batch).await.unwrap() {
        Batch::Conflict { index, existing } => {
            assert_eq!(index, 11_500);
            assert_eq!(existing.payload, r#"{"n":2000}"#);
        }
        Batch::Written(_) => panic!("a key used by two works was written"),
    }
    // A key of live work, for other work, in the middle of a small batch.
    let mut batch = batch_of(4);
    batch[2] = keyed(batch[2].clone(), "live");
    match store.insert_many(batch).await.unwrap() {
        Batch::Conflict { index, existing } => assert_eq!((index, existing.id), (2, live.id)),
        Batch::Written(_) => panic!("a key held by other work was written"),
    }
    assert_eq!(store.list("o", None, 20_000).await.unwrap().records, stored);
}

/// One `#[tokio::test]` per case, each on a fresh store from `$fresh` (an expression that
/// evaluates to `(store, guard)`).
#[macro_export]
macro_rules! conformance_suite {
    ($fresh:expr) => {
        $crate::conformance_suite!(@cases $fresh;
            p1_inserted_work_reads_back_as_written,
            s9_a_used_key_returns_the_existing_row_and_writes_nothing,
            p2_claim_takes_only_due_work_oldest_first,
            p2_claim_respects_its_limit,
            p2_concurrent_claims_never_share_an_item,
            s12_an_expired_lease_is_claimed_again_and_fences_the_old_claim,
            s14_a_released_lease_is_due_at_once_and_a_stale_release_does_nothing,
            s5_a_retry_waits_as_a_row,
            s4_a_dead_letter_keeps_what_happened,
            s4_redrive_and_purge,
            s13_cancel_keeps_the_row_and_stops_it,
            next_due_is_the_earliest_due_time_or_lease_end,
            list_pages_in_id_order_per_owner,
            a_repeating_schedule_is_rearmed_with_its_attempts_reset,
            times_and_counts_beyond_the_store_range_are_refused_not_wrapped,
            s12_a_batch_fences_each_attempt_on_its_own_revision,
            s4_dead_letters_in_a_batch_keep_what_happened,
            p2_an_empty_batch_claims_as_claim_does,
            p2_a_batch_and_the_next_claim_in_one_call,
            p5_a_value_out_of_range_refuses_its_attempt_alone,
            s14_cancelled_work_no_longer_holds_its_key,
            s14_a_finished_key_is_kept_until_its_retention_ends,
            s14_a_purge_of_kept_keys_is_bounded,
            h_history_is_written_with_each_end_and_kept_on_the_dead_letter,
            h_a_stale_end_writes_no_history,
            h_a_released_lease_keeps_its_history_and_a_stale_release_writes_none,
            v3_work_is_counted_by_state_per_owner,
            s17_a_stale_batch_cannot_complete_a_reclaimed_item,
            s17_an_unstarted_claim_is_given_back_with_its_attempt,
            s14_a_batch_of_any_size_answers_item_by_item_in_order,
        );
    };
    (@cases $fresh:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (store, _guard) = $fresh;
                conformance::$case(store).await;
            }
        )*
    };
}
