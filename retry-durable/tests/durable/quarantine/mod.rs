//! Corrupt rows are quarantined (S15, P5): a row that fails its checks when a worker claims it
//! is never run, rewritten or deleted by the worker; it is set apart once, reported once by id
//! with what is wrong, listed, and can be repaired or purged. Written once against a
//! [`Tamper`] — a backend's own way to damage a row behind the store's back (SQL through a
//! connection of the test's own; `MemoryStore::overwrite`) — and run on every backend by
//! `quarantine_suite!(fresh_expression)`, where the expression yields `(store, tamper)`.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_durable::{
    Event, EventKind, Jobs, JobsBuilder, Released, Store, StoreError, When, WorkId, WorkOptions,
};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;

/// 2026-01-05T00:00:00Z.
pub const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);

/// A damage done to a row behind the store's back, or its repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A waiting row that holds a lease (an impossible state).
    WaitingWithLease,
    /// Options that are not JSON (on memory, options that are not resolved).
    OptionsNotJson,
    /// Options as they were written.
    OptionsFixed,
    /// A revision of -1 (on memory, 0: below the first).
    RevisionMinusOne,
    /// An attempt count beyond `u32` (on memory, `u32::MAX`, which a claim cannot count past).
    AttemptBeyondU32,
    /// `due_at = i64::MIN` (SQL stores only).
    DueAtMin,
}

/// The SQL assignment that makes `change` (the same columns on SQLite and PostgreSQL).
pub fn assignment(change: Change) -> String {
    match change {
        Change::WaitingWithLease => "lease_until = due_at + 1000".to_owned(),
        Change::OptionsNotJson => "options = 'not json'".to_owned(),
        Change::OptionsFixed => format!(
            "options = '{}'",
            serde_json::to_string(&retry_toolkit::RetryOptions::BUILTIN).unwrap()
        ),
        Change::RevisionMinusOne => "revision = -1".to_owned(),
        Change::AttemptBeyondU32 => "attempt = 5000000000".to_owned(),
        Change::DueAtMin => format!("due_at = {}", i64::MIN),
    }
}

/// A backend's way to change a row without the store.
pub trait Tamper: Send + Sync {
    /// Applies `change` to the row `id`.
    fn tamper(&self, id: WorkId, change: Change) -> impl Future<Output = ()> + Send;
}

/// A handler's calls, counted.
#[derive(Clone, Default)]
pub struct Calls(Arc<AtomicU32>);

impl Calls {
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Every event.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    pub fn quarantined(&self) -> Vec<(WorkId, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match &e.what {
                EventKind::Quarantined { reason } => Some((e.id, reason.clone())),
                _ => None,
            })
            .collect()
    }
}

pub fn jobs<S: Store>(store: S, clock: &MockClock, calls: &Calls, log: &Log) -> Jobs<S, MockClock> {
    let counted = Arc::clone(&calls.0);
    let events = Arc::clone(&log.0);
    let builder: JobsBuilder<S, MockClock> = Jobs::builder(store)
        .owner("test")
        .clock(clock.clone())
        .starting_at(MONDAY)
        .seed(7)
        .lease(Duration::from_secs(30))
        .handler("count", move |_: u32, _ctx| {
            counted.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(()))
        })
        .subscribe(move |event| events.lock().unwrap().push(event.clone()));
    builder.build().unwrap()
}

/// Runs what is due now, then again after the lease of anything claimed has long ended.
async fn run_twice<S: Store>(jobs: &Jobs<S, MockClock>, clock: &MockClock) -> usize {
    let first = jobs.run_due().await.unwrap();
    clock.advance(Duration::from_secs(120));
    first + jobs.run_due().await.unwrap()
}

