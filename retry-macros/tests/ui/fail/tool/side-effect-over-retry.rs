use retry_toolkit::{retry, tool};

#[tool(effect = "side-effect")]
#[retry(max_attempts = 3)]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
