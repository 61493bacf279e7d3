// The conflict is reported in the same compile as the attributes' other errors, in either
// order, with `#[retry]` renamed.
use retry_toolkit::{retry as with_retry, tool};

// `#[tool]` fails on the name; the `#[retry]` below it still expands, and is refused.
#[tool(name = "send email")]
#[with_retry]
async fn send_email(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

// `#[retry]` fails on an option; the `#[tool]` below it still sees a retry.
#[with_retry(max_attempts = 0)]
#[tool(effect = "side-effect")]
async fn send_sms(to: String) -> Result<(), String> {
    let _ = to;
    Ok(())
}

fn main() {}
