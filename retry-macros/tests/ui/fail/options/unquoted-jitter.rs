use retry_toolkit::retry;

#[retry(jitter = equal)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
