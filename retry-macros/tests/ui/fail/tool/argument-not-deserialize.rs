use retry_toolkit::tool;

struct City(String);

#[tool(effect = "read")]
async fn lookup(city: City) -> Result<String, String> {
    Ok(city.0)
}

fn main() {}
