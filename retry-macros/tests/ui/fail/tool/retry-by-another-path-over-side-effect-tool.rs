// `#[retry]` and `#[tool]` reached by paths that do not end in their names, in either order.
mod attrs {
    pub use retry_toolkit::retry as again;
    pub use retry_toolkit::tool as declare;
}

#[attrs::again(max_attempts = 3)]
#[attrs::declare(effect = "side-effect")]
async fn send_email(to: String) -> Result<String, String> {
    Ok(to)
}

#[crate::attrs::declare]
#[crate::attrs::again]
async fn send_sms(to: String) -> Result<String, String> {
    Ok(to)
}

fn main() {}
