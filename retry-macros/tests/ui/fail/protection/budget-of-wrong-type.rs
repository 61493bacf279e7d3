use retry_toolkit::retry;

static LIMIT: u32 = 10;

#[retry(budget = LIMIT)]
async fn fetch() -> Result<(), String> {
    Err("down".to_owned())
}

fn main() {}
