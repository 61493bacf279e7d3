//! The mock clock: SPEC T1 (virtual time that every retry loop uses; sleeps instant in wall
//! time and recorded).

use crate::support;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use retry_testkit::{FAR_FUTURE, InFlight, MockClock, SleepRecord, SleepStatus, Stalled, join_all};
use support::{MS, no_jitter};

/// A library function that retries with the default clock: the test cannot hand it a clock,
/// like a function expanded from `#[retry]`.
async fn library_call() -> Result<u32, String> {
    no_jitter(3)
        .retry(|attempt| async move {
            if attempt < 3 {
                Err(format!("busy {attempt}"))
            } else {
                Ok(attempt)
            }
        })
        .await
}

#[test]
fn t1_sleeps_complete_at_once_and_are_recorded_in_order() {
    let clock = MockClock::new();
    let wall = std::time::Instant::now();
    let out = clock
        .block_on(async {
            clock.sleep(300 * MS).await;
            clock.sleep(Duration::from_secs(3600)).await;
            clock.sleep(5 * MS).await;
            clock.elapsed()
        })
        .unwrap();
    assert_eq!(out, 300 * MS + Duration::from_secs(3600) + 5 * MS);
    assert_eq!(
        clock.sleeps(),
        [300 * MS, Duration::from_secs(3600), 5 * MS]
    );
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "an hour took wall time"
    );
}

#[test]
fn t1_block_on_reaches_loops_the_test_cannot_touch() {
    let clock = MockClock::new();
    assert_eq!(clock.block_on(library_call()).unwrap(), Ok(3));
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
    assert_eq!(clock.elapsed(), 600 * MS);
}

#[tokio::test]
async fn t1_run_reaches_loops_the_test_cannot_touch() {
    let clock = MockClock::new();
    assert_eq!(clock.run(library_call()).await, Ok(3));
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
    assert_eq!(clock.elapsed(), 600 * MS);
}

