//! `Timestamp`'s `Display` (RFC 3339, UTC, milliseconds) against chrono and fixed vectors,
//! and the `Debug` of records and events that shows times through it (issue 26 item 9).

use chrono::{SecondsFormat, TimeZone, Utc};
use retry_durable::{Event, EventKind, WorkId};
use retry_toolkit::store::Timestamp;

#[test]
fn display_is_rfc3339_utc_with_milliseconds() {
    for (millis, text) in [
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (999, "1970-01-01T00:00:00.999Z"),
        (951_782_400_000, "2000-02-29T00:00:00.000Z"),
        (1_767_571_200_000, "2026-01-05T00:00:00.000Z"),
        (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        (253_402_300_800_000, "+10000-01-01T00:00:00.000Z"),
        (i64::MAX as u64, "+292278994-08-17T07:12:55.807Z"),
        (u64::MAX, "+584556019-04-03T14:25:51.615Z"),
    ] {
        assert_eq!(Timestamp::from_millis(millis).to_string(), text, "{millis}");
    }
}

#[test]
fn display_agrees_with_chrono_up_to_year_9999() {
    // A fixed pseudo-random walk over the range, plus the edges of months and years.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut values = vec![0, 86_399_999, 86_400_000, 253_402_300_799_999];
    for _ in 0..20_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        values.push(state % 253_402_300_800_000);
    }
    for millis in values {
        let chrono = Utc
            .timestamp_millis_opt(i64::try_from(millis).unwrap())
            .unwrap()
            .to_rfc3339_opts(SecondsFormat::Millis, true);
        assert_eq!(
            Timestamp::from_millis(millis).to_string(),
            chrono,
            "{millis}"
        );
    }
}

#[test]
fn debug_of_events_and_records_shows_dates() {
    let event = Event {
        id: WorkId(7),
        handler: "report".to_owned(),
        kind: "cron",
        what: EventKind::Rearmed {
            next: Timestamp::from_millis(1_767_571_200_000),
        },
    };
    let debug = format!("{event:?}");
    assert!(
        debug.contains("next: Timestamp(2026-01-05T00:00:00.000Z)"),
        "{debug}"
    );
}

#[test]
fn display_of_events_is_one_line_with_dates() {
    let monday = Timestamp::from_millis(1_767_571_200_000);
    let event = |handler: &str, kind, what| Event {
        id: WorkId(7),
        handler: handler.to_owned(),
        kind,
        what,
    };
    let table = [
        (
            event("report", "cron", EventKind::Rearmed { next: monday }),
            "work #7 (report, cron): re-armed for 2026-01-05T00:00:00.000Z",
        ),
        (
            event("report", "cron", EventKind::Skipped { missed: monday }),
            "work #7 (report, cron): skipped the tick missed at 2026-01-05T00:00:00.000Z",
        ),
        (
            event(
                "send",
                "queue",
                EventKind::Retrying {
                    attempt: 2,
                    delay: std::time::Duration::from_millis(1_500),
                    error: "timeout".to_owned(),
                },
            ),
            "work #7 (send, queue): attempt 2 failed, next in 1.5s: timeout",
        ),
        (
            event(
                "send",
                "once",
                EventKind::Failed {
                    attempts: 1,
                    reason: retry_durable::DeadReason::NotRetryable,
                    error: "card declined".to_owned(),
                },
            ),
            "work #7 (send, once): dead-lettered (not-retryable) after 1 attempt: card declined",
        ),
        (
            event(
                "",
                "",
                EventKind::Quarantined {
                    reason: "payload is not JSON".to_owned(),
                },
            ),
            "work #7: quarantined: payload is not JSON",
        ),
        (
            event("send", "queue", EventKind::Cancelled),
            "work #7 (send, queue): cancelled",
        ),
    ];
    for (event, text) in table {
        assert_eq!(event.to_string(), text);
    }
}
