use retry_toolkit::tool;

#[tool(effect = "read")]
struct Lookup;

fn main() {}
