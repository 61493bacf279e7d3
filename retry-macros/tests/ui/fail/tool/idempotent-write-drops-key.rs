use retry_toolkit::effects::IdempotencyKey;
use retry_toolkit::tool;

#[tool(effect = "idempotent-write")]
async fn save_note(title: String, _: IdempotencyKey) -> Result<(), String> {
    let _ = title;
    Ok(())
}

fn main() {}
