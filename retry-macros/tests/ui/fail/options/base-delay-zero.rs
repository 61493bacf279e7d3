use retry_toolkit::retry;

#[retry(base_delay_ms = 0)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
