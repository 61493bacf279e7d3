//! R4: the loop reports retries (WARN) and give-ups (INFO) as `tracing` events with target
//! `retry_toolkit`, each with the error; the scheduler reports a panic in the caller's callbacks
//! the same way (Q3). The table of events is in the crate docs ("Logs").

use crate::support;

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use retry_toolkit::{Jitter, RetryPolicy, Scheduler, TaskContext, TaskFailure};
use support::{InstantClock, fail_times};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records every event as `LEVEL target: message {field=value …}`.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = Line(String::new());
        event.record(&mut line);
        let meta = event.metadata();
        let text = format!("{} {}: {}", meta.level(), meta.target(), line.0);
        self.0.lock().unwrap().push(text);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The events `run` emits on a current-thread runtime, as `LEVEL target: message {field=value …}`.
fn traced<F: std::future::Future>(run: F) -> (F::Output, Vec<String>) {
    let recorder = Recorder::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let output = tracing::subscriber::with_default(recorder.clone(), || runtime.block_on(run));
    let lines = recorder.0.lock().unwrap().clone();
    (output, lines)
}

#[test]
fn r4_retries_and_give_up_are_traced() {
    let policy = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .with_clock(InstantClock::new());
    let (result, lines) = traced(policy.retry(fail_times(u32::MAX)));
    assert!(result.is_err());
    assert_eq!(
        lines,
        [
            r#"WARN retry_toolkit: attempt failed; retrying attempt=1 delay=200ms error="failure 1""#,
            r#"WARN retry_toolkit: attempt failed; retrying attempt=2 delay=400ms error="failure 2""#,
            r#"INFO retry_toolkit: retry gave up: attempts exhausted attempts=3 error="failure 3""#,
        ]
    );
}

#[test]
fn r4_success_emits_nothing() {
    let (result, lines) = traced(RetryPolicy::DEFAULT.retry(fail_times(0)));
    assert_eq!(result, Ok(1));
    assert!(lines.is_empty());
}

#[test]
fn q3_a_panicking_error_hook_is_reported_once_and_contained() {
    let (_, lines) = traced(async {
        let scheduler = Scheduler::builder()
            .on_task_error(|_, _| panic!("bug in the hook"))
            .build()
            .unwrap();
        let failing = |_: TaskContext| async { Err::<(), _>(TaskFailure::from("boom")) };
        let result = scheduler.submit(failing).await;
        assert_eq!(result.unwrap_err().to_string(), "boom");
        assert_eq!(scheduler.running(), 0);
    });
    let reports: Vec<_> = lines.iter().filter(|l| l.contains("panicked")).collect();
    assert_eq!(
        reports,
        [
            "ERROR retry_toolkit::scheduler: the scheduler's error hook panicked; the scheduler carries on task=1 panic=bug in the hook"
        ]
    );
}

#[test]
fn r4_a_limit_ends_with_an_info_event_and_a_timed_out_attempt_is_a_warning() {
    let policy = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .with_clock(InstantClock::new());
    let hangs = |_| std::future::pending::<Result<(), String>>();
    let (_, lines) = traced(
        policy
            .retry(hangs)
            .attempt_timeout(std::time::Duration::from_millis(50)),
    );
    assert_eq!(
        lines,
        [
            "WARN retry_toolkit: attempt timed out; retrying attempt=1 timeout=50ms delay=200ms",
            "WARN retry_toolkit: attempt timed out; retrying attempt=2 timeout=50ms delay=400ms",
            "INFO retry_toolkit: retry gave up: attempt timed out attempts=3 timeout=50ms",
        ]
    );
}

/// With the stock `tracing_subscriber::fmt` subscriber and nothing else set up, each retry is
/// one readable line that names the error.
#[test]
fn r4_the_default_fmt_subscriber_prints_one_line_per_retry_with_the_error() {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .without_time()
        .with_writer(move || writer.clone())
        .finish();
    let policy = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .with_clock(InstantClock::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(policy.retry(|attempt| async move {
            if attempt < 3 {
                Err(format!("HTTP 503 on attempt {attempt}"))
            } else {
                Ok(())
            }
        }))
    })
    .unwrap();
    let output = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(
        lines,
        [
            r#" WARN retry_toolkit: attempt failed; retrying attempt=1 delay=200ms error="HTTP 503 on attempt 1""#,
            r#" WARN retry_toolkit: attempt failed; retrying attempt=2 delay=400ms error="HTTP 503 on attempt 2""#,
        ]
    );
}

#[test]
fn r4_r8_a_value_retried_and_a_deadline_before_the_next_are_traced() {
    let policy = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .with_clock(InstantClock::new());
    // Blocking: this test clock moves its time when a sleep is made, and the blocking loop
    // makes its deadline timers lazily, so only its waits move the time.
    let (result, lines) = traced(async {
        policy
            .retry_blocking(Ok::<u32, String>)
            .when_ok(|_, _| true)
            .deadline(std::time::Duration::from_millis(500))
            .call()
    });
    assert_eq!(result, Ok(2));
    assert_eq!(
        lines,
        [
            "WARN retry_toolkit: attempt returned a value to retry; retrying attempt=1 delay=200ms",
            "INFO retry_toolkit: retry gave up: deadline exceeded; the last value is returned attempts=2",
        ]
    );
}
