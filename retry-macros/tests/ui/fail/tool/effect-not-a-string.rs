use retry_toolkit::tool;

#[tool(effect = read)]
async fn lookup(city: String) -> Result<String, String> {
    Ok(city)
}

fn main() {}
