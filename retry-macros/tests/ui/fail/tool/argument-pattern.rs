use retry_toolkit::tool;

#[tool(effect = "read")]
async fn add((a, b): (i64, i64), _: bool) -> Result<i64, String> {
    Ok(a + b)
}

fn main() {}
