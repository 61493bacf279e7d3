//! More schedule shapes, D6: Fibonacci and linear growth, a minimum delay, and a hook that
//! adjusts a computed delay — every one still bounded by `max_delay` (D2's rule) and checked
//! when built.
//!
//! The Fibonacci tests port the intent of backon's eight upstream tests (default sequence,
//! jitter, minimum delay, cap, no cap, a number of retries, no limit on retries) and
//! tokio-retry's five (the series, saturation, stopping at the cap, a cap below the base, a
//! base of whole seconds), written for this crate's rules: jitter draws below the cap, the
//! number of retries is the policy's, and a cap below the base is refused when built.

use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use retry_toolkit::{
    Backoff, BackoffError, Constant, Fibonacci, Jitter, JitterRng, Linear, RetryOptions,
    RetryPolicy,
};
use support::InstantClock;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn ms(values: &[u64]) -> Vec<Duration> {
    values.iter().map(|v| Duration::from_millis(*v)).collect()
}

fn unjittered_fib(fib: &Fibonacci, n: u32) -> Vec<Duration> {
    (0..n).map(|i| fib.unjittered(i)).collect()
}

fn exact_fib(base: Duration, cap: Duration) -> Fibonacci {
    Fibonacci::builder()
        .base(base)
        .cap(cap)
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

/// The waits of a loop of `attempts` attempts that always fails, on a virtual clock.
fn loop_waits<B: Backoff>(attempts: u32, backoff: B) -> Vec<Duration> {
    let clock = InstantClock::new();
    let policy = RetryOptions::new()
        .with_max_attempts(attempts)
        .with_max_delay_ms(3_600_000)
        .resolve()
        .unwrap()
        .with_clock(clock.clone());
    let result: Result<(), ()> = policy.retry_blocking(|_| Err(())).backoff(backoff).call();
    assert_eq!(result, Err(()));
    clock.sleeps()
}

// backon `test_fibonacci_default`; tokio-retry `returns_the_fibonacci_series_starting_at_10`.
#[test]
fn d6_fibonacci_starts_with_the_base_twice_then_adds_the_two_before() {
    assert_eq!(
        unjittered_fib(&Fibonacci::DEFAULT, 6),
        ms(&[100, 100, 200, 300, 500, 800])
    );
    assert_eq!(
        unjittered_fib(&exact_fib(10 * MS, SEC), 5),
        ms(&[10, 10, 20, 30, 50])
    );
    assert_eq!(Fibonacci::default(), Fibonacci::DEFAULT);
    assert_eq!(
        (Fibonacci::DEFAULT.base(), Fibonacci::DEFAULT.cap()),
        (100 * MS, 30 * SEC)
    );
    assert_eq!(Fibonacci::DEFAULT.jitter(), Jitter::Full);
    assert_eq!(Fibonacci::DEFAULT.min_delay(), Duration::ZERO);
}

// backon `test_fibonacci_jitter`: jittered waits stay in their band (ours is below the cap).
#[test]
fn d6_fibonacci_jitter_draws_below_each_unjittered_delay() {
    for jitter in Jitter::ALL {
        let fib = Fibonacci::builder().jitter(jitter).build().unwrap();
        for seed in 0..200 {
            let mut rng = JitterRng::seeded(seed);
            let mut previous = Duration::ZERO;
            for i in 0..12 {
                let d = fib.delay_at(i, previous, &mut rng);
                assert!(d <= fib.cap(), "{jitter}: {d:?}");
                if jitter != Jitter::Decorrelated {
                    assert!(d <= fib.unjittered(i), "{jitter} #{i}: {d:?}");
                }
                previous = d;
            }
        }
    }
    // Full jitter really spreads: not a few points.
    let fib = Fibonacci::DEFAULT;
    let mut rng = JitterRng::seeded(1);
    let draws: std::collections::BTreeSet<_> = (0..100)
        .map(|_| fib.delay_at(5, Duration::ZERO, &mut rng))
        .collect();
    assert!(draws.len() > 90, "{}", draws.len());
}

// backon `test_fibonacci_min_delay`: there the minimum is the first delay, here the base is.
// Our minimum delay is a floor under every draw.
#[test]
fn d6_fibonacci_min_delay_is_a_floor_and_the_base_the_first_delay() {
    assert_eq!(
        unjittered_fib(&exact_fib(500 * MS, 60 * SEC), 3),
        ms(&[500, 500, 1000])
    );
    let floored = Fibonacci::builder()
        .base(100 * MS)
        .min_delay(250 * MS)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let mut rng = JitterRng::seeded(0);
    let waits: Vec<_> = (0..5)
        .map(|i| floored.delay_at(i, Duration::ZERO, &mut rng))
        .collect();
    assert_eq!(waits, ms(&[250, 250, 250, 300, 500]));
    // With jitter the waits spread over [min, cap), never below the floor.
    let jittered = Fibonacci::builder().min_delay(250 * MS).build().unwrap();
    for seed in 0..500 {
        let mut rng = JitterRng::seeded(seed);
        for i in 0..8 {
            let d = jittered.delay_at(i, Duration::ZERO, &mut rng);
            assert!(
                d >= 250 * MS && d <= jittered.unjittered(i).max(250 * MS),
                "{d:?}"
            );
        }
    }
}

// backon `test_fibonacci_max_delay`; tokio-retry `stops_increasing_at_max_delay`.
#[test]
fn d6_fibonacci_stops_growing_at_its_cap() {
    assert_eq!(
        unjittered_fib(&exact_fib(SEC, 2 * SEC), 4),
        ms(&[1000, 1000, 2000, 2000])
    );
    assert_eq!(
        unjittered_fib(&exact_fib(10 * MS, 30 * MS), 5),
        ms(&[10, 10, 20, 30, 30])
    );
}

// backon `test_fibonacci_no_max_delay`; tokio-retry `saturates_at_maximum_value`.
#[test]
fn d6_fibonacci_saturates_instead_of_overflowing() {
    let huge = Duration::from_secs(10_000_000_000_000_000_000);
    let fib = exact_fib(huge, Duration::MAX);
    assert_eq!(
        unjittered_fib(&fib, 4),
        [huge, huge, Duration::MAX, Duration::MAX]
    );
    assert_eq!(fib.unjittered(u32::MAX), Duration::MAX);
    // In a loop the policy's ceiling still holds.
    let waits = loop_waits(4, fib);
    assert_eq!(waits, vec![Duration::from_millis(3_600_000); 3]);
}

// backon `test_fibonacci_max_times`: the number of retries is the policy's, here 6.
#[test]
fn d6_fibonacci_in_a_loop_waits_once_between_attempts() {
    let waits = loop_waits(7, exact_fib(SEC, 60 * SEC));
    assert_eq!(waits, ms(&[1000, 1000, 2000, 3000, 5000, 8000]));
}

// backon `test_fibonacci_no_max_times`: a zero base waits nothing, for as long as asked.
#[test]
fn d6_fibonacci_with_a_zero_base_never_waits() {
    let fib = exact_fib(Duration::ZERO, SEC);
    let mut rng = JitterRng::seeded(0);
    for i in 0..10_000 {
        assert_eq!(fib.delay_at(i, Duration::ZERO, &mut rng), Duration::ZERO);
    }
    assert_eq!(fib.unjittered(u32::MAX), Duration::ZERO);
}

// tokio-retry `returns_max_when_max_less_than_base`: here such settings are refused.
#[test]
fn d6_bad_shape_settings_are_refused_when_built() {
    let err = Fibonacci::builder()
        .base(20 * MS)
        .cap(10 * MS)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BackoffError::BaseAboveCap {
            base: 20 * MS,
            cap: 10 * MS
        }
    );
    assert_eq!(
        err.to_string(),
        "backoff.base (20ms) must be <= backoff.cap (10ms)"
    );
    let err = Fibonacci::builder()
        .min_delay(31 * SEC)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "backoff.min_delay (31s) must be <= backoff.cap (30s)"
    );
    // The base is checked first.
    let err = Linear::builder()
        .base(SEC)
        .min_delay(SEC)
        .cap(MS)
        .build()
        .unwrap_err();
    assert!(matches!(err, BackoffError::BaseAboveCap { .. }), "{err}");
    let err = Linear::builder()
        .min_delay(SEC)
        .cap(500 * MS)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "backoff.min_delay (1s) must be <= backoff.cap (500ms)"
    );
    // Equal is fine.
    assert!(
        Linear::builder()
            .base(SEC)
            .min_delay(SEC)
            .cap(SEC)
            .build()
            .is_ok()
    );
}

