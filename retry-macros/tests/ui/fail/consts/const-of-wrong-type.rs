use retry_toolkit::retry;

const ATTEMPTS: u64 = 5;

#[retry(max_attempts = ATTEMPTS)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
