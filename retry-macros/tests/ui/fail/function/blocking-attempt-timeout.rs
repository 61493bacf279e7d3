use retry_toolkit::{LimitExceeded, retry};

#[derive(Debug)]
struct Error;

impl From<LimitExceeded> for Error {
    fn from(_: LimitExceeded) -> Self {
        Error
    }
}

#[retry(attempt_timeout_ms = 100)]
fn read() -> Result<(), Error> {
    Ok(())
}

fn main() {}
