//! `#[retry(budget = …, breaker = …)]` (SPEC B3, X1): a `#[retry]` function sharing a retry
//! budget and a circuit breaker with every other call, on paused tokio time.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_toolkit::{CircuitBreaker, CircuitOpen, CircuitState, RetryBudget, retry};

#[derive(Debug, PartialEq)]
enum ApiError {
    Unavailable,
    NotFound,
    Open(CircuitOpen),
}

impl From<CircuitOpen> for ApiError {
    fn from(open: CircuitOpen) -> Self {
        ApiError::Open(open)
    }
}

fn is_outage(error: &ApiError) -> bool {
    *error == ApiError::Unavailable
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

static BREAKER: CircuitBreaker = CircuitBreaker::with_config(
    match CircuitBreaker::builder()
        .name("api")
        .consecutive_failures(4)
        .break_duration(Duration::from_secs(30))
        .validate()
    {
        Ok(config) => config,
        Err(e) => panic!("{}", e.message()),
    },
);
static BREAKER_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 3, breaker = BREAKER, breaker_counts = is_outage)]
async fn through_the_breaker(error: fn() -> ApiError) -> Result<(), ApiError> {
    BREAKER_CALLS.fetch_add(1, Ordering::SeqCst);
    Err(error())
}

#[tokio::test(start_paused = true)]
async fn b3_a_retry_function_stops_calling_once_the_circuit_opens() {
    // Errors that do not count leave the circuit closed.
    for _ in 0..3 {
        assert_eq!(
            through_the_breaker(|| ApiError::NotFound).await,
            Err(ApiError::NotFound)
        );
    }
    assert_eq!(BREAKER.state(now()), CircuitState::Closed);
    assert_eq!(BREAKER_CALLS.swap(0, Ordering::SeqCst), 9);

    // 3 outages, then a fourth opens the circuit: its retry is refused and the last error
    // returned.
    assert_eq!(
        through_the_breaker(|| ApiError::Unavailable).await,
        Err(ApiError::Unavailable)
    );
    assert_eq!(
        through_the_breaker(|| ApiError::Unavailable).await,
        Err(ApiError::Unavailable)
    );
    assert_eq!(BREAKER.state(now()), CircuitState::Open);
    assert_eq!(BREAKER_CALLS.swap(0, Ordering::SeqCst), 4);

    // Open: refused before the body runs, as the function's own error.
    let Err(ApiError::Open(open)) = through_the_breaker(|| ApiError::Unavailable).await else {
        panic!("not refused");
    };
    assert_eq!(open.breaker(), "api");
    assert_eq!(BREAKER_CALLS.load(Ordering::SeqCst), 0);
}

/// Settings read at run time: a `LazyLock` works too.
static BUDGET: LazyLock<RetryBudget> = LazyLock::new(|| {
    RetryBudget::builder()
        .ratio(0.5)
        .min_per_sec(0)
        .build()
        .unwrap_or_default()
});
static BUDGET_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 4, budget = BUDGET)]
async fn within_the_budget() -> Result<(), ApiError> {
    BUDGET_CALLS.fetch_add(1, Ordering::SeqCst);
    Err(ApiError::Unavailable)
}

#[tokio::test(start_paused = true)]
async fn b1_a_retry_function_spends_a_shared_budget_and_returns_the_last_error() {
    let start = tokio::time::Instant::now();
    for _ in 0..4 {
        assert_eq!(within_the_budget().await, Err(ApiError::Unavailable));
    }
    // Four calls earn two retries: 6 attempts, not 16.
    assert_eq!(BUDGET_CALLS.load(Ordering::SeqCst), 6);
    let snapshot = BUDGET.snapshot(now());
    assert_eq!((snapshot.requests, snapshot.retries), (4, 2));
    // A refused retry does not wait: only the two admitted retries slept.
    assert!(tokio::time::Instant::now() - start < Duration::from_millis(400));
}

static BOTH_BUDGET: RetryBudget = RetryBudget::new();
static BOTH_BREAKER: CircuitBreaker = CircuitBreaker::new();

/// Both, with a deadline: every layer composes.
#[retry(budget = BOTH_BUDGET, breaker = BOTH_BREAKER, deadline_ms = 10_000)]
async fn everything(ok: bool) -> Result<u32, Limited> {
    if ok { Ok(7) } else { Err(Limited::Down) }
}

#[derive(Debug, PartialEq)]
enum Limited {
    Down,
    Open,
    Limit,
}

impl From<CircuitOpen> for Limited {
    fn from(_: CircuitOpen) -> Self {
        Limited::Open
    }
}

impl From<retry_toolkit::LimitExceeded> for Limited {
    fn from(_: retry_toolkit::LimitExceeded) -> Self {
        Limited::Limit
    }
}

#[tokio::test(start_paused = true)]
async fn b3_budget_breaker_and_deadline_together() {
    assert_eq!(everything(true).await, Ok(7));
    // Three attempts fail; with the default breaker (5 in a row) the circuit stays closed.
    assert_eq!(everything(false).await, Err(Limited::Down));
    assert_eq!(BOTH_BREAKER.state(now()), CircuitState::Closed);
    assert_eq!(everything(false).await, Err(Limited::Down));
    assert_eq!(BOTH_BREAKER.state(now()), CircuitState::Open);
    assert_eq!(everything(true).await, Err(Limited::Open));
}

static BLOCKING_BREAKER: CircuitBreaker = CircuitBreaker::with_config(
    match CircuitBreaker::builder().consecutive_failures(1).validate() {
        Ok(config) => config,
        Err(e) => panic!("{}", e.message()),
    },
);
static BLOCKING_CALLS: AtomicU32 = AtomicU32::new(0);

/// A plain `fn` under `#[retry]` is the blocking loop: protected the same way. (The first
/// failure opens the circuit, so no wait is ever slept.)
#[retry(max_attempts = 5, base_delay_ms = 1, max_delay_ms = 1, breaker = BLOCKING_BREAKER)]
fn blocking_call() -> Result<(), ApiError> {
    BLOCKING_CALLS.fetch_add(1, Ordering::SeqCst);
    Err(ApiError::Unavailable)
}

#[test]
fn b3_a_blocking_retry_function_stops_when_the_circuit_opens() {
    assert_eq!(blocking_call(), Err(ApiError::Unavailable));
    assert_eq!(
        BLOCKING_CALLS.swap(0, Ordering::SeqCst),
        1,
        "its failure opened the circuit"
    );
    assert!(matches!(blocking_call(), Err(ApiError::Open(_))));
    assert_eq!(BLOCKING_CALLS.load(Ordering::SeqCst), 0);
}
