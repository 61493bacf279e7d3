use retry_toolkit::retry;

#[retry(max_attempts = -999_999_999_999_999_999_999_999_999_999_999_999_999_999)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
