//! A budget and a breaker as statics (built in const, or lazily from run-time settings),
//! with a predicate and a deadline, on a free function and a method.

use std::sync::LazyLock;
use std::time::Duration;

use retry_toolkit::{CircuitBreaker, CircuitOpen, LimitExceeded, RetryBudget, retry};

#[derive(Debug)]
enum Error {
    Down,
    Open(CircuitOpen),
    Limit(LimitExceeded),
}

impl From<CircuitOpen> for Error {
    fn from(open: CircuitOpen) -> Self {
        Error::Open(open)
    }
}

impl From<LimitExceeded> for Error {
    fn from(limit: LimitExceeded) -> Self {
        Error::Limit(limit)
    }
}

static BUDGET: RetryBudget = RetryBudget::with_config(
    match RetryBudget::builder().ratio(0.1).validate() {
        Ok(config) => config,
        Err(e) => panic!("{}", e.message()),
    },
);
static BREAKER: LazyLock<CircuitBreaker> = LazyLock::new(|| {
    CircuitBreaker::builder()
        .break_duration(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
});

mod shared {
    pub static BUDGET: retry_toolkit::RetryBudget = retry_toolkit::RetryBudget::new();
}

fn is_down(error: &Error) -> bool {
    matches!(error, Error::Down)
}

#[retry(budget = BUDGET, breaker = BREAKER, breaker_counts = is_down, deadline_ms = 5_000)]
async fn fetch(id: u32) -> Result<u32, Error> {
    if id == 0 { Err(Error::Down) } else { Ok(id) }
}

#[retry(budget = shared::BUDGET)]
async fn budget_only() -> Result<(), String> {
    Ok(())
}

struct Client;

impl Client {
    #[retry(breaker = BREAKER)]
    async fn call(&self) -> Result<(), Error> {
        Ok(())
    }
}

fn main() {
    let _ = (fetch(1), budget_only(), Client.call());
    let _ = (Error::Down, Error::Open, Error::Limit);
}
