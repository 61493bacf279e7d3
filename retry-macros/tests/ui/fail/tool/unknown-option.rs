use retry_toolkit::tool;

#[tool(efect = "read", requires_approval = "yes")]
async fn lookup(city: String) -> Result<String, String> {
    Ok(city)
}

fn main() {}
