use retry_core::retry;

#[retry(max_attempts)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
