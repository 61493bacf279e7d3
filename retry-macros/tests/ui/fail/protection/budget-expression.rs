use retry_core::retry;

// Each call would get a budget of its own: the option takes a `static`.
#[retry(budget = retry_core::RetryBudget::new())]
async fn fetch() -> Result<(), String> {
    Err("down".to_owned())
}

fn main() {}
