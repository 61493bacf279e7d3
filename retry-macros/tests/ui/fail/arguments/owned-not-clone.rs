use retry_toolkit::retry;

struct Request {
    body: Vec<u8>,
}

#[retry]
async fn send(request: Request) -> Result<usize, String> {
    Ok(request.body.len())
}

fn main() {}
