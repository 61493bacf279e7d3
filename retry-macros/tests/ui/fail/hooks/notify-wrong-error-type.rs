use std::time::Duration;

use retry_toolkit::retry;

fn log_retry(error: &std::io::Error, attempt: u32, delay: Duration) {
    eprintln!("attempt {attempt} failed: {error}; retrying in {delay:?}");
}

#[retry(notify = log_retry)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
