use retry_core::tool;

#[tool(effect = "read")]
fn lookup(city: String) -> Result<String, String> {
    Ok(city)
}

fn main() {}