/// A row damaged into `change` is not run, is quarantined once with a reason that contains
/// `said`, leaves the due set, and no dead letter is written for it.
async fn quarantined_once<S: Store, T: Tamper>(
    store: S,
    tamper: &T,
    change: Change,
    said: &str,
) -> (Jobs<S, MockClock>, MockClock, Calls, WorkId) {
    let (clock, calls, log) = (MockClock::new(), Calls::default(), Log::default());
    let jobs = jobs(store, &clock, &calls, &log);
    let bad = jobs
        .schedule(When::Now, "count", &1_u32, WorkOptions::new())
        .await
        .unwrap();
    let good = jobs
        .schedule(When::Now, "count", &2_u32, WorkOptions::new())
        .await
        .unwrap();
    tamper.tamper(bad.id, change).await;

    assert_eq!(run_twice(&jobs, &clock).await, 1, "only the good row runs");
    assert_eq!(calls.get(), 1, "the corrupt row's handler was called");
    assert_eq!(
        jobs.get(good.id).await.unwrap(),
        None,
        "the good row ran and is gone"
    );
    let reported = log.quarantined();
    assert_eq!(reported.len(), 1, "reported once: {reported:?}");
    assert_eq!(reported[0].0, bad.id);
    assert!(
        reported[0].1.contains(said),
        "{change:?}: {}",
        reported[0].1
    );

    let listed = jobs.quarantined().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].id, &listed[0].reason), (bad.id, &reported[0].1));
    assert_eq!(jobs.next_due().await.unwrap(), None, "still in the due set");
    assert!(
        jobs.dead_letters().await.unwrap().is_empty(),
        "dead-lettered"
    );
    match jobs.get(bad.id).await {
        Err(StoreError::Corrupt { id, reason, .. }) => {
            assert_eq!((id, &reason), (bad.id.0, &reported[0].1));
        }
        other => panic!("a quarantined row read back as {other:?}"),
    }

    // Later claims neither take it nor report it again.
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(jobs.run_due().await.unwrap(), 0);
    assert_eq!(log.quarantined().len(), 1);
    assert_eq!(calls.get(), 1);
    (jobs, clock, calls, bad.id)
}

pub async fn s15_a_waiting_row_with_a_lease_is_never_run<S: Store, T: Tamper>(
    (store, tamper): (S, T),
) {
    let (jobs, _clock, calls, bad) = quarantined_once(
        store,
        &tamper,
        Change::WaitingWithLease,
        "waiting with a lease",
    )
    .await;
    // Nothing to fix by hand: quarantining dropped the impossible lease, so the row passes.
    match jobs.repair(bad).await.unwrap() {
        Released::Waiting(record) => {
            assert_eq!(record.attempt, 0, "the claim's attempt was given back");
            assert_eq!(record.lease_until, None);
        }
        other => panic!("repair: {other:?}"),
    }
    assert!(jobs.quarantined().await.unwrap().is_empty());
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(calls.get(), 2, "the repaired row runs");
}

pub async fn s15_options_that_do_not_parse_are_quarantined_once_and_repaired<
    S: Store,
    T: Tamper,
>(
    (store, tamper): (S, T),
) {
    let (jobs, _clock, calls, bad) =
        quarantined_once(store, &tamper, Change::OptionsNotJson, "options").await;
    // Not fixed yet: it stays quarantined.
    match jobs.repair(bad).await.unwrap() {
        Released::StillCorrupt(reason) => assert!(reason.contains("options"), "{reason}"),
        other => panic!("repair of an unfixed row: {other:?}"),
    }
    assert_eq!(jobs.quarantined().await.unwrap().len(), 1);
    assert_eq!(jobs.run_due().await.unwrap(), 0);

    tamper.tamper(bad, Change::OptionsFixed).await;
    match jobs.repair(bad).await.unwrap() {
        Released::Waiting(record) => assert_eq!(record.attempt, 0),
        other => panic!("repair of a fixed row: {other:?}"),
    }
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    assert_eq!(calls.get(), 2, "the repaired row runs");
    assert_eq!(jobs.repair(bad).await.unwrap(), Released::NotQuarantined);
}

pub async fn s15_a_revision_out_of_range_is_quarantined<S: Store, T: Tamper>(
    (store, tamper): (S, T),
) {
    let (jobs, ..) = quarantined_once(store, &tamper, Change::RevisionMinusOne, "revision").await;
    assert_eq!(jobs.quarantined().await.unwrap().len(), 1);
}

pub async fn s15_an_attempt_beyond_u32_is_quarantined_not_dead_lettered<S: Store, T: Tamper>(
    (store, tamper): (S, T),
) {
    let (jobs, ..) = quarantined_once(store, &tamper, Change::AttemptBeyondU32, "attempt").await;
    assert!(jobs.dead_letters().await.unwrap().is_empty());
}

pub async fn s15_a_quarantined_row_can_be_purged<S: Store, T: Tamper>((store, tamper): (S, T)) {
    let (jobs, _clock, _calls, bad) =
        quarantined_once(store, &tamper, Change::OptionsNotJson, "options").await;
    let other = jobs
        .schedule(When::Now, "count", &3_u32, WorkOptions::new())
        .await
        .unwrap();
    assert!(
        !jobs.purge_quarantined(other.id).await.unwrap(),
        "purged a row that is not quarantined"
    );
    assert!(jobs.purge_quarantined(bad).await.unwrap());
    assert!(!jobs.purge_quarantined(bad).await.unwrap());
    assert!(jobs.quarantined().await.unwrap().is_empty());
    assert_eq!(jobs.get(bad).await.unwrap(), None);
    assert!(
        jobs.get(other.id).await.unwrap().is_some(),
        "the other row went too"
    );
}

