use retry_toolkit::retry;

#[retry]
struct Client;

fn main() {}
