// `#[tool]` imported under another name: the check must not depend on the spelling, in
// either order of the two attributes.
use retry_toolkit::{retry, tool as declare};

// `#[retry]` first, declared a side effect.
#[retry]
#[declare(effect = "side-effect")]
async fn send_email(to: String) -> Result<String, String> {
    Ok(to)
}

// `#[tool]` first, undeclared: a side effect.
#[declare]
#[retry(max_attempts = 3)]
async fn send_sms(to: String) -> Result<String, String> {
    Ok(to)
}

fn main() {}
