use retry_toolkit::RetryBudget;

// A ratio above 1 is refused when the static is compiled, with the message of the rule.
static BUDGET: RetryBudget = RetryBudget::with_config(
    match RetryBudget::builder().ratio(1.5).validate() {
        Ok(config) => config,
        Err(e) => panic!("{}", e.message()),
    },
);

fn main() {
    let _ = &BUDGET;
}
