use retry_toolkit::{CircuitBreaker, CircuitOpen, retry};

#[derive(Debug)]
struct Down;

impl From<CircuitOpen> for Down {
    fn from(_: CircuitOpen) -> Self {
        Down
    }
}

static UPSTREAM: CircuitBreaker = CircuitBreaker::new();

fn counts(_: &Down, _attempt: u32) -> bool {
    true
}

#[retry(breaker = UPSTREAM, breaker_counts = counts)]
async fn fetch() -> Result<(), Down> {
    Err(Down)
}

fn main() {}
