//! Property tests — SPEC T3 — on the testkit's own strategies: D1 and D2 (delay bounds), O3
//! (validation is total and reports the first broken rule), R2/R3 (attempt, predicate and
//! wait counts through the real retry loop on the mock clock), and T1 (the clock adds up).
//!
//! Every property runs [`CASES`] = 2,000 cases (proptest's default is 256); the whole file
//! takes a few seconds in a debug build.

#![cfg(feature = "proptest")]

use std::time::Duration;

use proptest::prelude::*;
use retry_testkit::{Fault, MockClock, Outcome, join_all, strategy};
use retry_toolkit::{Backoff, Jitter, JitterRng, RetryOptions, RetryPolicy};

/// Cases per property.
const CASES: u32 = 2_000;

const MESSAGES: [&str; 5] = [
    "retry.max_attempts must be >= 1",
    "retry.max_attempts must be an integer",
    "retry.base_delay_ms must be > 0",
    "retry.max_delay_ms must be > 0",
    "retry.base_delay_ms must be <= retry.max_delay_ms",
];

/// Messages retry-toolkit adds for fractional delays in a serialized form; SPEC O3 lists no rule
/// for them (see the report on issue 4).
/// A number above a field's maximum is refused, never clamped.
const TOO_LARGE_MESSAGES: [&str; 3] = [
    "retry.max_attempts must be <= 4294967295",
    "retry.base_delay_ms must be <= 18446744073709551615",
    "retry.max_delay_ms must be <= 18446744073709551615",
];

const DELAY_INTEGER_MESSAGES: [&str; 2] = [
    "retry.base_delay_ms must be an integer",
    "retry.max_delay_ms must be an integer",
];

/// D1's cap, computed independently in wide integers: `min(2^k · base, max)` milliseconds.
fn cap_ms(base: u64, max: u64, k: u32) -> u64 {
    2u128
        .checked_pow(k)
        .and_then(|p| p.checked_mul(u128::from(base)))
        .map_or(max, |v| v.min(u128::from(max)) as u64)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap()
}

/// The bounds a wait after failed attempt `k` must respect (D1, D2), given the wait before.
fn check_wait(
    policy: &RetryPolicy,
    k: u32,
    previous: Duration,
    wait: Duration,
) -> Result<(), TestCaseError> {
    let (base, max) = (millis(policy.base_delay()), millis(policy.max_delay()));
    let cap = Duration::from_millis(cap_ms(base, max, k));
    prop_assert!(
        wait <= policy.max_delay(),
        "{:?} above max at k={}",
        wait,
        k
    );
    match policy.jitter() {
        Jitter::Full => prop_assert!(wait < cap, "{:?} not below cap {:?}", wait, cap),
        Jitter::Equal => prop_assert!(wait >= cap / 2 && wait < cap, "{:?} vs {:?}", wait, cap),
        Jitter::None => prop_assert_eq!(wait, cap),
        Jitter::Decorrelated => {
            let low = policy.base_delay().min(policy.max_delay());
            let high = previous.max(low).saturating_mul(3);
            prop_assert!(
                wait >= low && wait < high,
                "{:?} not in [{:?}, {:?})",
                wait,
                low,
                high
            );
        }
    }
    Ok(())
}

/// The attempts to check D1 at: every k where the cap can still double, then the extremes.
fn every_k() -> impl Iterator<Item = u32> {
    (1..=66).chain([1_000, u32::MAX - 1, u32::MAX])
}

/// What O3 says `options` must resolve to: `Ok` or the message of the first broken rule.
fn o3_expected(options: RetryOptions) -> Result<(u32, u64, u64), &'static str> {
    let merged = options.or(RetryOptions::BUILTIN);
    let (attempts, base, max) = (
        merged.max_attempts.unwrap_or(3),
        merged.base_delay_ms.unwrap_or(100),
        merged.max_delay_ms.unwrap_or(3000),
    );
    match () {
        () if attempts < 1 => Err(MESSAGES[0]),
        () if base == 0 => Err(MESSAGES[2]),
        () if max == 0 => Err(MESSAGES[3]),
        () if base > max => Err(MESSAGES[4]),
        () => Ok((attempts, base, max)),
    }
}

