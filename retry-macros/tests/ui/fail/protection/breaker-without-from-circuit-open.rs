use retry_toolkit::{CircuitBreaker, retry};

#[derive(Debug)]
enum FetchError {
    Unavailable,
}

static UPSTREAM: CircuitBreaker = CircuitBreaker::new();

#[retry(breaker = UPSTREAM)]
async fn fetch() -> Result<(), FetchError> {
    Err(FetchError::Unavailable)
}

fn main() {}
