use retry_toolkit::retry;

#[retry]
async fn fetch() {}

fn main() {}
