use retry_toolkit::retry;

#[retry(max_attempts = 1e400)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
