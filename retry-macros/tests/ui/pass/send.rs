//! The future of a `#[retry]` function is `Send` when its body is: it can be spawned.
#![deny(warnings)]

use std::sync::Arc;

use retry_toolkit::{LimitExceeded, retry};

struct Service {
    name: Arc<str>,
}

impl Service {
    #[retry(deadline_ms = 1_000, attempt_timeout_ms = 100)]
    async fn call(&self, payload: Vec<u8>) -> Result<usize, LimitExceeded> {
        Ok(payload.len() + self.name.len())
    }
}

fn assert_send<F: std::future::Future + Send>(future: F) -> F {
    future
}

fn main() {
    let service = Service { name: "s".into() };
    drop(assert_send(service.call(vec![1, 2, 3])));
}
