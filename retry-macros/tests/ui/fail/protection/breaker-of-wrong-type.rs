use retry_core::{RetryBudget, retry};

#[derive(Debug)]
struct Unavailable;

impl From<retry_core::CircuitOpen> for Unavailable {
    fn from(_: retry_core::CircuitOpen) -> Self {
        Unavailable
    }
}

// A budget where a breaker belongs.
static PAYMENTS: RetryBudget = RetryBudget::new();

#[retry(breaker = PAYMENTS)]
async fn pay() -> Result<(), Unavailable> {
    Err(Unavailable)
}

fn main() {}
