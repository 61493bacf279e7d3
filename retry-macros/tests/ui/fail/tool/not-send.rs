use std::rc::Rc;

use retry_toolkit::tool;

#[tool(effect = "read")]
async fn lookup(city: String) -> Result<String, String> {
    let shared = Rc::new(city);
    tokio::task::yield_now().await;
    Ok(shared.to_string())
}

fn main() {}