#[test]
fn t1_a_clock_given_to_the_policy_works_without_the_scope() {
    let clock = MockClock::new();
    let policy = no_jitter(3).with_clock(clock.clone());
    let out: Result<(), &str> = clock
        .block_on(policy.retry(|_| async { Err("down") }))
        .unwrap();
    assert_eq!(out, Err("down"));
    assert_eq!(clock.sleeps(), [200 * MS, 400 * MS]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t1_parallel_tests_each_keep_their_own_clock() {
    let tasks = (1..=8u32).map(|n| {
        tokio::spawn(async move {
            let clock = MockClock::new();
            clock
                .run(async {
                    for _ in 0..n {
                        clock.sleep(n * MS).await;
                        tokio::task::yield_now().await;
                    }
                })
                .await;
            (n, clock.sleeps(), clock.elapsed())
        })
    });
    for task in tasks {
        let (n, sleeps, elapsed) = task.await.unwrap();
        assert_eq!(sleeps, vec![n * MS; n as usize]);
        assert_eq!(elapsed, n * n * MS);
    }
}

/// A future that wakes itself `times` times before it is ready: busy, never waiting.
struct Busy {
    times: u32,
}

impl Future for Busy {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.times == 0 {
            return Poll::Ready(());
        }
        self.times -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn t1_time_does_not_move_while_the_future_has_work_to_do() {
    let clock = MockClock::new();
    // A timer is pending the whole time, yet the busy future never lets it fire.
    let _timer = clock.sleep(MS);
    clock.block_on(Busy { times: 1_000 }).unwrap();
    assert_eq!(clock.elapsed(), Duration::ZERO);
    assert_eq!(clock.pending(), 1);
}

/// An attempt that waits on a spawned task needing `turns` scheduler turns (and no virtual
/// time) to answer, under a 100 ms attempt timeout.
async fn attempt_waiting_on_a_task(clock: &MockClock, turns: u32) -> Result<u32, String> {
    clock
        .run(
            no_jitter(1)
                .retry(|_| async move {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    tokio::spawn(async move {
                        for _ in 1..turns {
                            tokio::task::yield_now().await;
                        }
                        let _ = tx.send(7);
                    });
                    rx.await.map_err(|_| "sender dropped")
                })
                .attempt_timeout(100 * MS),
        )
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn t1_run_lets_spawned_tasks_finish_before_moving_time() {
    let clock = MockClock::new();
    assert_eq!(attempt_waiting_on_a_task(&clock, 12).await, Ok(7));
    assert_eq!(clock.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn t1_idle_yields_bound_how_long_run_waits_for_other_tasks() {
    // A task needing more turns than the clock yields loses the race against virtual time.
    let clock = MockClock::new().with_idle_yields(4);
    assert_eq!(
        attempt_waiting_on_a_task(&clock, 12).await,
        Err("attempt 1 timed out after 100ms".to_owned())
    );
    assert_eq!(clock.elapsed(), 100 * MS);
    let clock = MockClock::new().with_idle_yields(4);
    assert_eq!(attempt_waiting_on_a_task(&clock, 4).await, Ok(7));
}

/// An attempt under a 100 ms timeout that waits on a task needing `turns` scheduler turns;
/// the task holds an `io` guard while it works (and, with `answer` false, then drops it and
/// never answers: a server that went quiet).
async fn attempt_waiting_on_io(
    clock: &MockClock,
    io: &InFlight,
    turns: u32,
    answer: bool,
) -> Result<u32, String> {
    let io_for_attempt = io.clone();
    clock
        .run_watching(
            io,
            no_jitter(1)
                .retry(move |_| {
                    let guard = io_for_attempt.guard();
                    async move {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        tokio::spawn(async move {
                            for _ in 1..turns {
                                tokio::task::yield_now().await;
                            }
                            drop(guard);
                            if answer {
                                let _ = tx.send(7);
                            } else {
                                std::mem::forget(tx);
                            }
                        });
                        rx.await.map_err(|_| "sender dropped")
                    }
                })
                .attempt_timeout(100 * MS),
        )
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn t1_run_watching_holds_time_while_io_is_in_flight() {
    // 4 idle yields lose against 200 turns under `run` (above); not while the guard is held.
    let (clock, io) = (MockClock::new().with_idle_yields(4), InFlight::new());
    assert_eq!(attempt_waiting_on_io(&clock, &io, 200, true).await, Ok(7));
    assert_eq!(clock.elapsed(), Duration::ZERO);
    assert_eq!(io.count(), 0);
}

#[tokio::test]
async fn t1_run_watching_moves_time_once_the_io_went_quiet() {
    let (clock, io) = (MockClock::new().with_idle_yields(4), InFlight::new());
    assert_eq!(
        attempt_waiting_on_io(&clock, &io, 200, false).await,
        Err("attempt 1 timed out after 100ms".to_owned())
    );
    assert_eq!(clock.elapsed(), 100 * MS);
}

#[tokio::test]
async fn t1_manual_advance_drives_spawned_loops() {
    let clock = MockClock::new();
    let spawn = |clock: &MockClock| {
        let policy = no_jitter(3);
        tokio::spawn(
            clock.scope(async move { policy.retry(|_| async { Err::<(), _>("down") }).await }),
        )
    };
    let (a, b) = (spawn(&clock), spawn(&clock));
    tokio::task::yield_now().await;
    // Both loops failed attempt 1 and wait 200 ms.
    assert_eq!(
        (clock.pending(), clock.next_deadline()),
        (2, Some(200 * MS))
    );
    assert_eq!(clock.advance(150 * MS), 0);
    assert_eq!(clock.advance(50 * MS), 2);
    tokio::task::yield_now().await;
    // Attempt 2 failed in both; now they wait 400 ms more.
    assert_eq!(
        (clock.pending(), clock.next_deadline()),
        (2, Some(600 * MS))
    );
    assert_eq!(clock.advance_to_next(), Some(600 * MS));
    assert_eq!(a.await.unwrap(), Err("down"));
    assert_eq!(b.await.unwrap(), Err("down"));
    assert_eq!(clock.pending(), 0);
    assert_eq!(clock.advance_to_next(), None);
    assert_eq!(clock.sleeps(), [200 * MS, 200 * MS, 400 * MS, 400 * MS]);
}

#[test]
fn t1_sleeps_due_together_fire_in_the_order_they_were_requested() {
    let clock = MockClock::new();
    let order = std::sync::Mutex::new(Vec::new());
    let tasks = ["first", "second", "third"].map(|name| {
        let (clock, order) = (clock.clone(), &order);
        async move {
            clock.sleep(10 * MS).await;
            order.lock().unwrap().push(name);
        }
    });
    clock.block_on(join_all(tasks)).unwrap();
    assert_eq!(*order.lock().unwrap(), ["first", "second", "third"]);
    assert_eq!(clock.elapsed(), 10 * MS);
}

#[test]
fn t1_join_all_interleaves_tasks_on_virtual_time() {
    let clock = MockClock::new();
    let log = std::sync::Mutex::new(Vec::new());
    let task = |name: &'static str, step: u32| {
        let (clock, log) = (clock.clone(), &log);
        async move {
            for _ in 0..3 {
                clock.sleep(step * MS).await;
                log.lock()
                    .unwrap()
                    .push((name, clock.elapsed().as_millis()));
            }
        }
    };
    clock
        .block_on(join_all([task("a", 30), task("b", 20)]))
        .unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [
            ("b", 20),
            ("a", 30),
            ("b", 40),
            ("a", 60),
            ("b", 60),
            ("a", 90)
        ]
    );
}

#[test]
fn t1_sleep_log_tells_fired_dropped_and_pending_sleeps_apart() {
    let clock = MockClock::new();
    let zero = clock.sleep(Duration::ZERO);
    let short = clock.sleep(10 * MS);
    let cut = clock.sleep(50 * MS);
    let long = clock.sleep(Duration::from_secs(1));
    assert_eq!(clock.pending(), 3); // the zero sleep is complete from the start
    clock.advance(20 * MS);
    drop((zero, short, cut));
    let log = clock.sleep_log();
    let status: Vec<SleepStatus> = log.iter().map(|r| r.status).collect();
    assert_eq!(
        status,
        [
            SleepStatus::Fired,
            SleepStatus::Fired,
            SleepStatus::Dropped { at: 20 * MS },
            SleepStatus::Pending,
        ]
    );
    assert_eq!(
        log[3],
        SleepRecord {
            start: Duration::ZERO,
            duration: Duration::from_secs(1),
            status: SleepStatus::Pending
        }
    );
    assert_eq!(long.deadline(), Duration::from_secs(1));
}

#[test]
fn t1_block_on_reports_a_future_that_nothing_can_wake() {
    let clock = MockClock::new();
    let stalled = clock
        .block_on(async {
            clock.sleep(5 * MS).await;
            std::future::pending::<()>().await;
        })
        .unwrap_err();
    assert_eq!(stalled, Stalled { at: 5 * MS });
    assert!(
        stalled
            .to_string()
            .starts_with("the future stalled at 5ms of virtual time"),
        "{stalled}"
    );
}

#[test]
fn t1_endless_sleeps_saturate_far_in_the_future() {
    let clock = MockClock::new();
    let sleep = clock.sleep(Duration::MAX);
    assert_eq!(sleep.deadline(), FAR_FUTURE);
    assert_eq!(clock.advance_to_next(), Some(FAR_FUTURE));
    clock.advance(Duration::MAX);
    assert_eq!(clock.elapsed(), FAR_FUTURE);
    // Converting to an Instant does not overflow.
    let _ = retry_toolkit::Clock::now(&clock);
    clock.block_on(sleep).unwrap();
}

#[test]
fn t1_clones_share_one_timeline() {
    let clock = MockClock::new();
    let other = clock.clone();
    other.advance(7 * MS);
    assert_eq!(clock.elapsed(), 7 * MS);
    assert_eq!(
        clock
            .now()
            .duration_since(retry_toolkit::Clock::now(&other)),
        Duration::ZERO
    );
}
