use retry_toolkit::retry;

#[retry(max_attempts = 2.5)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