/// A number as a config file may write it.
#[derive(Clone, Copy, Debug)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn json(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => format!("{f:?}"),
        }
    }
}

fn numbers() -> impl Strategy<Value = Num> {
    prop_oneof![
        (-3i128..=12).prop_map(Num::Int),
        any::<i64>().prop_map(|i| Num::Int(i.into())),
        prop_oneof![Just(u64::MAX as i128), Just(u32::MAX as i128 + 1)].prop_map(Num::Int),
        (-3.0f64..12.0).prop_map(Num::Float),
        prop_oneof![
            Just(2.5),
            Just(-1.5),
            Just(0.0),
            Just(1e300),
            Just(-1e300),
            Just(3.0)
        ]
        .prop_map(Num::Float),
    ]
}

/// O3 for a serialized document, rule by rule in order: `Ok` or the expected message.
fn o3_expected_serialized(
    attempts: Option<Num>,
    base: Option<Num>,
    max: Option<Num>,
) -> Result<(), &'static str> {
    if let Some(n) = attempts {
        match n {
            Num::Int(i) if i < 1 => return Err(MESSAGES[0]),
            Num::Float(f) if f < 1.0 => return Err(MESSAGES[0]),
            Num::Float(f) if f.fract() != 0.0 => return Err(MESSAGES[1]),
            Num::Int(i) if i > i128::from(u32::MAX) => return Err(TOO_LARGE_MESSAGES[0]),
            Num::Float(f) if f > f64::from(u32::MAX) => return Err(TOO_LARGE_MESSAGES[0]),
            _ => {}
        }
    }
    // 2^64: the first float above u64::MAX.
    const ABOVE_U64: f64 = 18_446_744_073_709_551_616.0;
    let delay = |n: Option<Num>, rules: [&'static str; 3]| match n {
        Some(Num::Int(i)) if i <= 0 => Err(rules[0]),
        Some(Num::Float(f)) if f <= 0.0 => Err(rules[0]),
        Some(Num::Float(f)) if f.fract() != 0.0 => Err(rules[1]),
        Some(Num::Int(i)) => u64::try_from(i).map(Some).map_err(|_| rules[2]),
        Some(Num::Float(f)) if f >= ABOVE_U64 => Err(rules[2]),
        Some(Num::Float(f)) => Ok(Some(f as u64)),
        None => Ok(None),
    };
    let base = delay(
        base,
        [
            MESSAGES[2],
            DELAY_INTEGER_MESSAGES[0],
            TOO_LARGE_MESSAGES[1],
        ],
    )?;
    let max = delay(
        max,
        [
            MESSAGES[3],
            DELAY_INTEGER_MESSAGES[1],
            TOO_LARGE_MESSAGES[2],
        ],
    )?;
    match (base.unwrap_or(100), max.unwrap_or(3000)) {
        (b, m) if b > m => Err(MESSAGES[4]),
        _ => Ok(()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// D1: with full jitter, the wait after failed attempt k is in [0, cap(k)) for every k,
    /// cap(k) = min(2^k · base, max); huge k saturates at max without overflow (D4).
    #[test]
    fn d1_full_jitter_waits_are_below_the_cap_for_every_k(policy in strategy::policies()) {
        let policy = policy.with_jitter(Jitter::Full);
        let (base, max) = (millis(policy.base_delay()), millis(policy.max_delay()));
        let mut rng = JitterRng::seeded(policy.seed().unwrap_or_default());
        let mut backoff = policy.backoff();
        for k in every_k() {
            let cap = Duration::from_millis(cap_ms(base, max, k));
            prop_assert_eq!(policy.delay_cap(k), cap, "cap at k={}", k);
            check_wait(&policy, k, Duration::ZERO, backoff.delay(k, Duration::ZERO, &mut rng))?;
        }
    }

    /// D2: none waits the cap, equal draws from [cap/2, cap), decorrelated from
    /// [base, 3 · previous); every strategy stays <= max_delay, chained wait after wait.
    #[test]
    fn d2_every_strategy_stays_in_its_bounds_and_under_max(policy in strategy::policies()) {
        let mut rng = JitterRng::seeded(policy.seed().unwrap_or_default());
        let mut backoff = policy.backoff();
        let mut previous = Duration::ZERO;
        for k in every_k() {
            let wait = backoff.delay(k, previous, &mut rng);
            check_wait(&policy, k, previous, wait)?;
            previous = wait;
        }
    }

    /// D2/D3: the general exponential backoff never exceeds its cap, whatever the jitter:
    /// jitter is drawn below the cap, never added after it.
    #[test]
    fn d2_exponential_backoff_never_exceeds_its_cap(
        backoff in strategy::exponential_backoffs(),
        seed in any::<u64>(),
    ) {
        let waits: Vec<Duration> = backoff.delays(JitterRng::seeded(seed)).take(80).collect();
        for (i, wait) in (0u32..).zip(&waits) {
            prop_assert!(*wait <= backoff.cap(), "{:?} above cap {:?}", wait, backoff.cap());
            prop_assert!(backoff.unjittered(i) <= backoff.cap());
        }
    }

    /// O3: every options value resolves to a policy satisfying the invariants, or fails with
    /// exactly the message of the first rule it breaks.
    #[test]
    fn o3_resolving_is_total_and_reports_the_first_broken_rule(options in strategy::any_options()) {
        match (options.resolve(), o3_expected(options)) {
            (Ok(policy), Ok((attempts, base, max))) => {
                prop_assert_eq!(policy.max_attempts(), attempts);
                prop_assert_eq!(policy.base_delay(), Duration::from_millis(base));
                prop_assert_eq!(policy.max_delay(), Duration::from_millis(max));
                prop_assert!(attempts >= 1 && base > 0 && base <= max);
                prop_assert_eq!(policy.jitter(), options.jitter.unwrap_or_default());
                prop_assert_eq!(policy.to_options().resolve(), Ok(policy));
            }
            (Err(error), Err(message)) => {
                prop_assert_eq!(error.to_string(), message);
                prop_assert_eq!(MESSAGES.iter().filter(|m| **m == error.to_string()).count(), 1);
            }
            (got, expected) => prop_assert!(false, "{}: got {:?}, expected {:?}", options, got, expected),
        }
    }

    /// O3: valid options always resolve.
    #[test]
    fn o3_valid_options_always_resolve(options in strategy::valid_options()) {
        prop_assert!(options.resolve().is_ok(), "{}", options);
    }

    /// O3/O6: a serialized document (integers of any sign and size, fractions, huge floats)
    /// deserializes and resolves, or fails with the message of the first broken rule.
    #[test]
    fn o3_serialized_options_are_total(
        attempts in prop::option::of(numbers()),
        base in prop::option::of(numbers()),
        max in prop::option::of(numbers()),
    ) {
        let fields: Vec<String> = [("max_attempts", attempts), ("base_delay_ms", base), ("max_delay_ms", max)]
            .into_iter()
            .filter_map(|(key, n)| n.map(|n| format!("\"{key}\": {}", n.json())))
            .collect();
        let document = format!("{{{}}}", fields.join(", "));
        let got = serde_json::from_str::<RetryOptions>(&document)
            .map_err(|e| e.to_string())
            .and_then(|options| options.resolve().map(drop).map_err(|e| e.to_string()));
        match (got, o3_expected_serialized(attempts, base, max)) {
            (Ok(()), Ok(())) => {}
            (Err(error), Err(message)) => {
                prop_assert!(error.starts_with(message), "{}: {}", document, error);
                let known = MESSAGES.iter().chain(&DELAY_INTEGER_MESSAGES).chain(&TOO_LARGE_MESSAGES);
                prop_assert_eq!(known.filter(|m| error.contains(*m)).count(), 1, "{}", error);
            }
            (got, expected) => prop_assert!(false, "{}: got {:?}, expected {:?}", document, got, expected),
        }
    }

    /// R2/R3 through the real loop on the mock clock: attempts stop at the first success, at
    /// max_attempts, or when the predicate says no; the predicate is asked with next_attempt
    /// = 2, 3, … and never after the final attempt; the last error is returned; there is
    /// exactly one wait per retry (waits == attempts - 1), each within its D1/D2 bounds; and
    /// virtual time is exactly the steps' durations plus the waits.
    #[test]
    fn r2_r3_attempts_predicate_and_waits_through_the_real_loop(
        policy in strategy::small_policies(10),
        script in strategy::fault_scripts(any::<u16>(), any::<u16>().prop_map(|n| Fault::new(n.to_string())), 12),
        veto in prop::option::of(2u32..=12),
    ) {
        // The oracle: what R2/R3 say the loop does with this script.
        let mut script = script;
        let mut expected_asked = Vec::new();
        let mut attempt = 1u32;
        let last = loop {
            let index = attempt as usize - 1;
            if index >= script.len() {
                // Keep failing past the end of the plan.
                script = script.fail(Fault::new("padding"));
            }
            match script.steps()[index].outcome() {
                Outcome::Fail(_) if attempt < policy.max_attempts() => {
                    expected_asked.push(attempt + 1);
                    if veto == Some(attempt + 1) {
                        break index;
                    }
                    attempt += 1;
                }
                _ => break index,
            }
        };
        let expected_attempts = last + 1;
        let steps = script.steps().to_vec();

        let clock = MockClock::new();
        let scripted = script.on(&clock);
        let mut asked = Vec::new();
        let mut waits = Vec::new();
        let out = clock
            .block_on(
                policy
                    .retry(scripted.operation())
                    .when(|_, next| {
                        asked.push(next);
                        Some(next) != veto
                    })
                    .notify(|_, k, wait| waits.push((k, wait))),
            )
            .unwrap();

        prop_assert_eq!(scripted.calls(), expected_attempts);
        let numbers: Vec<u32> = scripted.attempts().iter().map(|a| a.number).collect();
        prop_assert_eq!(numbers, (1..=expected_attempts as u32).collect::<Vec<_>>());
        match (out, steps[last].outcome()) {
            (Ok(value), Outcome::Succeed(expected)) => prop_assert_eq!(value, *expected),
            (Err(error), Outcome::Fail(expected)) => prop_assert_eq!(&error, expected),
            (out, step) => prop_assert!(false, "returned {:?} at step {:?}", out, step),
        }
        prop_assert_eq!(asked, expected_asked);
        prop_assert_eq!(waits.len(), expected_attempts - 1);
        let mut previous = Duration::ZERO;
        for (i, (k, wait)) in waits.iter().enumerate() {
            prop_assert_eq!(*k as usize, i + 1);
            check_wait(&policy, *k, previous, *wait)?;
            previous = *wait;
        }
        let worked: Duration = steps[..=last].iter().map(|s| s.takes()).sum();
        let waited: Duration = waits.iter().map(|(_, w)| *w).sum();
        prop_assert_eq!(clock.elapsed(), worked + waited);
    }

    /// T1: sleeps in sequence add up; sleeps of concurrent tasks overlap, so the clock ends
    /// at the longest task; every sleep is recorded and none is left pending.
    #[test]
    fn t1_virtual_time_adds_up(tasks in prop::collection::vec(prop::collection::vec(0u64..=5_000, 0..8), 1..6)) {
        let clock = MockClock::new();
        let runs = tasks.iter().map(|sleeps| {
            let clock = clock.clone();
            async move {
                for ms in sleeps {
                    clock.sleep(Duration::from_millis(*ms)).await;
                }
                clock.elapsed()
            }
        });
        let finished = clock.block_on(join_all(runs)).unwrap();
        let totals: Vec<Duration> = tasks.iter().map(|s| s.iter().map(|ms| Duration::from_millis(*ms)).sum()).collect();
        prop_assert_eq!(&finished, &totals);
        prop_assert_eq!(clock.elapsed(), totals.iter().copied().max().unwrap_or_default());
        prop_assert_eq!(clock.sleeps().len(), tasks.iter().map(Vec::len).sum::<usize>());
        prop_assert_eq!(clock.pending(), 0);
    }
}
