use retry_core::retry;

#[retry(crate = "retry core")]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
