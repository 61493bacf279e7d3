use retry_toolkit::retry;

#[retry]
async fn send<B: AsRef<[u8]>>(body: B) -> Result<usize, String> {
    Ok(body.as_ref().len())
}

fn main() {}
