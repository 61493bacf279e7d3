use retry_toolkit::retry;

trait Api {
    #[retry]
    async fn fetch(&self) -> Result<(), String>;
}

fn main() {}
