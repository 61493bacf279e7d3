use retry_toolkit::tool;

struct Mailer;

impl Mailer {
    #[tool]
    async fn send_email(to: String) -> Result<(), String> {
        let _ = to;
        Ok(())
    }
}

fn main() {}
