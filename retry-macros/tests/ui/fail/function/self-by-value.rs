use retry_toolkit::retry;

struct Job;

impl Job {
    #[retry]
    async fn run(self) -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
