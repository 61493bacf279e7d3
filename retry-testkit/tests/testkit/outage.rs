//! The load simulator (S7, B1, B2): reproducible from a seed, on virtual time, and showing
//! what a budget and a breaker are for — retries multiply the load on a dependency that is
//! down or overloaded, a budget caps them, a breaker stops the calls.

use retry_testkit::sim::outage::{Dependency, LoadRun, Outage, Setup, chart_svg, markdown_table};
use retry_toolkit::RetryBudget;

/// 20 callers for 30 s: small enough for a debug build.
fn sim(dependency: Dependency) -> Outage {
    Outage::new(dependency)
        .with_clients(20)
        .with_calls_per_client(30)
}

fn runs(sim: Outage) -> [LoadRun; 5] {
    Setup::ALL.map(|setup| sim.run(setup).unwrap())
}

#[test]
fn outage_is_reproducible_from_its_seed() {
    let sim = sim(Dependency::Overloaded { capacity: 16 }).with_seed(5);
    for setup in Setup::ALL {
        assert_eq!(sim.run(setup).unwrap(), sim.run(setup).unwrap(), "{setup}");
    }
    let other = sim.with_seed(6);
    assert_ne!(
        sim.run(Setup::Retry).unwrap(),
        other.run(Setup::Retry).unwrap()
    );
}

#[test]
fn outage_down_for_good_retries_triple_the_load_and_protection_takes_it_away() {
    let budget = RetryBudget::builder()
        .ratio(0.2)
        .min_per_sec(0)
        .validate()
        .unwrap();
    let [none, retry, budgeted, broken, both] = runs(sim(Dependency::Down).with_budget(budget));
    assert_eq!((none.calls, none.attempts), (600, 600));
    assert_eq!(none.load(), 1.0);
    assert_eq!(retry.load(), 3.0, "every call makes its 3 attempts");
    // Retries within a fifth of the requests.
    assert!(
        budgeted.load() > 1.0 && budgeted.load() <= 1.2,
        "{budgeted:?}"
    );
    // The breaker opens after 5 failures and then lets one probe through every 5 s.
    assert!(broken.attempts < 20, "{broken:?}");
    assert!(broken.refused > 580, "{broken:?}");
    assert!(both.attempts <= broken.attempts, "{both:?}");
    for run in [none, retry, budgeted, broken, both] {
        assert_eq!(run.succeeded, 0);
    }
}

#[test]
fn outage_overloaded_retries_feed_the_overload_and_a_budget_keeps_most_of_the_work() {
    // The default budget's floor (10 a second) would be half of these 20 callers' calls:
    // scale it down as their number is.
    let budget = RetryBudget::builder()
        .ratio(0.2)
        .min_per_sec(2)
        .validate()
        .unwrap();
    let overloaded = sim(Dependency::Overloaded { capacity: 16 }).with_budget(budget);
    let [none, retry, budgeted, broken, _] = runs(overloaded);
    // 20 calls a second for a capacity of 16: a fifth too many.
    assert!(none.success() > 0.5 && none.success() < 0.8, "{none:?}");
    // Retrying turns it into a storm: more than twice the load, fewer calls served.
    assert!(retry.load() > 2.0, "{retry:?}");
    assert!(retry.success() < none.success(), "{retry:?} vs {none:?}");
    // The budget caps the storm and keeps most of what retries were for.
    assert!(budgeted.load() < 1.5, "{budgeted:?}");
    assert!(
        budgeted.success() > retry.success(),
        "{budgeted:?} vs {retry:?}"
    );
    // The breaker sheds load, and with it calls that would have been served.
    assert!(broken.load() < none.load(), "{broken:?}");
}

#[test]
fn outage_table_and_chart_name_every_setup() {
    let runs = runs(sim(Dependency::Down).with_calls_per_client(5));
    let table = markdown_table(&runs);
    assert!(
        table.starts_with("| setup | attempts sent | load vs no retry | calls that succeeded |")
    );
    for setup in Setup::ALL {
        assert!(table.contains(&format!("| {setup} |")), "{table}");
    }
    let chart = chart_svg(&runs);
    assert!(chart.starts_with("<svg") && chart.trim_end().ends_with("</svg>"));
    assert!(chart.contains("dependency down for good"));
    assert_eq!(chart, chart_svg(&runs), "deterministic text");
}

#[test]
fn outage_with_no_attempts_is_an_options_error() {
    let mut sim = sim(Dependency::Down);
    sim.max_attempts = 0;
    let error = sim.run(Setup::Retry).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid simulation delays: retry.max_attempts must be >= 1"
    );
}
