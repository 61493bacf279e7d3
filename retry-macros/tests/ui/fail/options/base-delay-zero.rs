use retry_core::retry;

#[retry(base_delay_ms = 0)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
