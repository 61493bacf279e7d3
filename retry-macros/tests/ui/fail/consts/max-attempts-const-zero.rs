use retry_toolkit::retry;

const ATTEMPTS: u32 = 0;

#[retry(max_attempts = ATTEMPTS)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
