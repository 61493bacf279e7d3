use retry_toolkit::retry;

// The built-in `max_delay_ms` is 3000: options are layered before the cross-field rule (O2).
#[retry(base_delay_ms = 5000)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
