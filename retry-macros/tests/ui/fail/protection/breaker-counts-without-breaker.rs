use retry_toolkit::retry;

fn is_outage(_: &String) -> bool {
    true
}

#[retry(max_attempts = 3, breaker_counts = is_outage)]
async fn fetch() -> Result<(), String> {
    Err("down".to_owned())
}

fn main() {}
