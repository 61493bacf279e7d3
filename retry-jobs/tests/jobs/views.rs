//! The views as a library, over any store (here the memory store): paging across many reads
//! of the store, and the views' own arguments.

use std::time::Duration;

use retry_durable::{Jobs, MemoryStore, When, WorkFilter, WorkId, WorkOptions, WorkState};
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
