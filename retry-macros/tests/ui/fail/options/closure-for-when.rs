use retry_toolkit::retry;

#[retry(when = |_, _| true)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
