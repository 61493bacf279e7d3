// `#[retry]` and `#[tool]` behind `cfg_attr`, renamed, in either order.
use retry_toolkit::{retry as with_retry, tool as declare};

#[cfg_attr(all(), with_retry(max_attempts = 3))]
#[declare(effect = "side-effect")]
async fn send_email(to: String) -> Result<String, String> {
    Ok(to)
}

#[cfg_attr(all(), declare)]
#[cfg_attr(all(), with_retry(max_attempts = 3))]
async fn send_sms(to: String) -> Result<String, String> {
    Ok(to)
}

// Both in one `cfg_attr`.
#[cfg_attr(all(), declare(effect = "side-effect"), with_retry)]
async fn send_fax(to: String) -> Result<String, String> {
    Ok(to)
}

fn main() {}
