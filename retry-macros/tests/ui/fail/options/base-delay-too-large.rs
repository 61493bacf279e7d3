use retry_toolkit::retry;

#[retry(base_delay_ms = 18_446_744_073_709_551_616)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
