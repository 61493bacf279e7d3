//! The cost of shared protection, counted by valgrind: instructions (cachegrind) and heap
//! blocks (DHAT) per operation of retry-toolkit's `RetryBudget` and `CircuitBreaker`, beside
//! tower's `TpsBudget`, and what they add to a retry loop whose first attempt succeeds.
//!
//! Run by `cargo bench --bench protection`, this binary re-runs itself under valgrind twice
//! per row (`FEW` and `MANY` operations) and reports the difference per operation, so
//! start-up and the measuring loop cancel out. Without valgrind it says so and measures
//! nothing. With an argument, only the rows whose `group/name` contain it.
//!
//! Every budget operation reads the time once, as each crate does: tower's `TpsBudget` calls
//! `tokio::time::Instant::now()` inside; retry-toolkit's takes the instant from its caller, here
//! `Instant::now()`. Without a runtime both are a `clock_gettime`.

#[allow(dead_code, reason = "shared by the counting benches")]
mod counted;

use std::cell::Cell;
use std::hint::black_box;
use std::mem::size_of_val;
use std::time::{Duration, Instant};

use retry_toolkit::{CircuitBreaker, RetryBudget, RetryPolicy};
use tower::retry::budget::{Budget, TpsBudget};

#[allow(
    dead_code,
    reason = "shared with the other benches, which use other parts"
)]
mod contestants;

use contestants::{FIRST, numbered_op, poll_once};

const FEW: u64 = 1_000;
const MANY: u64 = 101_000;

/// A budget that admits every retry it is asked for after a request: one retry per request.
fn generous() -> RetryBudget {
    RetryBudget::builder()
        .ratio(1.0)
        .min_per_sec(10)
        .build()
        .expect("valid settings")
}

/// tower's equivalent: a 10 s window, 10 retries a second, one retry per deposit.
fn tower_generous() -> TpsBudget {
    TpsBudget::new(Duration::from_secs(10), 10, 1.0)
}

/// A budget that admits nothing.
fn empty() -> RetryBudget {
    RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .expect("valid settings")
}

/// A breaker that never opens in these rows (it would need 4 billion failures in a row).
fn patient() -> CircuitBreaker {
    CircuitBreaker::builder()
        .consecutive_failures(u32::MAX)
        .build()
        .expect("valid settings")
}

/// The same, also counting the failure rate over its sampling window.
fn patient_with_rate() -> CircuitBreaker {
    CircuitBreaker::builder()
        .consecutive_failures(u32::MAX)
        .failure_ratio(1.0)
        .minimum_throughput(u32::MAX)
        .build()
        .expect("valid settings")
}

/// `group / name => routine`: a closure making one operation, created once.
macro_rules! rows {
    ($($group:literal / $name:literal => $routine:expr;)*) => {
        const LIST: &[(&str, &str)] = &[$(($group, $name)),*];

        fn run(key: &str, n: u64) -> bool {
            match key {
                $(k if k == concat!($group, "/", $name) => {
                    #[allow(unused_mut, reason = "some routines own no state")]
                    let mut routine = $routine;
                    for _ in 0..n {
                        let _ = black_box(routine());
                    }
                    true
                })*
                _ => false,
            }
        }
    };
}

