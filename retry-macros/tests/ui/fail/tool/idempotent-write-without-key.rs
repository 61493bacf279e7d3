use retry_toolkit::tool;

#[tool(effect = "idempotent-write")]
async fn save_note(title: String, body: String) -> Result<(), String> {
    let _ = (title, body);
    Ok(())
}

fn main() {}
