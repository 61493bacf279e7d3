use retry_toolkit::retry;

fn is_transient(error: &String) -> bool {
    error.starts_with("503")
}

#[retry(when = is_transient)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
