use retry_toolkit::retry;

#[retry(base_delay_ms = 500, max_delay_ms = 100)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
