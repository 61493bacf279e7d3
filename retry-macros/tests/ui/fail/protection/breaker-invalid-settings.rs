use std::time::Duration;

use retry_toolkit::CircuitBreaker;

// A zero break is refused when the static is compiled, with the message of the rule.
static UPSTREAM: CircuitBreaker = CircuitBreaker::with_config(
    match CircuitBreaker::builder().break_duration(Duration::ZERO).validate() {
        Ok(config) => config,
        Err(e) => panic!("{}", e.message()),
    },
);

fn main() {
    let _ = &UPSTREAM;
}
