use retry_core::tool;

#[tool(effect = "read")]
struct Lookup;

fn main() {}
