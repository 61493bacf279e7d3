//! Delays between attempts: SPEC D1–D4.

use std::time::Duration;

use proptest::prelude::*;
use retry_toolkit::{
    Backoff, BackoffError, Constant, ExponentialBackoff, Jitter, JitterRng, RetryOptions,
    RetryPolicy, backoff_fn,
};

const MS: Duration = Duration::from_millis(1);

fn policy(attempts: u32, base: u64, max: u64, jitter: Jitter) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(attempts)
        .with_base_delay_ms(base)
        .with_max_delay_ms(max)
        .with_jitter(jitter)
        .resolve()
        .unwrap()
}

#[test]
fn d1_caps_with_defaults_are_200_400_800_1600_3000() {
    let caps: Vec<u128> = (1..=7)
        .map(|k| RetryPolicy::DEFAULT.delay_cap(k).as_millis())
        .collect();
    assert_eq!(caps, [200, 400, 800, 1600, 3000, 3000, 3000]);
}

#[test]
fn d1_caps_with_five_attempts_base_500() {
    let p = policy(5, 500, 3000, Jitter::Full);
    let caps: Vec<u128> = (1..5).map(|k| p.delay_cap(k).as_millis()).collect();
    assert_eq!(caps, [1000, 2000, 3000, 3000]);
    // Exactly max_attempts - 1 waits: none after attempt 5.
    assert_eq!(p.delays(&mut JitterRng::seeded(1)).count(), 4);
}

#[test]
fn d1_full_jitter_stays_below_the_cap_and_spreads_over_it() {
    let cap = Duration::from_millis(800);
    let mut rng = JitterRng::seeded(42);
    let mut buckets = [0u32; 10];
    for _ in 0..20_000 {
        let d = Jitter::Full.draw(cap, 100 * MS, 3000 * MS, Duration::ZERO, &mut rng);
        assert!(d < cap, "{d:?} reached the cap");
        buckets[(d.as_nanos() * 10 / cap.as_nanos()) as usize] += 1;
    }
    // Uniform: every tenth of the range gets roughly a tenth of the draws.
    for (i, count) in buckets.iter().enumerate() {
        assert!(
            (1_500..2_500).contains(count),
            "bucket {i} has {count} of 20000"
        );
    }
}

#[test]
fn d2_none_waits_exactly_the_cap() {
    let p = policy(6, 100, 1000, Jitter::None);
    let ms: Vec<u128> = p
        .delays(&mut JitterRng::seeded(0))
        .map(|d| d.as_millis())
        .collect();
    assert_eq!(ms, [200, 400, 800, 1000, 1000]);
}

#[test]
fn d2_equal_jitter_is_in_upper_half() {
    let cap = Duration::from_millis(800);
    let mut rng = JitterRng::seeded(7);
    for _ in 0..5_000 {
        let d = Jitter::Equal.draw(cap, 100 * MS, 3000 * MS, Duration::ZERO, &mut rng);
        assert!(d >= cap / 2 && d < cap, "{d:?}");
    }
}

#[test]
fn d2_decorrelated_grows_from_previous_and_respects_max() {
    let (base, max) = (100 * MS, 1000 * MS);
    let mut rng = JitterRng::seeded(9);
    let mut previous = Duration::ZERO;
    for _ in 0..5_000 {
        let d = Jitter::Decorrelated.draw(max, base, max, previous, &mut rng);
        let upper = (previous.max(base) * 3).min(max);
        assert!(
            d >= base.min(max) && d <= upper,
            "{d:?} outside [{base:?}, {upper:?}]"
        );
        previous = d;
    }
}

#[test]
fn d2_jitter_names_parse_and_list_valid_ones() {
    for j in Jitter::ALL {
        assert_eq!(j.name().parse::<Jitter>(), Ok(j));
        assert_eq!(j.to_string(), j.name());
    }
    let err = "ful".parse::<Jitter>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown jitter `ful`: expected one of `full`, `equal`, `decorrelated`, `none`"
    );
}

#[test]
fn d3_exponential_defaults_100_200_400_800_capped_at_30s() {
    let b = ExponentialBackoff::DEFAULT;
    assert_eq!(
        (b.base(), b.factor(), b.cap(), b.jitter()),
        (100 * MS, 2.0, Duration::from_secs(30), Jitter::Full)
    );
    let ms: Vec<u128> = (0..4).map(|i| b.unjittered(i).as_millis()).collect();
    assert_eq!(ms, [100, 200, 400, 800]);
    assert_eq!(b.unjittered(20), Duration::from_secs(30));
    assert_eq!(ExponentialBackoff::default(), b);
}

