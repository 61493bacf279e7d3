use retry_core::retry;

#[retry]
async fn fetch() -> Option<u32> {
    None
}

fn main() {}
