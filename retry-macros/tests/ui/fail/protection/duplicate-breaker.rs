use retry_toolkit::{CircuitBreaker, CircuitOpen, retry};

#[derive(Debug)]
struct Down;

impl From<CircuitOpen> for Down {
    fn from(_: CircuitOpen) -> Self {
        Down
    }
}

static A: CircuitBreaker = CircuitBreaker::new();
static B: CircuitBreaker = CircuitBreaker::new();

#[retry(breaker = A, breaker = B)]
async fn fetch() -> Result<(), Down> {
    Err(Down)
}

fn main() {}
