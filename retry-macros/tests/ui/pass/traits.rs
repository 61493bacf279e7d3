//! `async fn` in traits (Rust 1.75+): `#[retry]` on an implementation and on a default body.
#![deny(warnings)]

use retry_toolkit::retry;

trait Api {
    async fn fetch(&self, id: u64) -> Result<String, String>;

    #[retry(max_attempts = 2)]
    async fn fetch_default(&self, id: u64) -> Result<String, String> {
        self.fetch(id).await
    }
}

struct Client;

impl Api for Client {
    #[retry(max_attempts = 5)]
    async fn fetch(&self, id: u64) -> Result<String, String> {
        Ok(id.to_string())
    }
}

fn main() {
    drop(Client.fetch(1));
    drop(Client.fetch_default(2));
}
