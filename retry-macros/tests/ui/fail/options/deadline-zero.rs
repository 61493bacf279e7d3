use retry_toolkit::retry;

#[retry(deadline_ms = 0, attempt_timeout_ms = 1.5)]
async fn fetch() -> Result<(), retry_toolkit::LimitExceeded> {
    Ok(())
}

fn main() {}
