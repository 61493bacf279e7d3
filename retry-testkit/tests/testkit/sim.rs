//! The contention simulator: reproducible from a seed (T2), on virtual time (T1), with the
//! qualitative result of the AWS Architecture Blog's "Exponential Backoff And Jitter".

use retry_testkit::sim::{Contention, SimError, Strategy, Summary, chart_svg, markdown_table};
use retry_toolkit::{Jitter, OptionsError};

#[test]
fn sim_is_reproducible_from_its_seed() {
    let sim = Contention::new(20).with_seed(3);
    for strategy in Strategy::ALL {
        assert_eq!(sim.run(strategy), sim.run(strategy), "{strategy}");
    }
    let other = Contention::new(20).with_seed(4);
    assert_ne!(
        sim.run(Strategy::FullJitter).unwrap(),
        other.run(Strategy::FullJitter).unwrap()
    );
}

#[test]
fn sim_a_lone_client_writes_once_in_four_network_trips() {
    for strategy in Strategy::ALL {
        let run = Contention::new(1).run(strategy).unwrap();
        assert_eq!(run.calls, 1, "{strategy}");
        // Four trips of 10 ms ± 2 ms.
        let ms = run.time.as_secs_f64() * 1e3;
        assert!((20.0..60.0).contains(&ms), "{strategy}: {ms} ms");
    }
}

#[test]
fn sim_every_client_gets_its_write_through() {
    for strategy in Strategy::ALL {
        let run = Contention::new(25).with_seed(9).run(strategy).unwrap();
        assert!(run.calls >= 25, "{strategy}: {run:?}");
        assert_eq!(run.clients, 25);
    }
}

#[test]
fn sim_reproduces_the_blogs_qualitative_result() {
    // Jittered strategies need far fewer calls than retrying at once or backing off in
    // lockstep, full jitter is among the cheapest, and un-jittered exponential backoff is by
    // far the slowest to finish.
    let sim = Contention::new(60).with_seed(0);
    let summary = |strategy| sim.average(strategy, 3).unwrap();
    let [none, expo, full, equal, decorrelated] = Strategy::ALL.map(summary);
    for jittered in [full, equal, decorrelated] {
        assert!(
            jittered.calls < 0.75 * none.calls.min(expo.calls),
            "{jittered:?} vs {none:?} / {expo:?}"
        );
        assert!(
            expo.time_ms > 3.0 * jittered.time_ms,
            "{expo:?} vs {jittered:?}"
        );
    }
    let cheapest = [equal.calls, decorrelated.calls]
        .into_iter()
        .fold(f64::MAX, f64::min);
    assert!(
        full.calls <= 1.05 * cheapest,
        "{full:?}, {equal:?}, {decorrelated:?}"
    );
}

#[test]
fn sim_strategies_are_retry_toolkits_jitter_kinds() {
    let kinds = Strategy::ALL.map(Strategy::jitter);
    assert_eq!(
        kinds,
        [
            None,
            Some(Jitter::None),
            Some(Jitter::Full),
            Some(Jitter::Equal),
            Some(Jitter::Decorrelated)
        ]
    );
}

#[test]
fn sim_rejects_delays_that_break_the_option_rules() {
    let sim = Contention {
        base_delay_ms: 0,
        ..Contention::new(3)
    };
    let error = sim.run(Strategy::FullJitter).unwrap_err();
    assert_eq!(error, SimError::Options(OptionsError::BaseDelayNotPositive));
    assert_eq!(
        error.to_string(),
        "invalid simulation delays: retry.base_delay_ms must be > 0"
    );
}

#[test]
fn sim_table_and_chart_render_every_strategy() {
    let summaries: Vec<Summary> = [5, 10]
        .into_iter()
        .flat_map(|clients| {
            Strategy::ALL.map(|strategy| Contention::new(clients).average(strategy, 2).unwrap())
        })
        .collect();
    let table = markdown_table(&summaries);
    assert_eq!(table.lines().count(), 2 + 10);
    assert!(table.starts_with("| strategy | clients | calls (work) | time to finish |\n"));
    let svg = chart_svg(&summaries);
    assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<polyline").count(),
        2 * 5,
        "a line per strategy per panel"
    );
    for strategy in Strategy::ALL {
        assert!(
            svg.contains(&format!(">{}</text>", strategy.name())),
            "{strategy}"
        );
    }
}
