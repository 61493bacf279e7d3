// Two `#[retry]` on one function multiply the attempts (3 × 3 = 9 runs of the body), however
// each is spelled.
use retry_toolkit::retry;
use retry_toolkit::retry as with_retry;

#[retry]
#[retry]
async fn twice() -> Result<(), String> {
    Ok(())
}

#[with_retry(max_attempts = 3)]
#[retry_toolkit::retry(max_attempts = 3)]
async fn renamed() -> Result<(), String> {
    Ok(())
}

#[retry]
#[cfg_attr(all(), with_retry)]
async fn behind_cfg_attr() -> Result<(), String> {
    Ok(())
}

fn main() {}
