use retry_core::retry;

#[retry(jitter = "random")]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
