use retry_toolkit::retry;

#[retry(max_attempts = 0)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