/// Settings checked at compile time, as a `static` needs.
static SLOW_FIB: Fibonacci = match Fibonacci::builder().base(Duration::from_secs(2)).build() {
    Ok(fib) => fib,
    Err(_) => panic!("bad settings"),
};

// tokio-retry `can_use_factor_to_get_seconds`: the base carries the unit.
#[test]
fn d6_fibonacci_of_whole_seconds_and_built_in_a_static() {
    assert_eq!(
        unjittered_fib(&exact_fib(SEC, 60 * SEC), 3),
        ms(&[1000, 1000, 2000])
    );
    assert_eq!(unjittered_fib(&SLOW_FIB, 3), ms(&[2000, 2000, 4000]));
}

#[test]
fn d6_linear_grows_by_its_step_up_to_its_cap() {
    let linear = |base, step, cap| {
        Linear::builder()
            .base(base)
            .step(step)
            .cap(cap)
            .jitter(Jitter::None)
            .build()
            .unwrap()
    };
    let l = Linear::builder().jitter(Jitter::None).build().unwrap();
    assert_eq!(
        (0..4).map(|i| l.unjittered(i)).collect::<Vec<_>>(),
        ms(&[100, 200, 300, 400])
    );
    let l = linear(50 * MS, 25 * MS, 110 * MS);
    assert_eq!(
        (0..5).map(|i| l.unjittered(i)).collect::<Vec<_>>(),
        ms(&[50, 75, 100, 110, 110])
    );
    // A zero step is a constant wait; a huge index or step saturates at the cap.
    let l = linear(40 * MS, Duration::ZERO, SEC);
    assert_eq!(l.unjittered(u32::MAX), 40 * MS);
    let l = linear(MS, Duration::MAX, Duration::MAX);
    assert_eq!(l.unjittered(u32::MAX), Duration::MAX);
    assert_eq!(l.unjittered(0), MS);
    assert_eq!(
        loop_waits(4, linear(10 * MS, 5 * MS, SEC)),
        ms(&[10, 15, 20])
    );
    assert_eq!(Linear::default(), Linear::DEFAULT);
    let d = Linear::DEFAULT;
    assert_eq!(
        (d.base(), d.step(), d.cap(), d.min_delay()),
        (100 * MS, 100 * MS, 30 * SEC, Duration::ZERO)
    );
    assert_eq!(d.jitter(), Jitter::Full);
}