pub async fn s15_a_listing_names_a_bad_row_and_returns_the_good_ones<S: Store, T: Tamper>(
    (store, tamper): (S, T),
) {
    let (clock, calls, log) = (MockClock::new(), Calls::default(), Log::default());
    let jobs = jobs(store, &clock, &calls, &log);
    let mut ids = Vec::new();
    for n in 0..3_u32 {
        ids.push(
            jobs.schedule(When::Now, "count", &n, WorkOptions::new())
                .await
                .unwrap()
                .id,
        );
    }
    tamper.tamper(ids[1], Change::OptionsNotJson).await;
    let listed = jobs.list().await.unwrap();
    let good: Vec<WorkId> = listed.iter().map(|r| r.id).collect();
    assert_eq!(good, [ids[0], ids[2]]);
    assert_eq!(listed.corrupt.len(), 1, "{listed:?}");
    assert_eq!(listed.corrupt[0].id, ids[1]);
    assert!(listed.corrupt[0].problem.contains("options"), "{listed:?}");

    // Once quarantined, it is still listed as bad, with its reason.
    jobs.run_due().await.unwrap();
    let listed = jobs.list().await.unwrap();
    assert!(listed.records.is_empty(), "{listed:?}");
    assert_eq!(listed.corrupt.len(), 1, "{listed:?}");
    assert_eq!(listed.corrupt[0].id, ids[1]);
}

/// SQL stores only: memory keeps times unsigned.
pub async fn s15_next_due_at_i64_min_is_due_now_and_the_claim_names_the_row<S: Store, T: Tamper>(
    (store, tamper): (S, T),
) {
    let (clock, calls, log) = (MockClock::new(), Calls::default(), Log::default());
    let jobs = jobs(store, &clock, &calls, &log);
    let hour = Duration::from_secs(3_600);
    let bad = jobs
        .schedule(
            retry_durable::When::after(hour),
            "count",
            &1_u32,
            WorkOptions::new(),
        )
        .await
        .unwrap();
    let good = jobs
        .schedule(
            retry_durable::When::after(2 * hour),
            "count",
            &2_u32,
            WorkOptions::new(),
        )
        .await
        .unwrap();
    tamper.tamper(bad.id, Change::DueAtMin).await;
    // Used to fail with "negative time" and no row named; now the row is due now.
    assert_eq!(
        jobs.next_due().await.unwrap(),
        Some(Timestamp::from_millis(0))
    );
    let listed = jobs.list().await.unwrap();
    assert_eq!(listed.corrupt.len(), 1, "{listed:?}");
    assert_eq!(listed.corrupt[0].id, bad.id);
    assert!(
        listed.corrupt[0].problem.contains("negative time"),
        "{listed:?}"
    );
    assert_eq!(listed.records.len(), 1);

    assert_eq!(jobs.run_due().await.unwrap(), 0);
    assert_eq!(calls.get(), 0);
    let reported = log.quarantined();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].0, bad.id);
    assert!(reported[0].1.contains("negative time"), "{}", reported[0].1);
    assert_eq!(jobs.next_due().await.unwrap(), Some(good.due_at));
}

/// One `#[tokio::test]` per case, each on a fresh `(store, tamper)` from `$fresh`.
#[macro_export]
macro_rules! quarantine_suite {
    (sql $fresh:expr) => {
        $crate::quarantine_suite!($fresh);
        $crate::quarantine_suite!(@cases $fresh;
            s15_next_due_at_i64_min_is_due_now_and_the_claim_names_the_row,
        );
    };
    ($fresh:expr) => {
        $crate::quarantine_suite!(@cases $fresh;
            s15_a_listing_names_a_bad_row_and_returns_the_good_ones,
            s15_a_waiting_row_with_a_lease_is_never_run,
            s15_options_that_do_not_parse_are_quarantined_once_and_repaired,
            s15_a_revision_out_of_range_is_quarantined,
            s15_an_attempt_beyond_u32_is_quarantined_not_dead_lettered,
            s15_a_quarantined_row_can_be_purged,
        );
    };
    (@cases $fresh:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                quarantine::$case($fresh).await;
            }
        )*
    };
}
