use retry_core::retry;

#[retry]
struct Client;

fn main() {}
