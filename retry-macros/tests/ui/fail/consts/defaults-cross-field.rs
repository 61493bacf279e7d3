use retry_toolkit::{RetryOptions, retry};

// The owner's ceiling is below the call site's base delay (O2, O3 rule 5).
const OWNER: RetryOptions = RetryOptions::new().with_max_delay_ms(50);

#[retry(base_delay_ms = 100, defaults = OWNER)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
