use retry_toolkit::retry;

#[retry(max_attempts = 5_000_000_000)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
