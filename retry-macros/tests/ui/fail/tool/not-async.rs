use retry_toolkit::tool;

#[tool(effect = "read")]
fn lookup(city: String) -> Result<String, String> {
    Ok(city)
}

fn main() {}
