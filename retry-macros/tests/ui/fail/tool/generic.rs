use retry_toolkit::tool;

#[tool(effect = "read")]
async fn parse<T: std::str::FromStr, const N: usize>(
    text: String,
    extra: impl AsRef<str>,
) -> Result<String, String> {
    Ok(format!("{text}{}", extra.as_ref()))
}

fn main() {}
