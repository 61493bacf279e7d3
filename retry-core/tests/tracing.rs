//! R4: the loop reports retries and give-ups as `tracing` events with target `retry_core`;
//! the scheduler reports a panic in the caller's callbacks the same way (Q3).

mod support;

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use retry_core::{Jitter, RetryPolicy, Scheduler, TaskContext, TaskFailure};
use support::{InstantClock, fail_times};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records every event as `target: message {field=value …}`.
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
        let text = format!("{}: {}", event.metadata().target(), line.0);
        self.0.lock().unwrap().push(text);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The events `run` emits on a current-thread runtime, as `target: message {field=value …}`.
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
            "retry_core: attempt failed; retrying attempt=1 delay_ms=200",
            "retry_core: attempt failed; retrying attempt=2 delay_ms=400",
            "retry_core: retry gave up: attempts exhausted attempt=3",
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
            "retry_core::scheduler: the scheduler's error hook panicked; the scheduler carries on task=1 panic=bug in the hook"
        ]
    );
}
