use retry_toolkit::tool;

#[tool(effect = "read", name = "look up")]
async fn lookup(city: String) -> Result<String, String> {
    Ok(city)
}

#[tool(effect = "read")]
async fn météo(city: String) -> Result<String, String> {
    Ok(city)
}

fn main() {}
