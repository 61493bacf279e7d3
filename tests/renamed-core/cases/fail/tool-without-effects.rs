//! `#[tool]` without the core's `effects` feature: one error, naming the feature and the
//! Cargo line (under the name this manifest gives the core), and nothing about private items.

#[rc::tool(effect = "read")]
async fn search(query: String) -> Result<String, String> {
    Ok(query)
}

fn main() {
    drop(search(String::new()));
}
