//! The scheduler: SPEC Q1–Q4, the M4 slot a timed-out task keeps, shutdown, bad options.
//! All on paused tokio time.

use crate::support;
use crate::task_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_toolkit::middleware::{with_retry, with_timeout};
use retry_toolkit::{
    OnError, Scheduler, SchedulerError, SchedulerOptions, SchedulerState, Scope, TaskContext,
    TaskEvent, TaskFailure, TaskHandle, TaskId, TaskOutcome, TaskState,
};
use support::InstantClock;
use task_support::{Call, MS, Scripted, fatal, transient};
use tokio::time::Instant;

/// A scheduler that records its error hook calls and its events.
struct Recorded {
    scheduler: Scheduler,
    hook: Arc<Mutex<Vec<(TaskId, String)>>>,
    events: Arc<Mutex<Vec<TaskEvent>>>,
}

fn recorded(options: SchedulerOptions) -> Recorded {
    recorded_with(options, false)
}

/// Like [`recorded`]; with `panics`, the hook and the subscriber panic after recording (a
/// bug in the user's code the scheduler must survive).
fn recorded_with(options: SchedulerOptions, panics: bool) -> Recorded {
    let hook = Arc::new(Mutex::new(Vec::new()));
    let events = Arc::new(Mutex::new(Vec::new()));
    let (h, e) = (Arc::clone(&hook), Arc::clone(&events));
    let scheduler = Scheduler::builder()
        .options(options)
        .on_task_error(move |id, failure| {
            h.lock().unwrap().push((id, failure.to_string()));
            assert!(!panics, "bug in the error hook");
        })
        .subscribe(move |event| {
            e.lock().unwrap().push(event.clone());
            assert!(!panics, "bug in the subscriber");
        })
        .build()
        .unwrap();
    Recorded {
        scheduler,
        hook,
        events,
    }
}

impl Recorded {
    fn events_of(&self, id: TaskId) -> Vec<TaskEvent> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.id() == id)
            .cloned()
            .collect()
    }

    fn hook_ids(&self) -> Vec<TaskId> {
        self.hook
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| *id)
            .collect()
    }
}

fn serial(on_error: OnError) -> SchedulerOptions {
    SchedulerOptions::new()
        .with_concurrency(1)
        .with_on_error(on_error)
}

// ---------------------------------------------------------------- Q1

#[tokio::test(start_paused = true)]
async fn q1_never_more_tasks_running_than_the_limit() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let scheduler = Scheduler::new(SchedulerOptions::new().with_concurrency(2)).unwrap();
    let start = Instant::now();
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
            scheduler.submit(move |cx: TaskContext| {
                let (running, peak) = (Arc::clone(&running), Arc::clone(&peak));
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    cx.sleep(MS * 10).await?;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, TaskFailure>(())
                }
            })
        })
        .collect();
    assert_eq!((scheduler.running(), scheduler.pending()), (2, 3));
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), 2);
    assert_eq!(Instant::now() - start, MS * 30); // 5 tasks of 10 ms, 2 at a time
}