#[test]
fn d3_exponential_builder_validates() {
    for factor in [0.5, f64::NAN, f64::INFINITY, -2.0] {
        let err = ExponentialBackoff::builder()
            .factor(factor)
            .build()
            .unwrap_err();
        assert!(matches!(err, BackoffError::InvalidFactor(_)), "{factor}");
    }
    let err = ExponentialBackoff::builder()
        .base(2 * MS)
        .cap(MS)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "backoff.base (2ms) must be <= backoff.cap (1ms)"
    );
    // The same bounds check as the other shapes': equal is fine, and the factor comes first.
    assert!(
        ExponentialBackoff::builder()
            .base(MS)
            .cap(MS)
            .build()
            .is_ok()
    );
    let err = ExponentialBackoff::builder()
        .factor(0.5)
        .base(2 * MS)
        .cap(MS)
        .build()
        .unwrap_err();
    assert!(matches!(err, BackoffError::InvalidFactor(_)), "{err}");
    let b = ExponentialBackoff::builder()
        .factor(1.5)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let ms: Vec<u128> = b
        .delays(JitterRng::seeded(0))
        .take(3)
        .map(|d| d.as_millis())
        .collect();
    assert_eq!(ms, [100, 150, 225]);
}

#[test]
fn d3_zero_base_means_zero_waits_at_every_index() {
    let b = ExponentialBackoff::builder()
        .base(Duration::ZERO)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    for i in [0, 10, 2000, u32::MAX] {
        assert_eq!(b.unjittered(i), Duration::ZERO, "retry index {i}");
    }
}

#[test]
fn d3_constant_and_custom_delays() {
    let mut rng = JitterRng::seeded(0);
    assert_eq!(Constant(7 * MS).delay(99, Duration::ZERO, &mut rng), 7 * MS);
    let mut linear = backoff_fn(|attempt| attempt * 10 * MS);
    assert_eq!(linear.delay(3, Duration::ZERO, &mut rng), 30 * MS);
}

#[test]
fn d4_huge_attempt_numbers_saturate() {
    let p = policy(u32::MAX, u64::MAX, u64::MAX, Jitter::Full);
    assert_eq!(p.delay_cap(u32::MAX), Duration::from_millis(u64::MAX));
    assert_eq!(RetryPolicy::DEFAULT.delay_cap(64), 3000 * MS);
    assert_eq!(RetryPolicy::DEFAULT.delay_cap(63), 3000 * MS);
    let mut rng = JitterRng::seeded(3);
    for j in Jitter::ALL {
        let d = j.draw(
            p.delay_cap(u32::MAX),
            p.base_delay(),
            p.max_delay(),
            Duration::MAX,
            &mut rng,
        );
        assert!(d <= p.max_delay());
    }
    let huge = ExponentialBackoff::builder()
        .cap(Duration::MAX)
        .factor(1e300)
        .build()
        .unwrap();
    assert_eq!(huge.unjittered(u32::MAX), Duration::MAX);
}

/// Issue item 12: above about 100 days, base and cap a nanosecond apart are equal in f64
/// seconds; the schedule must still start at the base, and grow in whole nanoseconds.
#[test]
fn d3_base_just_below_a_long_cap_is_the_first_delay_not_the_cap() {
    let base = Duration::from_secs(100 * 86_400);
    for (cap, factor) in [
        (base + Duration::from_nanos(1), 2.0),
        (base + Duration::from_nanos(1), 1.0),
        (
            Duration::from_secs(1_000 * 86_400) + Duration::from_nanos(3),
            1.5,
        ),
        (Duration::MAX, 2.0),
    ] {
        let backoff = ExponentialBackoff::builder()
            .base(base)
            .factor(factor)
            .cap(cap)
            .jitter(Jitter::None)
            .build()
            .unwrap();
        assert_eq!(backoff.unjittered(0), base, "cap {cap:?}, factor {factor}");
        let mut previous = base;
        for i in 1..80 {
            let d = backoff.unjittered(i);
            assert!(
                previous <= d && d <= cap,
                "index {i}: {d:?} after {previous:?}"
            );
            previous = d;
        }
        if factor > 1.0 {
            assert_eq!(backoff.unjittered(u32::MAX), cap);
        } else {
            assert_eq!(backoff.unjittered(u32::MAX), base);
        }
    }
    // The un-jittered delay of a near-equal pair is exact: the base, then the cap.
    let backoff = ExponentialBackoff::builder()
        .base(base)
        .cap(base + Duration::from_nanos(1))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    assert_eq!(backoff.unjittered(1), base + Duration::from_nanos(1));
    // The precomputed saturation index of the default agrees with the builder's search.
    assert_eq!(
        ExponentialBackoff::builder().build().unwrap(),
        ExponentialBackoff::DEFAULT
    );
}

