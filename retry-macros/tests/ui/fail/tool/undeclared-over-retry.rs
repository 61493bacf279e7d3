// By path, with a name: still the same function, still a side effect.
#[retry_core::tool(name = "send-email")]
#[retry_core::retry]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
