//! The loop's metrics (V3): retries and loops that gave up, with why, read back from the
//! `metrics` facade's debugging recorder installed for the test's thread. Time is tokio's
//! paused clock: no test sleeps.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use retry_toolkit::{CircuitBreaker, Jitter, RetryOptions, RetryPolicy};

fn policy(attempts: u32) -> RetryPolicy {
    // No jitter: after attempt k the wait is 100 ms · 2^k.
    RetryOptions::new()
        .with_max_attempts(attempts)
        .with_jitter(Jitter::None)
        .resolve()
        .unwrap()
}

/// A counter's name, labels and count.
type Count = (String, Vec<(String, String)>, u64);

/// Each counter recorded since the last read (reading resets them), by name and labels.
fn counts(snapshotter: &Snapshotter) -> Vec<Count> {
    let mut all: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let labels = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            Some((key.key().name().to_owned(), labels, n))
        })
        .filter(|(_, _, n)| *n > 0)
        .collect();
    all.sort();
    all
}

fn gave_up(reason: &str, n: u64) -> Count {
    (
        "retry_gave_up_total".to_owned(),
        vec![("reason".to_owned(), reason.to_owned())],
        n,
    )
}

fn retries(n: u64) -> Count {
    ("retry_retries_total".to_owned(), Vec::new(), n)
}

#[tokio::test(start_paused = true)]
async fn v3_a_success_after_retries_counts_the_retries_only() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let out: Result<u32, String> = policy(4)
        .retry(|n| async move {
            if n < 3 {
                Err(format!("try {n}"))
            } else {
                Ok(n)
            }
        })
        .await;
    assert_eq!(out, Ok(3));
    assert_eq!(counts(&snapshotter), [retries(2)]);

    // A first-attempt success counts nothing.
    let out: Result<u32, String> = policy(4).retry(|n| async move { Ok(n) }).await;
    assert_eq!(out, Ok(1));
    assert_eq!(counts(&snapshotter), []);
}

#[tokio::test(start_paused = true)]
async fn v3_a_loop_that_gives_up_counts_why() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let out: Result<(), String> = policy(3)
        .retry(|n| async move { Err(format!("try {n}")) })
        .await;
    assert!(out.is_err());
    assert_eq!(counts(&snapshotter), [gave_up("exhausted", 1), retries(2)]);

    let out: Result<(), String> = policy(3)
        .retry(|n| async move { Err(format!("try {n}")) })
        .when(|_, _| false)
        .await;
    assert!(out.is_err());
    assert_eq!(counts(&snapshotter), [gave_up("not_retryable", 1)]);

    // Waits of 200 ms, then 400 ms: the second would end past the 500 ms deadline.
    let out = policy(10)
        .retry(|n| async move { Err::<(), _>(format!("try {n}")) })
        .deadline(Duration::from_millis(500))
        .await;
    assert!(out.is_err());
    assert_eq!(counts(&snapshotter), [gave_up("deadline", 1), retries(1)]);

    let out = policy(2)
        .retry(|_| std::future::pending::<Result<(), String>>())
        .attempt_timeout(Duration::from_millis(50))
        .await;
    assert!(out.is_err());
    assert_eq!(
        counts(&snapshotter),
        [gave_up("attempt_timeout", 1), retries(1)]
    );

    let out = policy(3)
        .retry(|_| std::future::pending::<Result<(), String>>())
        .cancel_on(std::future::ready(()))
        .await;
    assert!(out.is_err());
    assert_eq!(counts(&snapshotter), [gave_up("cancelled", 1)]);
}

#[tokio::test(start_paused = true)]
async fn v3_an_open_circuit_is_a_reason_of_its_own() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let breaker = CircuitBreaker::builder()
        .consecutive_failures(2)
        .build()
        .unwrap();
    let out = policy(5)
        .retry(|n| async move { Err::<(), _>(format!("try {n}")) })
        .breaker(&breaker)
        .await;
    // The second failure opens the circuit, which refuses the retry after it.
    assert!(out.is_err());
    assert_eq!(
        counts(&snapshotter),
        [gave_up("circuit_open", 1), retries(1)]
    );

    // While it is open, a call is refused before its first attempt: counted too.
    let out = policy(5)
        .retry(|n| async move { Err::<(), _>(format!("try {n}")) })
        .breaker(&breaker)
        .await;
    assert!(out.is_err());
    assert_eq!(counts(&snapshotter), [gave_up("circuit_open", 1)]);
}
