use std::time::Duration;

use retry_toolkit::retry;

/// Returns a wait, not an optional one: every error would carry a hint.
fn server_hint(_error: &String) -> Duration {
    Duration::from_secs(1)
}

#[retry(retry_after = server_hint)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