#[test]
fn d6_linear_min_delay_and_jitter_stay_in_their_band() {
    let l = Linear::builder()
        .base(10 * MS)
        .step(10 * MS)
        .cap(200 * MS)
        .min_delay(35 * MS)
        .build()
        .unwrap();
    for seed in 0..500 {
        let mut rng = JitterRng::seeded(seed);
        let mut previous = Duration::ZERO;
        for i in 0..30 {
            let d = l.delay_at(i, previous, &mut rng);
            assert!(d >= 35 * MS, "{d:?}");
            assert!(d <= l.unjittered(i).max(35 * MS), "{i}: {d:?}");
            previous = d;
        }
    }
}

// D2's rule: whatever a shape says, the loop waits at most the policy's `max_delay`.
#[test]
fn d6_every_shape_in_a_loop_is_clamped_to_the_policy_ceiling() {
    let clock = InstantClock::new();
    let policy = RetryOptions::new()
        .with_max_attempts(6)
        .with_base_delay_ms(10)
        .with_max_delay_ms(250)
        .resolve()
        .unwrap()
        .with_clock(clock.clone());
    let shapes: [&dyn Fn() -> Result<(), ()>; 2] = [
        &|| {
            policy
                .retry_blocking(|_| Err(()))
                .backoff(Fibonacci::builder().min_delay(SEC).build().unwrap())
                .call()
        },
        &|| {
            policy
                .retry_blocking(|_| Err(()))
                .backoff(
                    Linear::builder()
                        .base(SEC)
                        .jitter(Jitter::None)
                        .build()
                        .unwrap(),
                )
                .call()
        },
    ];
    for run in shapes {
        assert_eq!(run(), Err(()));
    }
    let sleeps = clock.sleeps();
    assert_eq!(sleeps.len(), 10);
    assert!(sleeps.iter().all(|d| *d <= 250 * MS), "{sleeps:?}");
    assert!(sleeps.iter().all(|d| *d == 250 * MS), "{sleeps:?}");
}

// --- adjust ---

#[derive(Debug, PartialEq)]
enum Fail {
    Slow,
    Fast,
}

#[test]
fn d6_adjust_sees_each_computed_delay_attempt_and_error() {
    let clock = InstantClock::new();
    let mut seen = Vec::new();
    let result: Result<(), Fail> = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .with_clock(clock.clone())
        .retry_blocking(|attempt| Err(if attempt == 1 { Fail::Slow } else { Fail::Fast }))
        .adjust(|delay, attempt, error| {
            seen.push((delay, attempt, error.map(|e| e == &Fail::Slow)));
            if error == Some(&Fail::Slow) {
                delay * 3
            } else {
                delay / 2
            }
        })
        .call();
    assert_eq!(result, Err(Fail::Fast));
    assert_eq!(
        seen,
        [(200 * MS, 1, Some(true)), (400 * MS, 2, Some(false))]
    );
    assert_eq!(clock.sleeps(), ms(&[600, 200]));
}

