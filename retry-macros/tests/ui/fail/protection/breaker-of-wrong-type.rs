use retry_toolkit::{RetryBudget, retry};

#[derive(Debug)]
struct Unavailable;

impl From<retry_toolkit::CircuitOpen> for Unavailable {
    fn from(_: retry_toolkit::CircuitOpen) -> Self {
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
