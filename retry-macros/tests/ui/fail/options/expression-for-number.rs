use retry_toolkit::retry;

const SECOND: u64 = 1000;

#[retry(max_delay_ms = 10 * SECOND)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
