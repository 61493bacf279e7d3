use retry_toolkit::tool;

#[tool(effect = "read", timeout_ms = 0)]
async fn lookup(city: String) -> Result<String, String> {
    Ok(city)
}

const NO_TIME: u64 = 0;

#[tool(effect = "read", timeout_ms = NO_TIME)]
async fn search(query: String) -> Result<String, String> {
    Ok(query)
}

fn main() {}
