use retry_toolkit::retry;

#[retry(max_attempt = 5)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
