use retry_toolkit::{RetryBudget, retry};

// A `const` is a new budget wherever it is used: sharing needs a `static`.
const BUDGET: RetryBudget = RetryBudget::new();

#[retry(budget = BUDGET)]
async fn fetch() -> Result<(), String> {
    Err("down".to_owned())
}

fn main() {}
