use retry_toolkit::{RetryOptions, retry};

const OWNER: RetryOptions = RetryOptions::new().with_max_attempts(0);

#[retry(defaults = OWNER)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
