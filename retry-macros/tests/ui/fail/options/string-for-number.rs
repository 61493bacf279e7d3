use retry_toolkit::retry;

#[retry(max_attempts = "5")]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
