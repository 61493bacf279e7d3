use retry_toolkit::retry;

#[derive(Debug)]
enum FetchError {
    Unavailable,
}

#[retry(deadline_ms = 2_000)]
async fn fetch() -> Result<(), FetchError> {
    Err(FetchError::Unavailable)
}

fn main() {}
