use retry_core::retry;

#[retry]
async fn fetch() {}

fn main() {}
