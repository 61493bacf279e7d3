//! `#[retry]` on a blocking function with a `defaults` const, through a renamed dependency.

const DEFAULTS: rc::RetryOptions = rc::RetryOptions::new().with_max_attempts(2);

#[rc::retry(defaults = DEFAULTS, base_delay_ms = 1, max_delay_ms = 1)]
fn blocking(fail: bool) -> Result<(), String> {
    if fail { Err("no".to_owned()) } else { Ok(()) }
}

fn main() {
    assert_eq!(blocking(false), Ok(()));
}