#[test]
fn t2_same_seed_same_delays() {
    let p = RetryPolicy::DEFAULT;
    let a: Vec<_> = p.delays(&mut JitterRng::seeded(5)).collect();
    let b: Vec<_> = p.delays(&mut JitterRng::seeded(5)).collect();
    let c: Vec<_> = p.delays(&mut JitterRng::seeded(6)).collect();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

fn any_policy() -> impl Strategy<Value = RetryPolicy> {
    (
        1u32..=20,
        1u64..=1_000_000,
        1u64..=u64::MAX,
        prop::sample::select(Jitter::ALL.to_vec()),
    )
        .prop_map(|(attempts, base, max, jitter)| policy(attempts, base.min(max), max, jitter))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// D1: after failed attempt k the full-jitter wait is in [0, cap(k)).
    #[test]
    fn d1_full_jitter_bounds(p in any_policy(), k in 1u32..=u32::MAX, seed in any::<u64>()) {
        let mut backoff = p.with_jitter(Jitter::Full).backoff();
        let cap = p.delay_cap(k);
        let d = backoff.delay(k, Duration::ZERO, &mut JitterRng::seeded(seed));
        prop_assert!(d < cap, "{:?} >= cap {:?}", d, cap);
        // The formula, in wide integers: min(2^k * base, max).
        let (base, max) = (p.base_delay().as_millis(), p.max_delay().as_millis());
        let expected = if k >= 64 { max } else { (base << k).min(max) };
        prop_assert_eq!(cap.as_millis(), expected);
    }

    /// D2: every strategy's waits stay within [0, max_delay], whatever the previous wait.
    #[test]
    fn d2_all_strategies_within_max(p in any_policy(), k in 1u32..=200, prev_ms in any::<u64>(), seed in any::<u64>()) {
        let mut backoff = p.backoff();
        let d = backoff.delay(k, Duration::from_millis(prev_ms), &mut JitterRng::seeded(seed));
        prop_assert!(d <= p.max_delay());
        match p.jitter() {
            Jitter::None => prop_assert_eq!(d, p.delay_cap(k)),
            Jitter::Equal => prop_assert!(d >= p.delay_cap(k) / 2 && d < p.delay_cap(k)),
            Jitter::Full => prop_assert!(d < p.delay_cap(k)),
            Jitter::Decorrelated => prop_assert!(d >= p.base_delay()),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// D3/D4: the schedule is min(cap, base · factor^i), never decreasing, and exactly the cap
    /// from the first index that reaches it on (the shortcut taken past that index agrees).
    #[test]
    fn d3_exponential_schedule_matches_its_formula(
        base_ms in 1u64..=10_000,
        factor in 1.0f64..=10.0,
        cap_ms in 1u64..=10_000_000,
    ) {
        let (base, cap) = (Duration::from_millis(base_ms.min(cap_ms)), Duration::from_millis(cap_ms));
        let b = ExponentialBackoff::builder().base(base).factor(factor).cap(cap).build().unwrap();
        let mut previous = Duration::ZERO;
        for i in 0..200u32 {
            let d = b.unjittered(i);
            let reference = (base.as_secs_f64() * factor.powi(i as i32)).min(cap.as_secs_f64());
            prop_assert!((d.as_secs_f64() - reference).abs() <= reference * 1e-9 + 1e-9, "i={} {:?} vs {}", i, d, reference);
            prop_assert!(d >= previous && d <= cap);
            previous = d;
        }
        prop_assert_eq!(b.unjittered(u32::MAX), if factor > 1.0 { cap } else { base });
    }
}
