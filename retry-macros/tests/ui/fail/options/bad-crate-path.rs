use retry_toolkit::retry;

#[retry(crate = "retry core")]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