rows! {
    "a request" / "retry-toolkit RetryBudget::deposit" => {
        let budget = generous();
        move || budget.deposit(Instant::now())
    };
    "a request" / "tower TpsBudget::deposit" => {
        let budget = tower_generous();
        move || budget.deposit()
    };

    "a request and an admitted retry" / "retry-toolkit deposit + try_withdraw" => {
        let budget = generous();
        move || {
            budget.deposit(Instant::now());
            budget.try_withdraw(Instant::now()).is_ok()
        }
    };
    "a request and an admitted retry" / "tower deposit + withdraw" => {
        let budget = tower_generous();
        move || {
            budget.deposit();
            budget.withdraw()
        }
    };

    // Four requests in the window earn four fifths of a retry: refused, and retry-toolkit works
    // out when a retry would fit again (here: never without new requests).
    "a refused retry" / "retry-toolkit try_withdraw" => {
        let budget = RetryBudget::builder().ratio(0.2).min_per_sec(0).build().expect("valid");
        for _ in 0..4 {
            budget.deposit(Instant::now());
        }
        move || budget.try_withdraw(Instant::now()).is_err()
    };
    "a refused retry" / "tower withdraw" => {
        let budget = TpsBudget::new(Duration::from_secs(10), 0, 0.2);
        for _ in 0..4 {
            budget.deposit();
        }
        move || budget.withdraw()
    };
    "a refused retry" / "retry-toolkit try_withdraw, a budget that admits nothing" => {
        let budget = empty();
        move || budget.try_withdraw(Instant::now()).is_err()
    };

    "breaker, closed" / "try_acquire + success" => {
        let breaker = patient();
        move || {
            if let Ok(permit) = breaker.try_acquire(Instant::now()) {
                permit.success(Instant::now());
            }
        }
    };
    "breaker, closed" / "try_acquire + success, failure rate counted" => {
        let breaker = patient_with_rate();
        move || {
            if let Ok(permit) = breaker.try_acquire(Instant::now()) {
                permit.success(Instant::now());
            }
        }
    };
    "breaker, closed" / "try_acquire + failure" => {
        let breaker = patient();
        move || {
            if let Ok(permit) = breaker.try_acquire(Instant::now()) {
                permit.failure(Instant::now());
            }
        }
    };
    "breaker, open" / "try_acquire refused" => {
        let breaker = CircuitBreaker::builder()
            .consecutive_failures(1)
            .break_duration(Duration::from_secs(3_600))
            .build()
            .expect("valid settings");
        let now = Instant::now();
        if let Ok(permit) = breaker.try_acquire(now) {
            permit.failure(now);
        }
        move || breaker.try_acquire(Instant::now()).is_err()
    };

    "retry loop, first attempt succeeds" / "retry-toolkit" => || {
        poll_once(RetryPolicy::DEFAULT.retry(numbered_op::<1>(FIRST)))
    };
    "retry loop, first attempt succeeds" / "retry-toolkit + budget" => {
        let budget = generous();
        move || poll_once(RetryPolicy::DEFAULT.retry(numbered_op::<1>(FIRST)).budget(&budget))
    };
    "retry loop, first attempt succeeds" / "retry-toolkit + breaker" => {
        let breaker = patient();
        move || poll_once(RetryPolicy::DEFAULT.retry(numbered_op::<1>(FIRST)).breaker(&breaker))
    };
    "retry loop, first attempt succeeds" / "retry-toolkit + budget + breaker" => {
        let (budget, breaker) = (generous(), patient());
        move || {
            poll_once(
                RetryPolicy::DEFAULT
                    .retry(numbered_op::<1>(FIRST))
                    .budget(&budget)
                    .breaker(&breaker),
            )
        }
    };
    "retry loop, first attempt succeeds" / "retry-toolkit + budget + breaker, shared by Arc" => {
        let (budget, breaker) = (std::sync::Arc::new(generous()), std::sync::Arc::new(patient()));
        move || {
            poll_once(
                RetryPolicy::DEFAULT
                    .retry(numbered_op::<1>(FIRST))
                    .budget(std::sync::Arc::clone(&budget))
                    .breaker(std::sync::Arc::clone(&breaker)),
            )
        }
    };
    // For reference: what any limit costs (the output becomes `Result<T, RetryError<E>>`, as
    // with a budget or a breaker), and a reading of the loop's default clock.
    "retry loop, first attempt succeeds" / "retry-toolkit + cancel_on(a signal that never fires)" => || {
        poll_once(
            RetryPolicy::DEFAULT
                .retry(numbered_op::<1>(FIRST))
                .cancel_on(std::future::pending::<()>()),
        )
    };
    "retry loop, first attempt succeeds" / "a reading of DefaultClock" => {
        || retry_toolkit::Clock::now(&retry_toolkit::DefaultClock)
    };
    "retry loop, first attempt succeeds" / "a reading of Instant::now" => Instant::now;
}

fn main() {
    // An optional filter, as criterion takes one: only the rows whose `group/name` contain it.
    let Some((filter, exe)) = counted::child_or_parent("protection", run) else {
        return;
    };
    let mut out = String::from(
        "### Shared protection: instructions and heap blocks per operation (valgrind)\n",
    );
    let current = Cell::new("");
    for (group, name) in LIST {
        let key = format!("{group}/{name}");
        if !key.contains(&filter) {
            continue;
        }
        let (instructions, blocks) = counted::per_unit(&exe, &key, FEW, MANY);
        eprintln!("protection: {key}: {instructions:.1} instructions, {blocks:.2} blocks");
        if current.get() != *group {
            current.set(group);
            out.push_str(&format!(
                "\n#### {group}\n\n| | instructions | heap blocks |\n|---|---:|---:|\n"
            ));
        }
        out.push_str(&format!("| {name} | {instructions:.1} | {blocks:.2} |\n"));
    }
    out.push_str(&sizes());
    println!("\n{out}");
}

/// The size of the retry future, bare and with shared protection (a one-byte operation).
fn sizes() -> String {
    let (budget, breaker) = (generous(), patient());
    let op = numbered_op::<1>(FIRST);
    let rows = [
        (
            "retry-toolkit",
            size_of_val(&RetryPolicy::DEFAULT.retry(op)),
        ),
        (
            "retry-toolkit + cancel_on(a signal that never fires)",
            size_of_val(
                &RetryPolicy::DEFAULT
                    .retry(op)
                    .cancel_on(std::future::pending::<()>()),
            ),
        ),
        (
            "retry-toolkit + budget",
            size_of_val(&RetryPolicy::DEFAULT.retry(op).budget(&budget)),
        ),
        (
            "retry-toolkit + breaker",
            size_of_val(&RetryPolicy::DEFAULT.retry(op).breaker(&breaker)),
        ),
        (
            "retry-toolkit + budget + breaker",
            size_of_val(
                &RetryPolicy::DEFAULT
                    .retry(op)
                    .budget(&budget)
                    .breaker(&breaker),
            ),
        ),
    ];
    let mut out =
        String::from("\n#### size of the retry future (bytes)\n\n| | bytes |\n|---|---:|\n");
    for (name, bytes) in rows {
        out.push_str(&format!("| {name} | {bytes} |\n"));
    }
    out
}
