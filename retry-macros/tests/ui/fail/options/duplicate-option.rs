use retry_toolkit::retry;

#[retry(max_attempts = 5, base_delay_ms = 200, max_attempts = 3)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
