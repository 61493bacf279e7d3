use retry_toolkit::retry;

#[retry(base_delay_ms = 500ms)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
