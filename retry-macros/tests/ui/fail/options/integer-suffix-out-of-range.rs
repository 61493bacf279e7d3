use retry_toolkit::{retry, tool};

// `300u8` is not a `u8`: the suffix must not be ignored.
#[retry(max_attempts = 300u8, base_delay_ms = 70_000i16)]
async fn fetch() -> Result<(), String> {
    Ok(())
}

#[tool(effect = "read", timeout_ms = -1u32)]
async fn lookup() -> Result<(), String> {
    Ok(())
}

fn main() {}
