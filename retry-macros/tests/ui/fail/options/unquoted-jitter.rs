use retry_core::retry;

#[retry(jitter = equal)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
