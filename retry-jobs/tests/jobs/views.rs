//! The views as a library, over any store (here the memory store, and a SQLite file where
//! rows are read and changed by id): paging across many reads of the store, the views' own
//! arguments, and reads and actions kept to one owner (what the dashboard asks for).

use crate::support;

use std::time::Duration;

use retry_durable::{
    Jobs, MemoryStore, SqliteStore, Store, When, WorkFilter, WorkId, WorkOptions, WorkState,
};
use retry_jobs::action::{self, ActionError};
use retry_jobs::view::{self, ListQuery};
use retry_testkit::MockClock;
use retry_toolkit::store::Timestamp;

const MONDAY: Timestamp = Timestamp::from_millis(1_767_571_200_000);

/// 1,200 items of `send`, item `i` due `i` seconds after Monday.
async fn many() -> (MemoryStore, Vec<i64>) {
    let store = MemoryStore::new();
    let jobs = Jobs::builder(store.clone())
        .clock(MockClock::new())
        .starting_at(MONDAY)
        .handler("send", |_: u32, _ctx| async { Ok(()) })
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..1_200u32 {
        let when = When::after(Duration::from_secs(u64::from(i)));
        let work = jobs
            .schedule(when, "send", &i, WorkOptions::new())
            .await
            .unwrap();
        ids.push(work.id.0);
    }
    (store, ids)
}

fn ids(page: &view::Page) -> Vec<i64> {
    page.items.iter().map(|i| i.id).collect()
}

#[tokio::test]
async fn a_due_filter_pages_across_many_reads_of_the_store() {
    let (store, all) = many().await;
    // Only the last three items are due at or after Monday + 1197 s: they lie past two whole
    // reads of 500 rows.
    let query = ListQuery {
        due_after: Some(MONDAY + Duration::from_secs(1_197)),
        limit: 2,
        ..ListQuery::default()
    };
    let first = view::list(&store, "default", &query).await.unwrap();
    assert_eq!(ids(&first), all[1_197..1_199]);
    assert_eq!(first.next_after, Some(all[1_198]));
    let rest = ListQuery {
        after: first.next_after.map(WorkId),
        ..query
    };
    let second = view::list(&store, "default", &rest).await.unwrap();
    assert_eq!(ids(&second), all[1_199..]);
    assert_eq!(second.next_after, None);
}

#[tokio::test]
async fn a_page_of_the_store_filter_and_a_due_filter_together() {
    let (store, all) = many().await;
    let query = ListQuery {
        filter: WorkFilter::new().state(WorkState::Waiting).handler("send"),
        due_before: Some(MONDAY + Duration::from_secs(3)),
        limit: 10,
        ..ListQuery::default()
    };
    let page = view::list(&store, "default", &query).await.unwrap();
    assert_eq!(ids(&page), all[..3]);
    assert_eq!(page.next_after, None);
    let none = ListQuery {
        filter: WorkFilter::new().handler("other"),
        limit: 10,
        ..ListQuery::default()
    };
    assert!(
        view::list(&store, "default", &none)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let zero = ListQuery {
        limit: 0,
        ..ListQuery::default()
    };
    assert!(
        view::list(&store, "default", &zero)
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn status_counts_every_page_of_the_store() {
    let (store, _) = many().await;
    let now = MONDAY + Duration::from_secs(60);
    let status = view::status(&store, "default", now).await.unwrap();
    assert_eq!(status.handlers.len(), 1);
    let send = &status.handlers[0];
    assert_eq!(send.waiting, 1_200);
    assert_eq!(send.oldest_waiting_age_ms, Some(60_000));
    assert_eq!(send.next_due, Some(MONDAY));
    assert_eq!(status.next_due, Some(MONDAY));
}

/// The dashboard's reads and actions name their owner: another owner's row is not found and
/// not changed; the owner's own row is, as the command line (no owner) finds any row.
#[tokio::test]
async fn v2_reads_and_actions_kept_to_an_owner_treat_another_owners_rows_as_absent() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("jobs.db")).unwrap();
    let made = support::make(store.clone(), "billing").await;
    let now = support::MONDAY + Duration::from_secs(120);
    let other = Some("default");

    assert!(
        view::item(&store, other, made.waiting)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        view::dead_letter(&store, other, made.dead)
            .await
            .unwrap()
            .is_none()
    );
    let refused = [
        action::cancel(&store, other, made.waiting, now).await.err(),
        action::redrive(&store, other, made.dead, now).await.err(),
        action::purge(&store, other, made.dead).await.err(),
    ];
    for error in refused {
        assert!(matches!(error, Some(ActionError::NotFound(_))), "{error:?}");
    }
    // Nothing changed: the work still waits, the dead letter is still there, not re-driven.
    let waiting = view::item(&store, None, made.waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiting.state, "waiting");
    let dead = view::dead_letter(&store, None, made.dead)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dead.redriven_as, None);

    let mine = Some("billing");
    let item = view::item(&store, mine, made.waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((item.id, item.owner.as_str()), (made.waiting, "billing"));
    let cancelled = action::cancel(&store, mine, made.waiting, now)
        .await
        .unwrap();
    assert_eq!(cancelled.was, "waiting");
    let redriven = action::redrive(&store, mine, made.dead, now).await.unwrap();
    assert_eq!(redriven.work.owner, "billing");
    assert!(action::purge(&store, mine, made.dead).await.is_ok());
    assert!(
        store
            .dead_letter(retry_durable::DeadLetterId(made.dead))
            .await
            .unwrap()
            .is_none()
    );
    // A missing id is not found with or without an owner.
    assert!(matches!(
        action::purge(&store, mine, made.dead).await,
        Err(ActionError::NotFound(_))
    ));
    assert!(matches!(
        action::purge(&store, None, made.dead).await,
        Err(ActionError::NotFound(_))
    ));
}
