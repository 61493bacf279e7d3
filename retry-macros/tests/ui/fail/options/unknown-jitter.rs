use retry_toolkit::retry;

#[retry(jitter = "random")]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
