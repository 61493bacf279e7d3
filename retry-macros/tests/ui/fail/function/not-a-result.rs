use retry_toolkit::retry;

#[retry]
async fn fetch() -> Option<u32> {
    None
}

fn main() {}
