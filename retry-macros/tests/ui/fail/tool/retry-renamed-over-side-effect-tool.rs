// `#[retry]` imported under another name: the check must not depend on the spelling, in
// either order of the two attributes.
use retry_toolkit::{retry as with_retry, tool};

// `#[tool]` first, undeclared: a side effect.
#[tool]
#[with_retry(max_attempts = 3)]
async fn send_email(to: String) -> Result<String, String> {
    Ok(to)
}

// `#[retry]` first, declared a side effect.
#[with_retry(max_attempts = 3)]
#[tool(effect = "side-effect")]
async fn send_sms(to: String) -> Result<String, String> {
    Ok(to)
}

fn main() {}
