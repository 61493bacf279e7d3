use retry_core::retry;

#[retry]
fn fetch() -> Result<(), String> {
    Ok(())
}

fn main() {}
