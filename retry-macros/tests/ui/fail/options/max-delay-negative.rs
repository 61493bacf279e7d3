use retry_toolkit::retry;

#[retry(max_delay_ms = -100)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
