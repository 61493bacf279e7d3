use retry_toolkit::tool;

#[tool(effect = "read")]
async fn lookup(city: String) -> String {
    city
}

#[tool(effect = "read")]
async fn ping() {}

fn main() {}
