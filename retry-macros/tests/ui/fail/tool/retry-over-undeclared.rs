use retry_core::{retry, tool};

#[retry]
#[tool]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
