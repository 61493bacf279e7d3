// A plain (blocking) `fn` is retried too: free functions, methods, borrowed and owned
// arguments, options and hooks, and a deadline.
use std::time::Duration;

use retry_toolkit::{LimitExceeded, retry};

#[derive(Debug)]
enum Error {
    Busy,
    Limit(LimitExceeded),
}

impl From<LimitExceeded> for Error {
    fn from(limit: LimitExceeded) -> Self {
        Error::Limit(limit)
    }
}

fn transient(error: &Error, _next_attempt: u32) -> bool {
    matches!(error, Error::Busy)
}

fn log(_: &Error, _attempt: u32, _delay: Duration) {}

#[retry]
fn fetch() -> Result<(), String> {
    Ok(())
}

#[retry(max_attempts = 5, base_delay_ms = 1, max_delay_ms = 2, jitter = "none", when = transient, notify = log, deadline_ms = 1_000)]
fn read(name: String, buffer: &mut Vec<u8>) -> Result<usize, Error> {
    buffer.extend_from_slice(name.as_bytes());
    if buffer.is_empty() { Err(Error::Busy) } else { Ok(buffer.len()) }
}

struct Device {
    reads: u32,
}

impl Device {
    #[retry(max_attempts = 3)]
    fn poll(&mut self) -> Result<u32, Error> {
        self.reads += 1;
        if self.reads < 2 {
            return Err(Error::Busy);
        }
        Ok(self.reads)
    }

    #[retry]
    fn peek(&self) -> std::io::Result<&u32> {
        Ok(&self.reads)
    }
}

fn main() {
    let _ = fetch();
    let _ = read("a".to_owned(), &mut Vec::new());
    let mut device = Device { reads: 0 };
    let _ = device.poll();
    let _ = device.peek();
}
