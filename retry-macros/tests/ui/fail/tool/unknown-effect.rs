use retry_toolkit::tool;

// A close spelling gets a guess.
#[tool(effect = "idempotent_write")]
async fn save_note(key: retry_toolkit::effects::IdempotencyKey) -> Result<(), String> {
    let _ = key;
    Ok(())
}

// Anything else gets the list.
#[tool(effect = "write")]
async fn append(line: String) -> Result<(), String> {
    let _ = line;
    Ok(())
}

fn main() {}
