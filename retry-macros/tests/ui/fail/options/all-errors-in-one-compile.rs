use retry_toolkit::retry;

#[retry(max_attempts = 0, base_delay_ms = 2.5, jiter = "full", max_delay_ms = "3000", max_attempts = 4)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
