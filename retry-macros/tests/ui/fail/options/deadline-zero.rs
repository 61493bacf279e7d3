use retry_core::retry;

#[retry(deadline_ms = 0, attempt_timeout_ms = 1.5)]
async fn fetch() -> Result<(), retry_core::LimitExceeded> {
    Ok(())
}

fn main() {}
