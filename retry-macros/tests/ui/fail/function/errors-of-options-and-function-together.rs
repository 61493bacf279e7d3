use retry_toolkit::retry;

#[retry(max_attempts = 0)]
fn fetch() -> u32 {
    1
}

fn main() {}
