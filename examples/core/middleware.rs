//! The timeline of a middleware stack against a scripted flaky task, then a scheduler run.
//!
//! ```sh
//! cargo run --example middleware
//! ```
//!
//! Time is tokio's paused clock, so the example prints a millisecond-exact timeline at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_toolkit::middleware::{with_fallback_when, with_retry, with_timeout};
use retry_toolkit::{
    ExponentialBackoff, Jitter, OnError, RetryOptions, Scheduler, SchedulerOptions, Task,
    TaskContext, TaskError, TaskEvent, TaskFailure, TaskOutcome,
};
use tokio::time::Instant;

/// Prints one line of the timeline, stamped with the virtual time since `start`.
fn at(start: Instant, line: impl std::fmt::Display) {
    let ms = (Instant::now() - start).as_millis();
    println!("  [{ms:>5} ms] {line}");
}

/// A flaky upstream: call 1 fails with a retryable 503 after 40 ms, call 2 hangs (but
/// watches its cancellation signal), call 3 answers after 30 ms.
fn flaky(
    start: Instant,
) -> impl Task<Output = String, Future: Send> + Clone + Send + Sync + 'static {
    let calls = Arc::new(AtomicU32::new(0));
    move |cx: TaskContext| {
        let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            at(start, format!("call {call} starts"));
            let outcome = match call {
                1 => cx
                    .sleep(Duration::from_millis(40))
                    .await
                    .and(Err(TaskError::new("503 Service Unavailable")
                        .with_retryable(true)
                        .into())),
                2 => cx
                    .sleep(Duration::from_secs(60))
                    .await
                    .map(|()| "late".to_owned()),
                _ => cx
                    .sleep(Duration::from_millis(30))
                    .await
                    .map(|()| format!("fresh data (call {call})")),
            };
            match &outcome {
                Ok(value) => at(start, format!("call {call} answers: {value}")),
                Err(e) => at(start, format!("call {call} fails: {e}")),
            }
            outcome
        }
    }
}

fn cached(
    start: Instant,
) -> impl Task<Output = String, Future: Send> + Clone + Send + Sync + 'static {
    move |_: TaskContext| async move {
        at(start, "fallback answers from the cache");
        Ok::<_, TaskFailure>("cached data".to_owned())
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A deterministic backoff: 100, 200, 400 ms … (no jitter) so the timeline is readable.
    let backoff = ExponentialBackoff::builder().jitter(Jitter::None).build()?;
    assert_eq!(backoff.base(), ExponentialBackoff::DEFAULT.base());
    // 4 attempts in all: the first and 3 retries.
    let policy = RetryOptions::new().with_max_attempts(4).resolve()?;

    println!("1. with_fallback(with_timeout(with_retry(with_timeout(flaky, 200 ms)), 2 s), cache)");
    println!("   4 attempts, exponential backoff, timeouts retried, fallback admits timeouts:");
    let start = Instant::now();
    let per_attempt = with_timeout(flaky(start), Duration::from_millis(200))?;
    let retried = with_retry(per_attempt, policy)
        .backoff(backoff)
        .when(|e, _| e.is_timeout() || e.is_retryable())
        .notify(move |e, attempt, delay| {
            let max = policy.max_attempts();
            at(
                start,
                format!("attempt {attempt}/{max} failed, next in {delay:?}: {e}"),
            )
        });
    let stack = with_fallback_when(
        with_timeout(retried, Duration::from_secs(2))?,
        cached(start),
        |e| e.is_timeout(),
    );
    let value = stack.run().await?;
    at(start, format!("result: {value}"));

    println!();
    println!("2. the same stack with a 250 ms overall budget: the fallback answers");
    let start = Instant::now();
    let retried = with_retry(
        with_timeout(flaky(start), Duration::from_millis(200))?,
        policy,
    )
    .backoff(backoff)
    .when(|e, _| e.is_timeout() || e.is_retryable());
    let stack = with_fallback_when(
        with_timeout(retried, Duration::from_millis(250))?,
        cached(start),
        |e| e.is_timeout(),
    );
    let value = stack.run().await?;
    at(start, format!("result: {value}"));

    println!();
    println!("3. a scheduler, concurrency 1, on_error = stop: four tasks, the second fails");
    let start = Instant::now();
    let scheduler = Scheduler::builder()
        .options(
            SchedulerOptions::new()
                .with_concurrency(1)
                .with_on_error(OnError::Stop),
        )
        .subscribe(move |event| match event {
            TaskEvent::Registered { id } => at(start, format!("{id} registered")),
            TaskEvent::Started { id } => at(start, format!("{id} started")),
            TaskEvent::Done {
                id,
                outcome: TaskOutcome::Success,
            } => at(start, format!("{id} done: success")),
            TaskEvent::Done {
                id,
                outcome: TaskOutcome::Error { error, retryable },
            } => at(
                start,
                format!("{id} done: error (retryable: {retryable}): {error}"),
            ),
        })
        .build()?;
    let handles: Vec<_> = (1..=4)
        .map(|n| {
            scheduler.submit(move |cx: TaskContext| async move {
                cx.sleep(Duration::from_millis(10)).await?;
                if n == 2 {
                    Err(TaskFailure::from("boom"))
                } else {
                    Ok(n)
                }
            })
        })
        .collect();
    for handle in handles {
        let id = handle.id();
        match handle.await {
            Ok(n) => println!("  {id} result: {n}"),
            Err(e) => println!("  {id} result: error: {e}"),
        }
    }
    Ok(())
}
