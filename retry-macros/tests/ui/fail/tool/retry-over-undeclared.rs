use retry_toolkit::{retry, tool};

#[retry]
#[tool]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