#[tokio::test(start_paused = true)]
async fn q1_a_full_queue_refuses_with_queue_full() {
    let r = recorded(
        SchedulerOptions::new()
            .with_concurrency(1)
            .with_max_pending(1),
    );
    let running = r.scheduler.submit(Scripted::always(Call::ok(10)).task());
    let pending = r.scheduler.submit(Scripted::always(Call::ok(10)).task());
    let refused = r.scheduler.submit(Scripted::always(Call::ok(10)).task());
    // Refused at once: already in the error state, the hook already called.
    assert_eq!(refused.state(), TaskState::Error);
    assert_eq!(r.hook_ids(), [refused.id()]);
    let refused_id = refused.id();
    assert!(matches!(
        refused.await,
        Err(TaskFailure::QueueFull { capacity: 1 })
    ));
    assert_eq!(
        r.events_of(refused_id),
        [
            TaskEvent::Registered { id: refused_id },
            TaskEvent::Done {
                id: refused_id,
                outcome: TaskOutcome::Error {
                    error: "scheduler queue full (1 pending): the task was not run".into(),
                    retryable: false
                }
            },
        ]
    );
    // The others are unaffected.
    assert!(running.await.is_ok() && pending.await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn q1_zero_max_pending_refuses_what_cannot_start_at_once() {
    let scheduler = Scheduler::new(
        SchedulerOptions::new()
            .with_concurrency(1)
            .with_max_pending(0),
    )
    .unwrap();
    let first = scheduler.submit(Scripted::always(Call::ok(10)).task());
    let second = scheduler.submit(Scripted::always(Call::ok(10)).task());
    assert!(matches!(
        second.await,
        Err(TaskFailure::QueueFull { capacity: 0 })
    ));
    assert!(first.await.is_ok());
}

// ---------------------------------------------------------------- Q2, Q3

/// Four tasks in order on a serial scheduler, the second failing.
async fn four_tasks_second_failing(
    on_error: OnError,
) -> (Recorded, Vec<(TaskId, TaskState, Result<u32, TaskFailure>)>) {
    four_tasks_second_failing_with(on_error, false).await
}

async fn four_tasks_second_failing_with(
    on_error: OnError,
    panicking_hooks: bool,
) -> (Recorded, Vec<(TaskId, TaskState, Result<u32, TaskFailure>)>) {
    let r = recorded_with(serial(on_error), panicking_hooks);
    let handles: Vec<TaskHandle<u32>> = [
        Call::ok(10),
        Call::fail(10, TaskFailure::from("boom")),
        Call::ok(10),
        Call::ok(10),
    ]
    .into_iter()
    .map(|call| r.scheduler.submit(Scripted::always(call).task()))
    .collect();
    let mut ended = Vec::new();
    for mut handle in handles {
        let result = (&mut handle).await;
        ended.push((handle.id(), handle.state(), result));
    }
    (r, ended)
}

/// Q3: the hook, the task state and the result agree for every task.
fn assert_witnesses_agree(r: &Recorded, ended: &[(TaskId, TaskState, Result<u32, TaskFailure>)]) {
    let hook = r.hook.lock().unwrap().clone();
    for (id, state, result) in ended {
        let hooked = hook
            .iter()
            .find(|(h, _)| h == id)
            .map(|(_, message)| message.clone());
        match result {
            Ok(_) => {
                assert_eq!(*state, TaskState::Success, "{id}");
                assert_eq!(hooked, None, "{id}");
            }
            Err(failure) => {
                assert_eq!(*state, TaskState::Error, "{id}");
                assert_eq!(hooked, Some(failure.to_string()), "{id}");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn q3_continue_ends_with_three_successes_and_one_error() {
    let (r, ended) = four_tasks_second_failing(OnError::Continue).await;
    let successes = ended.iter().filter(|(_, _, res)| res.is_ok()).count();
    assert_eq!((successes, ended.len() - successes), (3, 1));
    assert_eq!(ended[1].2.as_ref().unwrap_err().to_string(), "boom");
    assert_witnesses_agree(&r, &ended);
    assert_eq!(r.scheduler.state(), SchedulerState::Running);
}

#[tokio::test(start_paused = true)]
async fn q3_stop_ends_with_one_success_and_three_errors() {
    let (r, ended) = four_tasks_second_failing(OnError::Stop).await;
    let successes = ended.iter().filter(|(_, _, res)| res.is_ok()).count();
    assert_eq!((successes, ended.len() - successes), (1, 3));
    // Drained tasks end in the error state (not skipped), with QueueStopped.
    for (id, state, result) in &ended[2..] {
        assert_eq!(*state, TaskState::Error, "{id}");
        assert!(
            matches!(result, Err(TaskFailure::QueueStopped)),
            "{id}: {result:?}"
        );
        // Never started.
        assert!(
            !r.events_of(*id)
                .iter()
                .any(|e| matches!(e, TaskEvent::Started { .. }))
        );
    }
    assert_witnesses_agree(&r, &ended);
    assert_eq!(r.hook_ids(), [TaskId(2), TaskId(3), TaskId(4)]);
}

#[tokio::test(start_paused = true)]
async fn q2_stop_is_terminal_later_submissions_fail_at_once() {
    let r = recorded(serial(OnError::Stop));
    let _ = r
        .scheduler
        .submit(Scripted::always(Call::fail(0, fatal("400"))).task())
        .await;
    assert_eq!(r.scheduler.state(), SchedulerState::Stopped);
    let late = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
    assert_eq!(late.state(), TaskState::Error);
    assert_eq!(
        late.failure().map(|f| f.to_string()),
        Some(TaskFailure::QueueStopped.to_string())
    );
    assert!(matches!(late.await, Err(TaskFailure::QueueStopped)));
}

#[tokio::test(start_paused = true)]
async fn q2_continue_one_failure_does_not_affect_later_tasks() {
    let scheduler = Scheduler::new(serial(OnError::Continue)).unwrap();
    assert!(
        scheduler
            .submit(Scripted::always(Call::fail(0, fatal("400"))).task())
            .await
            .is_err()
    );
    assert_eq!(
        scheduler
            .submit(Scripted::always(Call::ok(0)).task())
            .await
            .unwrap(),
        1
    );
}

// ---------------------------------------------------------------- Q4

#[tokio::test(start_paused = true)]
async fn q4_lifecycle_events_with_outcome_and_retryable_flag() {
    let r = recorded(SchedulerOptions::new().with_concurrency(4));
    let ok = r.scheduler.submit(Scripted::always(Call::ok(5)).task());
    let other = r
        .scheduler
        .submit(Scripted::always(Call::fail(5, TaskFailure::from("reset"))).task());
    let fatal_task = r
        .scheduler
        .submit(Scripted::always(Call::fail(5, fatal("400"))).task());
    let transient_task = r
        .scheduler
        .submit(Scripted::always(Call::fail(5, transient("503"))).task());
    let timed_out = r
        .scheduler
        .submit(with_timeout(Scripted::always(Call::ok(50)).task(), MS * 5).unwrap());
    let ids = [
        ok.id(),
        other.id(),
        fatal_task.id(),
        transient_task.id(),
        timed_out.id(),
    ];
    let _ = (
        ok.await,
        other.await,
        fatal_task.await,
        transient_task.await,
        timed_out.await,
    );

    let expected_flags = [None, Some(true), Some(false), Some(true), Some(false)];
    for (id, flag) in ids.into_iter().zip(expected_flags) {
        let events = r.events_of(id);
        assert_eq!(events.len(), 3, "{id}: {events:?}");
        assert_eq!(events[0], TaskEvent::Registered { id });
        assert_eq!(events[1], TaskEvent::Started { id });
        match (&events[2], flag) {
            (
                TaskEvent::Done {
                    outcome: TaskOutcome::Success,
                    ..
                },
                None,
            ) => {}
            (
                TaskEvent::Done {
                    outcome: TaskOutcome::Error { retryable, .. },
                    ..
                },
                Some(flag),
            ) => {
                assert_eq!(*retryable, flag, "{id}");
            }
            (event, _) => panic!("{id}: {event:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn q4_m8_retries_inside_a_task_are_invisible_unless_recorded() {
    let r = recorded(serial(OnError::Continue));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&attempts);
    let script = Scripted::new([Call::fail(0, transient("a")), Call::fail(0, transient("b"))]);
    let task = with_retry(script.task(), retry_toolkit::RetryPolicy::DEFAULT)
        .backoff(retry_toolkit::Constant(std::time::Duration::ZERO))
        .notify(move |_, attempt, _| log.lock().unwrap().push(attempt));
    let handle = r.scheduler.submit(task);
    let id = handle.id();
    assert_eq!(handle.await.unwrap(), 3);
    assert_eq!(script.calls(), 3);
    // One task to the scheduler: one start, one done.
    assert_eq!(r.events_of(id).len(), 3);
    assert_eq!(*attempts.lock().unwrap(), [1, 2]); // the observer is the only record
}

#[tokio::test(start_paused = true)]
async fn q4_subscribe_and_unsubscribe_at_run_time() {
    let scheduler = Scheduler::new(SchedulerOptions::new()).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&seen);
    let sub = scheduler.subscribe(move |_| {
        count.fetch_add(1, Ordering::SeqCst);
    });
    scheduler
        .submit(Scripted::always(Call::ok(0)).task())
        .await
        .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    assert!(scheduler.unsubscribe(sub));
    assert!(!scheduler.unsubscribe(sub));
    scheduler
        .submit(Scripted::always(Call::ok(0)).task())
        .await
        .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[test]
fn q4_events_are_plain_data() {
    let event = TaskEvent::Done {
        id: TaskId(7),
        outcome: TaskOutcome::Success,
    };
    let json = serde_json::to_string(&event).unwrap();
    assert_eq!(
        json,
        r#"{"event":"done","id":7,"outcome":{"state":"success"}}"#
    );
    assert_eq!(serde_json::from_str::<TaskEvent>(&json).unwrap(), event);
}

// ---------------------------------------------------------------- M4 under a scheduler

#[tokio::test(start_paused = true)]
async fn m4_an_uncooperative_timed_out_task_keeps_its_slot() {
    async fn next_task_start(cooperative: bool) -> Duration {
        let scheduler = Scheduler::new(serial(OnError::Continue)).unwrap();
        let call = if cooperative {
            Call::ok(80)
        } else {
            Call::ok(80).uncooperative()
        };
        let start = Instant::now();
        let slow = scheduler.submit(with_timeout(Scripted::always(call).task(), MS * 20).unwrap());
        let started = Arc::new(Mutex::new(None));
        let mark = Arc::clone(&started);
        let next = scheduler.submit(move |_: TaskContext| {
            *mark.lock().unwrap() = Some(Instant::now());
            async { Ok::<_, TaskFailure>(0) }
        });
        assert!(slow.await.unwrap_err().is_timeout());
        next.await.unwrap();
        let at = started.lock().unwrap().unwrap();
        at - start
    }
    assert_eq!(next_task_start(true).await, MS * 20);
    assert_eq!(next_task_start(false).await, MS * 80);
}

// ---------------------------------------------------------------- shutdown, robustness

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_fails_pending_tasks_and_lets_running_ones_finish() {
    let r = recorded(serial(OnError::Continue));
    let running = r.scheduler.submit(Scripted::always(Call::ok(50)).task());
    let pending = r.scheduler.submit(Scripted::always(Call::ok(50)).task());
    let start = Instant::now();
    r.scheduler.shutdown().await;
    assert_eq!(Instant::now() - start, MS * 50); // waited for the running task
    assert_eq!(r.scheduler.state(), SchedulerState::Stopped);
    assert_eq!(running.await.unwrap(), 1);
    assert_eq!(pending.state(), TaskState::Error);
    let pending_id = pending.id();
    assert!(matches!(pending.await, Err(TaskFailure::QueueStopped)));
    assert_eq!(r.hook_ids(), [pending_id]);
    assert!(matches!(
        r.scheduler
            .submit(Scripted::always(Call::ok(0)).task())
            .await,
        Err(TaskFailure::QueueStopped)
    ));
}

#[tokio::test(start_paused = true)]
async fn shutdown_now_signals_running_tasks() {
    let scheduler = Scheduler::new(SchedulerOptions::new()).unwrap();
    let cooperative = scheduler.submit(Scripted::always(Call::ok(10_000)).task());
    let start = Instant::now();
    scheduler.shutdown_now().await;
    assert_eq!(Instant::now() - start, Duration::ZERO);
    assert!(matches!(cooperative.await, Err(TaskFailure::Cancelled)));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_fails_and_frees_its_slot() {
    let r = recorded(serial(OnError::Continue));
    let boom = r.scheduler.submit(|_: TaskContext| async {
        if true {
            panic!("kaboom");
        }
        Ok::<u32, TaskFailure>(0)
    });
    let after = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
    assert_eq!(boom.await.unwrap_err().to_string(), "task panicked: kaboom");
    assert_eq!(after.await.unwrap(), 1);
    assert_eq!(r.hook_ids(), [TaskId(1)]);
}

/// An hour of paused time: long enough for any task here, short enough that a wedged
/// scheduler fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(3600);

/// [`four_tasks_second_failing`] with a hook and a subscriber that panic on every call.
async fn four_tasks_with_panicking_hooks(
    on_error: OnError,
) -> (Recorded, Vec<(TaskId, TaskState, Result<u32, TaskFailure>)>) {
    tokio::time::timeout(PATIENCE, four_tasks_second_failing_with(on_error, true))
        .await
        .expect("the scheduler wedged after a panicking hook")
}

/// A current-thread runtime of its own, its time paused.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn q3_a_panicking_error_hook_or_subscriber_does_not_leak_the_slot() {
    // Regression: a hook that panicked inside the task's completion killed the spawned task
    // before it freed its slot: `running` stayed 1, the next task never started.
    let (r, ended) = four_tasks_with_panicking_hooks(OnError::Continue).await;
    let successes = ended.iter().filter(|(_, _, res)| res.is_ok()).count();
    assert_eq!((successes, ended.len() - successes), (3, 1));
    assert_witnesses_agree(&r, &ended);
    assert_eq!(r.hook_ids(), [TaskId(2)]);
    assert_eq!((r.scheduler.running(), r.scheduler.pending()), (0, 0));
    // Every subscriber call happened, though each one panicked: 3 events per task.
    assert_eq!(r.events.lock().unwrap().len(), 12);
    tokio::time::timeout(PATIENCE, r.scheduler.idle())
        .await
        .expect("idle() never returned");
}

#[tokio::test(start_paused = true)]
async fn q3_a_panicking_error_hook_during_a_stop_drain_still_fails_every_pending_task() {
    // Regression: the hook panicked on the first drained task, so the others kept the
    // `Pending` state while their handles resolved to `Cancelled`.
    let (r, ended) = four_tasks_with_panicking_hooks(OnError::Stop).await;
    for (id, state, result) in &ended[2..] {
        assert_eq!(*state, TaskState::Error, "{id}");
        assert!(
            matches!(result, Err(TaskFailure::QueueStopped)),
            "{id}: {result:?}"
        );
    }
    assert_witnesses_agree(&r, &ended);
    assert_eq!(r.hook_ids(), [TaskId(2), TaskId(3), TaskId(4)]);
    assert_eq!(r.scheduler.running(), 0);
}

#[test]
fn q3_a_scheduler_outliving_its_build_runtime_runs_tasks_on_the_current_one() {
    // Regression: the handle captured at build time won over the current runtime, so a task
    // submitted after the first runtime was gone was dropped unpolled.
    let first = paused_runtime();
    let scheduler = first.block_on(async { Scheduler::new(serial(OnError::Continue)).unwrap() });
    drop(first); // built in one #[tokio::test] or LazyLock, used from another runtime
    let second = paused_runtime();
    second.block_on(async {
        let handle = scheduler.submit(Scripted::always(Call::ok(10)).task());
        assert_eq!(
            tokio::time::timeout(PATIENCE, handle)
                .await
                .unwrap()
                .unwrap(),
            1
        );
        assert_eq!(scheduler.running(), 0);
    });
}

#[test]
fn q3_tasks_dropped_with_their_runtime_end_in_the_error_state_and_free_their_slots() {
    // A task cut short by its runtime's shutdown never finishes; its slot must still be
    // freed and its three witnesses agree: state `Error`, hook called, result `Cancelled`.
    // A thousand queued behind it are each started on the dying runtime and dropped at once:
    // that must not nest a stack frame per task (it overflowed the stack in debug builds).
    let r = recorded(SchedulerOptions::new().with_concurrency(1));
    let runtime = paused_runtime();
    let (running, queued) = runtime.block_on(async {
        let running = r
            .scheduler
            .submit(Scripted::always(Call::ok(3_600_000)).task());
        let queued: Vec<_> = (0..1000)
            .map(|_| r.scheduler.submit(Scripted::always(Call::ok(0)).task()))
            .collect();
        tokio::time::sleep(MS).await; // the first task is under way
        (running, queued)
    });
    assert_eq!(running.state(), TaskState::Running);
    drop(runtime);

    assert_eq!((r.scheduler.running(), r.scheduler.pending()), (0, 0));
    for handle in std::iter::once(&running).chain(&queued) {
        assert_eq!(handle.state(), TaskState::Error, "{}", handle.id());
        assert!(matches!(handle.failure(), Some(TaskFailure::Cancelled)));
    }
    assert_eq!(r.hook_ids().len(), 1001);
    let next = paused_runtime();
    next.block_on(async {
        assert!(matches!(running.await, Err(TaskFailure::Cancelled)));
        let handle = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
        assert_eq!(handle.await.unwrap(), 1);
        tokio::time::timeout(PATIENCE, r.scheduler.idle())
            .await
            .expect("idle() never returned");
    });
}

#[tokio::test(start_paused = true)]
async fn idle_waits_for_running_and_pending_tasks() {
    let scheduler = Scheduler::new(serial(OnError::Continue)).unwrap();
    let start = Instant::now();
    let handles: Vec<_> = (0..3)
        .map(|_| scheduler.submit(Scripted::always(Call::ok(10)).task()))
        .collect();
    scheduler.idle().await;
    assert_eq!(Instant::now() - start, MS * 30);
    assert!(handles.iter().all(|h| h.state() == TaskState::Success));
}

#[tokio::test]
async fn tasks_inherit_the_submitters_scope_clock() {
    // Real time, a scoped clock: the task's hour-long sleep is instant and recorded.
    let clock = InstantClock::new();
    let scheduler = Scheduler::new(SchedulerOptions::new()).unwrap();
    // The task runs in a spawned tokio task, which a task-local scope would not reach.
    let result = Scope::new()
        .clock(clock.clone())
        .run(async {
            scheduler
                .submit(Scripted::always(Call::ok(3_600_000)).task())
                .await
        })
        .await;
    assert_eq!(result.unwrap(), 1);
    assert_eq!(clock.sleeps(), [Duration::from_secs(3600)]);
}

#[test]
fn tasks_submitted_outside_a_runtime_fail_instead_of_panicking() {
    let scheduler = Scheduler::new(SchedulerOptions::new()).unwrap();
    let handle = scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(()) });
    assert_eq!(handle.state(), TaskState::Error);
    let failure = handle.failure().unwrap();
    let message = failure.to_string();
    assert_eq!(
        message,
        "no-runtime: build the scheduler or submit the task inside a tokio runtime"
    );
    // E3: submitting again from the same place cannot help; an ordinary error kind says so.
    assert!(!failure.is_retryable());
    assert_eq!(
        failure.as_task_error().and_then(|e| e.kind()),
        Some("no-runtime")
    );
}

// ---------------------------------------------------------------- bad options

#[test]
fn bad_input_scheduler_options() {
    let err = Scheduler::new(SchedulerOptions::new().with_concurrency(0)).unwrap_err();
    assert_eq!(err, SchedulerError::ZeroConcurrency);
    assert_eq!(err.to_string(), "scheduler.concurrency must be >= 1");
    let cases = [
        (
            r#"{"concurrency": 0}"#,
            "scheduler.concurrency must be >= 1",
        ),
        (
            r#"{"concurrency": -2}"#,
            "scheduler.concurrency must be >= 1",
        ),
        (
            r#"{"concurrency": 1.5}"#,
            "scheduler.concurrency must be an integer",
        ),
        (
            r#"{"max_pending": -1}"#,
            "scheduler.max_pending must be >= 0",
        ),
        (
            r#"{"max_pending": 0.5}"#,
            "scheduler.max_pending must be an integer",
        ),
        (
            r#"{"on_error": "halt"}"#,
            "unknown variant `halt`, expected `continue` or `stop`",
        ),
    ];
    for (doc, message) in cases {
        let err = serde_json::from_str::<SchedulerOptions>(doc)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(message), "{doc}: {err}");
    }
    let defaults: SchedulerOptions = serde_json::from_str("{}").unwrap();
    assert_eq!(defaults, SchedulerOptions::new());
    assert_eq!(
        (
            defaults.concurrency,
            defaults.max_pending,
            defaults.on_error
        ),
        (4, 1024, OnError::Continue)
    );
    let json = serde_json::to_string(&serial(OnError::Stop)).unwrap();
    assert_eq!(
        serde_json::from_str::<SchedulerOptions>(&json).unwrap(),
        serial(OnError::Stop)
    );
}

// ---------------------------------------------------------------- runners

/// Tokio tasks alive on the current runtime, once the ones just woken have run.
async fn alive_tasks() -> usize {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test(flavor = "current_thread")]
async fn runners_park_at_most_concurrency_and_leave_with_the_scheduler() {
    let scheduler = Scheduler::new(SchedulerOptions::new().with_concurrency(3)).unwrap();
    let burst: Vec<_> = (0..50)
        .map(|i| {
            scheduler.submit(move |_: TaskContext| async move {
                tokio::task::yield_now().await;
                Ok::<_, TaskFailure>(i)
            })
        })
        .collect();
    for (i, handle) in burst.into_iter().enumerate() {
        assert_eq!(handle.await.unwrap(), i);
    }
    // Three runners ran the fifty tasks; with nothing queued they wait for more.
    assert_eq!(alive_tasks().await, 3);
    // A task submitted now is handed to one of them: no tokio task is added.
    let one = scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(7) });
    assert_eq!(scheduler.running(), 1);
    assert_eq!(one.await.unwrap(), 7);
    assert_eq!(alive_tasks().await, 3);
    drop(scheduler);
    assert_eq!(alive_tasks().await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_stopped_scheduler_releases_its_parked_runners() {
    let scheduler = Scheduler::new(SchedulerOptions::new()).unwrap();
    let handle = scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(()) });
    handle.await.unwrap();
    assert_eq!(alive_tasks().await, 1);
    scheduler.shutdown().await;
    assert_eq!(alive_tasks().await, 0);
}

#[test]
fn a_runner_parked_on_one_runtime_never_runs_a_task_submitted_on_another() {
    let first = paused_runtime();
    let scheduler = first.block_on(async {
        let scheduler = Scheduler::new(SchedulerOptions::new()).unwrap();
        let handle = scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(()) });
        handle.await.unwrap();
        scheduler
    });
    // `first` is alive but idle: a task handed to its parked runner would never run.
    let second = paused_runtime();
    let ran_on = second.block_on(async {
        let handle = scheduler.submit(|_: TaskContext| async {
            Ok::<_, TaskFailure>(tokio::runtime::Handle::current().id())
        });
        tokio::time::timeout(PATIENCE, handle)
            .await
            .unwrap()
            .unwrap()
    });
    assert_eq!(ran_on, second.handle().id());
    drop(first);
}

#[test]
fn a_task_handed_to_a_runner_its_runtime_drops_ends_cancelled_and_frees_its_slot() {
    let r = recorded(SchedulerOptions::new().with_concurrency(1));
    let runtime = paused_runtime();
    // In a tuple: a handle is a future, and clippy asks that a block returning one be awaited.
    let (handle,) = runtime.block_on(async {
        let warm = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
        warm.await.unwrap();
        // Handed to the parked runner, which the runtime is dropped before it polls.
        let handed = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
        (handed,)
    });
    assert_eq!(handle.state(), TaskState::Running);
    drop(runtime);
    assert_eq!(handle.state(), TaskState::Error);
    assert!(matches!(handle.failure(), Some(TaskFailure::Cancelled)));
    assert_eq!(r.hook_ids(), [handle.id()]);
    assert_eq!(
        r.events_of(handle.id()),
        [
            TaskEvent::Registered { id: handle.id() },
            TaskEvent::Started { id: handle.id() },
            TaskEvent::Done {
                id: handle.id(),
                outcome: TaskOutcome::Error {
                    error: "task cancelled".into(),
                    retryable: true
                },
            },
        ]
    );
    assert_eq!(r.scheduler.running(), 0);
    let next = paused_runtime();
    next.block_on(async {
        let result = tokio::time::timeout(PATIENCE, handle).await.unwrap();
        assert!(matches!(result, Err(TaskFailure::Cancelled)));
        let again = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
        assert_eq!(
            tokio::time::timeout(PATIENCE, again)
                .await
                .unwrap()
                .unwrap(),
            1
        );
    });
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_never_sees_another_tasks_token_cancelled() {
    // One slot, so each task runs after the last in the same runner: what one does with its
    // token must not reach the next.
    let scheduler = Scheduler::new(SchedulerOptions::new().with_concurrency(1)).unwrap();
    let kept = Arc::new(Mutex::new(None));
    let cancels_its_own = scheduler.submit(|cx: TaskContext| async move {
        cx.cancel_token().cancel();
        Ok::<_, TaskFailure>(cx.is_cancelled())
    });
    let keeps_its_own = scheduler.submit({
        let kept = Arc::clone(&kept);
        move |cx: TaskContext| {
            let kept = Arc::clone(&kept);
            async move {
                let first_look = cx.is_cancelled();
                *kept.lock().unwrap() = Some(cx.cancel_token().clone());
                Ok::<_, TaskFailure>(first_look)
            }
        }
    });
    let next = scheduler.submit(|cx: TaskContext| async move {
        let first_look = cx.is_cancelled();
        // The submitter cancels the token the task before kept, meanwhile.
        tokio::task::yield_now().await;
        Ok::<_, TaskFailure>(first_look || cx.is_cancelled())
    });
    assert!(cancels_its_own.await.unwrap());
    assert!(!keeps_its_own.await.unwrap());
    kept.lock().unwrap().take().unwrap().cancel();
    assert!(!next.await.unwrap());
}

#[test]
fn tasks_waiting_for_a_runner_its_runtime_drops_end_cancelled_and_free_their_slots() {
    // Three free slots: the first task gets a new runner, the two after it wait for that
    // runner to hand them out; the runtime goes before it runs.
    let r = recorded(SchedulerOptions::new().with_concurrency(3));
    let runtime = paused_runtime();
    let handles = runtime.block_on(async {
        (0..3)
            .map(|_| r.scheduler.submit(Scripted::always(Call::ok(0)).task()))
            .collect::<Vec<_>>()
    });
    assert_eq!(r.scheduler.running(), 3);
    assert!(handles.iter().all(|h| h.state() == TaskState::Running));
    drop(runtime);
    assert_eq!(r.scheduler.running(), 0);
    for handle in &handles {
        assert_eq!(handle.state(), TaskState::Error, "{}", handle.id());
        assert!(matches!(handle.failure(), Some(TaskFailure::Cancelled)));
    }
    assert_eq!(r.hook_ids().len(), 3);
    let next = paused_runtime();
    next.block_on(async {
        for handle in handles {
            let result = tokio::time::timeout(PATIENCE, handle).await.unwrap();
            assert!(matches!(result, Err(TaskFailure::Cancelled)));
        }
        let again = r.scheduler.submit(Scripted::always(Call::ok(0)).task());
        assert_eq!(
            tokio::time::timeout(PATIENCE, again)
                .await
                .unwrap()
                .unwrap(),
            1
        );
    });
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_task_run_after_another_in_its_runner_sees_its_own_scope_only() {
    // One slot: the second and third tasks run after the first, in its runner.
    let scheduler = Scheduler::new(SchedulerOptions::new().with_concurrency(1)).unwrap();
    let seed_seen = |_: TaskContext| async {
        tokio::task::yield_now().await;
        Ok::<_, TaskFailure>(Scope::current_seed())
    };
    let first = scheduler.submit(seed_seen);
    // In a tuple: a handle is a future, and clippy asks that a block returning one be awaited.
    let (scoped,) = Scope::new()
        .seed(7)
        .run(async { (scheduler.submit(seed_seen),) })
        .await;
    let after = scheduler.submit(seed_seen);
    assert_eq!(scheduler.pending(), 2);
    assert_eq!(first.await.unwrap(), None);
    assert_eq!(scoped.await.unwrap(), Some(7));
    assert_eq!(after.await.unwrap(), None);
}
