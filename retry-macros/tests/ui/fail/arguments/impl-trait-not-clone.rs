use retry_toolkit::retry;

#[retry]
async fn send(body: impl AsRef<[u8]>) -> Result<usize, String> {
    Ok(body.as_ref().len())
}

fn main() {}
