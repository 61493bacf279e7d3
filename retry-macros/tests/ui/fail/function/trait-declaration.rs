use retry_core::retry;

trait Api {
    #[retry]
    async fn fetch(&self) -> Result<(), String>;
}

fn main() {}
