// By path, with a name: still the same function, still a side effect.
#[retry_toolkit::tool(name = "send-email")]
#[retry_toolkit::retry]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
