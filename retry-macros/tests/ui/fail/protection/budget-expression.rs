use retry_toolkit::retry;

// Each call would get a budget of its own: the option takes a `static`.
#[retry(budget = retry_toolkit::RetryBudget::new())]
async fn fetch() -> Result<(), String> {
    Err("down".to_owned())
}

fn main() {}
