//! The retry budget (B1, B3) on the mock clock, and the property it exists for: over any
//! window, retries never exceed their fraction of the requests plus the floor.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use retry_testkit::MockClock;
use retry_toolkit::{BudgetError, RetryBudget};

const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn budget(ratio: f64, min_per_sec: u32, window: Duration) -> RetryBudget {
    RetryBudget::builder()
        .ratio(ratio)
        .min_per_sec(min_per_sec)
        .window(window)
        .build()
        .unwrap()
}

fn admitted(budget: &RetryBudget, now: Instant, tries: u32) -> u32 {
    (0..tries)
        .filter(|_| budget.try_withdraw(now).is_ok())
        .count() as u32
}

#[test]
fn b1_retries_are_a_fraction_of_the_requests() {
    let clock = MockClock::new();
    let b = budget(0.1, 0, 10 * SEC);
    for _ in 0..100 {
        b.deposit(clock.now());
    }
    assert_eq!(admitted(&b, clock.now(), 50), 10);
    let snapshot = b.snapshot(clock.now());
    assert_eq!(
        (snapshot.requests, snapshot.retries, snapshot.allowed),
        (100, 10, 10)
    );
    assert_eq!(snapshot.available(), 0);
}

#[test]
fn b1_the_floor_admits_retries_without_requests() {
    let clock = MockClock::new();
    let b = budget(0.0, 5, 10 * SEC);
    assert_eq!(admitted(&b, clock.now(), 100), 50, "5 per second over 10 s");
}

#[test]
fn b1_requests_and_retries_leave_the_window() {
    let clock = MockClock::new();
    let b = budget(0.5, 0, 10 * SEC);
    for _ in 0..10 {
        b.deposit(clock.now());
    }
    assert_eq!(admitted(&b, clock.now(), 10), 5);
    clock.advance(10 * SEC);
    // Still inside: the window is counted in tenths, and the first tenth leaves after 11.
    assert!(b.try_withdraw(clock.now()).is_err());
    clock.advance(SEC);
    let snapshot = b.snapshot(clock.now());
    assert_eq!((snapshot.requests, snapshot.retries), (0, 0));
    assert!(
        b.try_withdraw(clock.now()).is_err(),
        "no requests, no floor"
    );
}

#[test]
fn b1_a_refusal_says_what_was_counted_and_when_a_retry_fits_again() {
    let clock = MockClock::new();
    let b = budget(0.0, 1, 10 * SEC); // ten retries per window, from the floor
    assert_eq!(admitted(&b, clock.now(), 4), 4);
    clock.advance(5 * SEC);
    assert_eq!(admitted(&b, clock.now(), 6), 6);
    let refused = b.try_withdraw(clock.now()).unwrap_err();
    assert_eq!((refused.requests(), refused.retries()), (0, 10));
    // The four retries of time zero leave the window at 11 s.
    assert_eq!(refused.retry_after(), Some(6 * SEC));
    assert_eq!(
        refused.to_string(),
        "retry budget exhausted: 10 retries for 0 requests in the last 10s"
    );
    clock.advance(6 * SEC);
    assert!(b.try_withdraw(clock.now()).is_ok());
}

#[test]
fn b1_with_neither_ratio_nor_floor_nothing_is_retried() {
    let clock = MockClock::new();
    let b = budget(0.0, 0, SEC);
    b.deposit(clock.now());
    let refused = b.try_withdraw(clock.now()).unwrap_err();
    assert_eq!(
        refused.retry_after(),
        None,
        "only new requests could help, and they cannot"
    );
}

