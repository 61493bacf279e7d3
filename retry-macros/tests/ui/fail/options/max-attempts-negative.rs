use retry_toolkit::retry;

#[retry(max_attempts = -1)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
