use retry_toolkit::{retry, tool};

#[retry(max_attempts = 3)]
#[tool(effect = "side-effect")]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
