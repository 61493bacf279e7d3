use retry_toolkit::retry;

#[async_trait::async_trait]
trait Api {
    async fn fetch(&self) -> Result<(), String>;
}

struct Client;

#[async_trait::async_trait]
impl Api for Client {
    #[retry]
    async fn fetch(&self) -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
