use retry_toolkit::tool;

#[tool(effect = "read")]
async unsafe fn peek(address: usize) -> Result<u8, String> {
    let _ = address;
    Ok(0)
}

fn main() {}
