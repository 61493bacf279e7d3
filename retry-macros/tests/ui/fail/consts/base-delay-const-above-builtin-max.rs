use retry_toolkit::retry;

mod config {
    pub const BASE_DELAY_MS: u64 = 5_000;
}

#[retry(base_delay_ms = config::BASE_DELAY_MS)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