/// The budget is shared: threads depositing and withdrawing at the same moment never get
/// more retries between them than the allowance (the check and the count are one atomic
/// step).
#[test]
fn b1_threads_sharing_a_static_budget_never_exceed_the_allowance() {
    static SHARED: RetryBudget = RetryBudget::with_config(
        match RetryBudget::builder().ratio(0.25).min_per_sec(2).validate() {
            Ok(config) => config,
            Err(e) => panic!("{}", e.message()),
        },
    );
    fn assert_shareable<T: Send + Sync + 'static>(_: &T) {}
    assert_shareable(&SHARED);
    let now = Instant::now();
    let admitted = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..500 {
                    SHARED.deposit(now);
                    if SHARED.try_withdraw(now).is_ok() {
                        admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    // 4,000 requests: a quarter of them, plus 2 per second over 10 s.
    assert_eq!(admitted.into_inner(), 1_000 + 20);
}

#[test]
fn b3_bad_settings_are_refused_with_their_messages() {
    let ratio = "budget.ratio must be >= 0 and <= 1";
    let window = "budget.window must be >= 1ms";
    let cases = [
        (
            RetryBudget::builder().ratio(-0.1),
            BudgetError::RatioOutOfRange,
            ratio,
        ),
        (
            RetryBudget::builder().ratio(1.01),
            BudgetError::RatioOutOfRange,
            ratio,
        ),
        (
            RetryBudget::builder().ratio(f64::NAN),
            BudgetError::RatioOutOfRange,
            ratio,
        ),
        (
            RetryBudget::builder().ratio(f64::INFINITY),
            BudgetError::RatioOutOfRange,
            ratio,
        ),
        (
            RetryBudget::builder().window(Duration::ZERO),
            BudgetError::WindowTooShort,
            window,
        ),
        (
            RetryBudget::builder().window(MS - Duration::from_nanos(1)),
            BudgetError::WindowTooShort,
            window,
        ),
    ];
    for (builder, error, message) in cases {
        assert_eq!(builder.build().unwrap_err(), error, "{builder:?}");
        assert_eq!(builder.validate().unwrap_err().to_string(), message);
        assert_eq!(error.message(), message);
    }
    for ok in [
        RetryBudget::builder().ratio(0.0),
        RetryBudget::builder().ratio(1.0),
        RetryBudget::builder().window(MS),
    ] {
        assert!(ok.build().is_ok(), "{ok:?}");
    }
    let defaults = RetryBudget::new();
    assert_eq!(
        (defaults.ratio(), defaults.min_per_sec(), defaults.window()),
        (0.2, 10, 10 * SEC)
    );
}

/// One step of a simulated client population: a request (`true`) or a retry attempt, after
/// a gap in milliseconds.
fn steps() -> impl Strategy<Value = Vec<(u64, bool)>> {
    prop::collection::vec((0u64..400, prop::bool::weighted(0.4)), 1..250)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// B1: whatever the traffic, in any stretch of time as long as the window, the retries
    /// admitted never exceed `ratio` times the requests of that stretch and the tenth of a
    /// window before it, plus `min_per_sec × window`.
    #[test]
    fn b1_over_any_window_retries_stay_within_the_ratio_and_the_floor(
        ratio in 0.0f64..=1.0,
        min_per_sec in 0u32..20,
        window_ms in prop::sample::select(vec![1_000u64, 2_500, 10_000]),
        steps in steps(),
    ) {
        let window = Duration::from_millis(window_ms);
        let b = budget(ratio, min_per_sec, window);
        let t0 = Instant::now();
        let _ = b.snapshot(t0); // time zero is t0
        let mut at = Duration::ZERO;
        // (time, is_request, admitted)
        let mut log: Vec<(Duration, bool, bool)> = Vec::new();
        for (gap, request) in steps {
            at += Duration::from_millis(gap);
            if request {
                b.deposit(t0 + at);
                log.push((at, true, true));
            } else {
                let ok = b.try_withdraw(t0 + at).is_ok();
                log.push((at, false, ok));
            }
        }
        let floor = f64::from(min_per_sec) * window.as_secs_f64();
        let credit = window + window / 10;
        for (j, &(t, request, ok)) in log.iter().enumerate() {
            if request || !ok {
                continue;
            }
            // Retries admitted in (t - window, t], this one included.
            let retries = log[..=j]
                .iter()
                .filter(|(u, req, ok)| !req && *ok && *u + window > t)
                .count();
            // Requests made before it, in [t - 1.1 window, t].
            let requests = log[..j].iter().filter(|(u, req, _)| *req && *u + credit >= t).count();
            let bound = ratio * requests as f64 + floor;
            prop_assert!(
                retries as f64 <= bound + 1e-9,
                "at {t:?}: {retries} retries > {ratio} × {requests} requests + {floor}"
            );
        }
    }

    /// And the budget is not stingy: with no retry refused yet, a retry is admitted while
    /// the window's retries are below the ratio of its requests (plus the floor), counted
    /// over the whole window.
    #[test]
    fn b1_a_retry_within_the_allowance_is_admitted(
        ratio in 0.0f64..=1.0,
        min_per_sec in 0u32..5,
        requests in 0u32..300,
    ) {
        let b = budget(ratio, min_per_sec, 10 * SEC);
        let now = Instant::now();
        for _ in 0..requests {
            b.deposit(now);
        }
        let allowed = (ratio * f64::from(requests) + f64::from(min_per_sec) * 10.0).floor();
        let got = admitted(&b, now, 400);
        // Within one of the exact allowance: the ratio is kept in millionths, rounded down.
        prop_assert!(f64::from(got) <= allowed && f64::from(got) + 1.0 >= allowed,
            "{got} admitted, {allowed} allowed");
    }
}
