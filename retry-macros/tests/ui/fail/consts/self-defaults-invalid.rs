use retry_toolkit::{RetryOptions, retry};

struct Client;

impl Client {
    const RETRY: RetryOptions = RetryOptions::new().with_base_delay_ms(0);

    // A path through `Self` is evaluated when the method is instantiated: here, by `main`.
    #[retry(defaults = Self::RETRY)]
    async fn fetch(&self) -> Result<(), String> {
        Ok(())
    }
}

fn main() {
    drop(Client.fetch());
}
