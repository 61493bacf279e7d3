use retry_toolkit::retry;

// The built-in `base_delay_ms` is 100.
#[retry(max_delay_ms = 50)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
