use retry_toolkit::retry;

#[retry(max_attempts)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
