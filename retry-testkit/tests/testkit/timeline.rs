//! The timeline recorder: SPEC T4 (snapshot-testable output, here with insta) and R4 (the
//! per-retry notification is what draws it), on a seeded run (T2).

use std::path::Path;
use std::time::Duration;

use retry_testkit::{Fault, FaultScript, MockClock, RowOutcome, Step, Timeline};
use retry_toolkit::{RetryOptions, RetryPolicy};

const MS: Duration = Duration::from_millis(1);

/// A seeded loop that meets every kind of attempt: a slow failure, a hang cut off by the
/// attempt timeout, a throttle with a retry-after hint, and a slow success.
fn eventful_timeline() -> Timeline {
    let clock = MockClock::new().with_seed(7);
    let script = FaultScript::new()
        .then(Step::fail(Fault::new("503")).taking(30 * MS))
        .hang()
        .fail(Fault::new("429").with_retry_after(Duration::from_secs(1)))
        .then(Step::succeed("ok").taking(80 * MS))
        .on(&clock);
    let timeline = Timeline::new(&clock);
    let policy: RetryPolicy = RetryOptions::new().with_max_attempts(5).resolve().unwrap();
    let out = clock
        .block_on(
            policy
                .retry(timeline.record(script.operation()))
                .retry_after(Fault::retry_after)
                .notify(timeline.observer())
                .attempt_timeout(100 * MS),
        )
        .unwrap();
    assert_eq!(out, Ok("ok"));
    script.assert_consumed();
    timeline
}

#[test]
fn t4_timeline_text_snapshot() {
    insta::assert_snapshot!(eventful_timeline().to_text(), @r"
    attempt  start          end            outcome                        then
    1        0ms            30ms           err: 503                       wait 11.266721ms
    2        41.266721ms    141.266721ms   dropped                        wait 132.855486ms
    3        274.122207ms   274.122207ms   err: 429 (retry after 1000ms)  wait 1000ms
    4        1274.122207ms  1354.122207ms  ok                             done
    ");
}

#[test]
fn t4_timeline_rows_fill_the_wait_after_a_timeout_from_the_clock() {
    let rows = eventful_timeline().rows();
    let outcomes: Vec<&RowOutcome> = rows.iter().map(|r| &r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            &RowOutcome::Err("503".to_owned()),
            &RowOutcome::Dropped,
            &RowOutcome::Err("429 (retry after 1000ms)".to_owned()),
            &RowOutcome::Ok,
        ]
    );
    // The loop does not notify after a timed-out attempt (there is no error to pass); the
    // wait is the gap on the clock.
    assert_eq!(
        rows[1].wait,
        Some(rows[2].start - rows[1].end.unwrap_or_default())
    );
    assert_eq!(rows[3].wait, None);
}

#[test]
fn t4_timeline_of_a_loop_that_gives_up_ends_with_stop() {
    let clock = MockClock::new();
    let script = FaultScript::<(), _>::new()
        .fail(Fault::new("busy"))
        .fail(Fault::new("bad request"))
        .on(&clock);
    let timeline = Timeline::new(&clock);
    let out = clock
        .block_on(
            RetryPolicy::DEFAULT
                .with_seed(1)
                .retry(timeline.record(script.operation()))
                .when(|e: &Fault, _| e.message() == "busy")
                .notify(timeline.observer()),
        )
        .unwrap();
    assert_eq!(out, Err(Fault::new("bad request")));
    let text = timeline.to_string();
    let last = text.lines().last().unwrap_or_default();
    assert!(last.ends_with("err: bad request  stop"), "{text}");
}

/// The committed picture in the crate's docs is this timeline's SVG; regenerate it with
/// `UPDATE_DOCS=1 cargo test -p retry-testkit --test timeline`.
#[test]
fn t4_timeline_svg_matches_the_committed_docs_picture() {
    let svg = eventful_timeline().to_svg();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<rect").count(),
        1 + 3 + 4,
        "background, legend, one bar per attempt"
    );
    assert!(svg.contains(
        "<title>attempt 3: err: 429 (retry after 1000ms) (274.122207ms to 274.122207ms)</title>"
    ));
    assert!(svg.contains(">wait 1000ms</text>"));

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/timeline.svg");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &svg).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == svg,
        "{} is out of date; regenerate it with UPDATE_DOCS=1",
        path.display()
    );
}