#[test]
fn d6_an_adjusted_delay_is_still_clamped_to_max_delay() {
    let clock = InstantClock::new();
    let _: Result<(), ()> = RetryPolicy::DEFAULT
        .with_clock(clock.clone())
        .retry_blocking(|_| Err(()))
        .adjust(|_, _, _| Duration::MAX)
        .call();
    assert_eq!(clock.sleeps(), ms(&[3000, 3000]));
    // Around a constant too, whose wait the loop otherwise reads once.
    let clock = InstantClock::new();
    let _: Result<(), ()> = RetryPolicy::DEFAULT
        .with_clock(clock.clone())
        .retry_blocking(|_| Err(()))
        .backoff(Constant(10 * MS))
        .adjust(|delay, attempt, _| delay * attempt * 1000)
        .call();
    assert_eq!(clock.sleeps(), ms(&[3000, 3000]));
    let clock = InstantClock::new();
    let _: Result<(), ()> = RetryPolicy::DEFAULT
        .with_clock(clock.clone())
        .retry_blocking(|_| Err(()))
        .backoff(Constant(10 * MS))
        .adjust(|delay, attempt, _| delay * attempt)
        .call();
    assert_eq!(clock.sleeps(), ms(&[10, 20]));
}

#[test]
fn d6_adjust_leaves_a_server_hint_alone() {
    let clock = InstantClock::new();
    let mut adjusted = 0;
    let _: Result<(), u64> = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .with_clock(clock.clone())
        .retry_blocking(|attempt| Err(u64::from(attempt)))
        .retry_after(|e| (*e == 1).then_some(7 * MS))
        .adjust(|delay, _, _| {
            adjusted += 1;
            delay + MS
        })
        .call();
    assert_eq!(adjusted, 1);
    assert_eq!(clock.sleeps(), ms(&[7, 401]));
}

#[tokio::test(start_paused = true)]
async fn d6_adjust_sees_no_error_for_a_timed_out_attempt() {
    let mut seen = Vec::new();
    let result = RetryPolicy::DEFAULT
        .with_jitter(Jitter::None)
        .retry(|attempt| async move {
            if attempt == 1 {
                std::future::pending::<()>().await;
            }
            Err::<(), _>("down")
        })
        .attempt_timeout(SEC)
        .adjust(|delay, attempt, error: Option<&&str>| {
            seen.push((attempt, error.copied()));
            delay
        })
        .await;
    assert!(result.is_err());
    assert_eq!(seen, [(1, None), (2, Some("down"))]);
}

proptest! {
    // D6 with D2's rule, for any settings the builders accept: every wait is within
    // [min_delay, cap], the un-jittered delays never decrease, and nothing panics.
    #[test]
    fn d6_shapes_stay_within_their_floor_and_cap(
        base_ms in 0u64..5_000,
        step_ms in 0u64..5_000,
        extra_cap_ms in 0u64..60_000,
        min_ms in 0u64..70_000,
        jitter in prop::sample::select(Jitter::ALL.to_vec()),
        seed: u64,
        indices in prop::collection::vec(any::<u32>(), 1..8),
    ) {
        let (base, step) = (Duration::from_millis(base_ms), Duration::from_millis(step_ms));
        let cap = Duration::from_millis(base_ms + extra_cap_ms);
        let min = Duration::from_millis(min_ms);
        let fib = Fibonacci::builder().base(base).cap(cap).min_delay(min).jitter(jitter).build();
        let lin = Linear::builder().base(base).step(step).cap(cap).min_delay(min).jitter(jitter).build();
        if min > cap {
            let refused = |r: Result<(), BackoffError>| matches!(r, Err(BackoffError::MinDelayAboveCap { .. }));
            prop_assert!(refused(fib.map(drop)), "Fibonacci accepted a floor above its cap");
            prop_assert!(refused(lin.map(drop)), "Linear accepted a floor above its cap");
            return Ok(());
        }
        let (fib, lin) = (fib.unwrap(), lin.unwrap());
        let mut rng = JitterRng::seeded(seed);
        let mut previous = Duration::ZERO;
        for i in indices {
            for (d, unjittered, next) in [
                (fib.delay_at(i, previous, &mut rng), fib.unjittered(i), fib.unjittered(i.saturating_add(1))),
                (lin.delay_at(i, previous, &mut rng), lin.unjittered(i), lin.unjittered(i.saturating_add(1))),
            ] {
                prop_assert!(d >= min && d <= cap, "{d:?} outside [{min:?}, {cap:?}]");
                prop_assert!(unjittered <= cap && unjittered <= next);
                previous = d;
            }
        }
    }
}
