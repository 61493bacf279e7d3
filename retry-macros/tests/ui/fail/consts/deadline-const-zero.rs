use retry_toolkit::retry;

const DEADLINE_MS: u64 = 0;

#[retry(deadline_ms = DEADLINE_MS)]
async fn fetch() -> Result<(), retry_toolkit::LimitExceeded> {
    Ok(())
}

fn main() {}
