//! The circuit breaker (B2, B3), transition by transition on the mock clock.
//!
//! Cases marked "Polly" or "resilience4j" restate, in our own terms, what those libraries'
//! breakers promise: a user moving from either should find the same state machine (and the
//! differences are named where they are deliberate).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_testkit::MockClock;
use retry_toolkit::{
    BreakerError, ChangeReason, CircuitBreaker, CircuitOpen, CircuitState, StateChange,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn breaker(
    build: impl FnOnce(retry_toolkit::BreakerBuilder) -> retry_toolkit::BreakerBuilder,
) -> CircuitBreaker {
    build(CircuitBreaker::builder().name("dep"))
        .build()
        .unwrap()
}

/// Every change the breaker reports, as `from → to (reason)` at virtual milliseconds.
fn recorded(breaker: &CircuitBreaker, clock: &MockClock) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (sink, origin) = (Arc::clone(&log), clock.now());
    breaker.on_state_change(move |change: &StateChange| {
        let at = change.at.duration_since(origin).as_millis();
        sink.lock().unwrap().push(format!(
            "{at}ms {} → {} ({})",
            change.from, change.to, change.reason
        ));
    });
    log
}

fn fail(breaker: &CircuitBreaker, clock: &MockClock) {
    breaker
        .try_acquire(clock.now())
        .expect("admitted")
        .failure(clock.now());
}

fn succeed(breaker: &CircuitBreaker, clock: &MockClock) {
    breaker
        .try_acquire(clock.now())
        .expect("admitted")
        .success(clock.now());
}

fn refused(breaker: &CircuitBreaker, clock: &MockClock) -> CircuitOpen {
    breaker.try_acquire(clock.now()).expect_err("refused")
}

// ---- closed → open

#[test]
fn b2_closed_opens_after_the_consecutive_failures() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(3));
    fail(&b, &clock);
    fail(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
    fail(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Open);
    assert_eq!(refused(&b, &clock).state(), CircuitState::Open);
}

#[test]
fn b2_a_success_starts_the_consecutive_count_again() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(3));
    for _ in 0..5 {
        fail(&b, &clock);
        fail(&b, &clock);
        succeed(&b, &clock);
    }
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
}

/// Polly: the failure ratio opens the circuit only once the sampling window holds the
/// minimum throughput; below it, even every call failing does not.
#[test]
fn b2_polly_failure_ratio_needs_the_minimum_throughput() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.without_consecutive_failures()
            .failure_ratio(0.5)
            .minimum_throughput(10)
            .sampling_window(10 * SEC)
    });
    for _ in 0..9 {
        fail(&b, &clock);
    }
    assert_eq!(
        b.state(clock.now()),
        CircuitState::Closed,
        "9 calls < minimum throughput"
    );
    fail(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Open);
}

#[test]
fn b2_failure_ratio_below_the_threshold_stays_closed() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.without_consecutive_failures()
            .failure_ratio(0.5)
            .minimum_throughput(4)
    });
    // 4 of 10 fail, the failures last: 40 % < 50 % at the end, and less on the way.
    for i in 0..10 {
        if i < 6 {
            succeed(&b, &clock)
        } else {
            fail(&b, &clock)
        }
    }
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
    // Two more failures: 6 of 12 is 50 %, which opens it.
    fail(&b, &clock);
    fail(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Open);
}

/// Polly's sampling duration, resilience4j's time-based window: failures older than the
/// window are forgotten.
#[test]
fn b2_failures_leave_the_sampling_window() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.without_consecutive_failures()
            .failure_ratio(0.5)
            .minimum_throughput(4)
            .sampling_window(10 * SEC)
    });
    for _ in 0..3 {
        fail(&b, &clock);
    }
    clock.advance(12 * SEC); // past the window and its last tenth
    fail(&b, &clock);
    assert_eq!(
        b.state(clock.now()),
        CircuitState::Closed,
        "one failure in the window"
    );
    for _ in 0..3 {
        fail(&b, &clock);
    }
    assert_eq!(b.state(clock.now()), CircuitState::Open);
}

#[test]
fn b2_either_rule_opens_the_circuit() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.consecutive_failures(3)
            .failure_ratio(0.3)
            .minimum_throughput(10)
    });
    // 3 failures out of 10, never 3 in a row; a fourth makes 36 %: the rate opens it.
    for i in 0..10 {
        if i % 4 == 0 {
            fail(&b, &clock)
        } else {
            succeed(&b, &clock)
        }
    }
    let log = recorded(&b, &clock);
    fail(&b, &clock);
    assert_eq!(
        *log.lock().unwrap(),
        ["0ms closed → open (4 of 11 calls failed)"]
    );
}

// ---- open: refusing for the break

/// resilience4j's `waitDurationInOpenState`, Polly's `BreakDuration`: open for exactly the
/// break, refusing with the time left.
#[test]
fn b2_open_refuses_for_exactly_the_break() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(1).break_duration(5 * SEC));
    fail(&b, &clock);
    assert_eq!(refused(&b, &clock).retry_after(), Some(5 * SEC));
    clock.advance(5 * SEC - MS);
    let open = refused(&b, &clock);
    assert_eq!(
        (open.state(), open.retry_after()),
        (CircuitState::Open, Some(MS))
    );
    assert_eq!(
        open.to_string(),
        "circuit `dep` is open: calls are refused for another 1ms"
    );
    clock.advance(MS);
    let probe = b.try_acquire(clock.now()).expect("the break is over");
    assert!(probe.is_probe());
    assert_eq!(b.state(clock.now()), CircuitState::HalfOpen);
}

#[test]
fn b2_the_state_read_after_the_break_is_half_open() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(1).break_duration(SEC));
    let log = recorded(&b, &clock);
    fail(&b, &clock);
    clock.advance(3 * SEC);
    // Polly: reading the state makes the transition that is due.
    assert_eq!(b.state(clock.now()), CircuitState::HalfOpen);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "0ms closed → open (1 failure in a row)",
            "3000ms open → half-open (the break is over)",
        ]
    );
}

// ---- half-open: bounded probes

/// resilience4j's `permittedNumberOfCallsInHalfOpenState`: that many calls pass, the next is
/// refused while they run.
#[test]
fn b2_resilience4j_half_open_admits_the_permitted_probes_only() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.consecutive_failures(1)
            .break_duration(SEC)
            .half_open_probes(3)
    });
    fail(&b, &clock);
    clock.advance(SEC);
    let probes: Vec<_> = (0..3)
        .map(|_| b.try_acquire(clock.now()).expect("a probe"))
        .collect();
    assert!(probes.iter().all(|p| p.is_probe()));
    let open = refused(&b, &clock);
    assert_eq!(open.state(), CircuitState::HalfOpen);
    assert_eq!(
        open.to_string(),
        "circuit `dep` is half-open and its probes are taken: calls are refused for up to 1s"
    );
    for probe in probes {
        probe.success(clock.now());
    }
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
}

/// Polly: one probe at a time by default; its success closes the circuit.
#[test]
fn b2_polly_one_probe_then_closed_on_success() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(2).break_duration(SEC));
    let log = recorded(&b, &clock);
    fail(&b, &clock);
    fail(&b, &clock);
    clock.advance(SEC);
    let probe = b.try_acquire(clock.now()).unwrap();
    assert_eq!(
        refused(&b, &clock).state(),
        CircuitState::HalfOpen,
        "a second caller waits"
    );
    clock.advance(20 * MS);
    probe.success(clock.now());
    succeed(&b, &clock);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "0ms closed → open (2 failures in a row)",
            "1000ms open → half-open (the break is over)",
            "1020ms half-open → closed (the probe succeeded)",
        ]
    );
}

/// Counting starts afresh after closing: the failures that opened the circuit are history.
#[test]
fn b2_closing_forgets_the_window() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.without_consecutive_failures()
            .failure_ratio(0.5)
            .minimum_throughput(4)
            .break_duration(SEC)
    });
    for _ in 0..4 {
        fail(&b, &clock);
    }
    clock.advance(SEC);
    succeed(&b, &clock); // the probe
    fail(&b, &clock);
    assert_eq!(
        b.state(clock.now()),
        CircuitState::Closed,
        "1 call in the new window"
    );
}

#[test]
fn b2_a_failed_probe_opens_the_circuit_again() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.consecutive_failures(1)
            .break_duration(SEC)
            .half_open_probes(2)
    });
    let log = recorded(&b, &clock);
    fail(&b, &clock);
    clock.advance(SEC);
    let first = b.try_acquire(clock.now()).unwrap();
    let second = b.try_acquire(clock.now()).unwrap();
    first.success(clock.now());
    second.failure(clock.now());
    assert_eq!(refused(&b, &clock).retry_after(), Some(SEC));
    assert_eq!(
        log.lock().unwrap().last().unwrap(),
        "1000ms half-open → open (a probe failed)"
    );
}

/// resilience4j's exponential wait in the open state, Polly's break-duration generator: each
/// open in a row lasts longer, up to a ceiling; closing starts over.
#[test]
fn b2_a_growing_break_doubles_up_to_its_ceiling_and_starts_over_after_closing() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.consecutive_failures(1)
            .break_duration(SEC)
            .break_growth(2.0)
            .max_break_duration(5 * SEC)
    });
    let mut breaks = Vec::new();
    fail(&b, &clock);
    for _ in 0..5 {
        let left = refused(&b, &clock).retry_after().unwrap();
        breaks.push(left.as_secs());
        clock.advance(left);
        fail(&b, &clock); // the probe fails
    }
    assert_eq!(breaks, [1, 2, 4, 5, 5]);
    clock.advance(5 * SEC);
    succeed(&b, &clock); // closes
    fail(&b, &clock);
    assert_eq!(refused(&b, &clock).retry_after(), Some(SEC));
}

#[test]
fn b2_open_events_say_how_long() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.consecutive_failures(1)
            .break_duration(SEC)
            .break_growth(3.0)
    });
    let changes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&changes);
    b.on_state_change(move |c: &StateChange| sink.lock().unwrap().push(*c));
    fail(&b, &clock);
    clock.advance(SEC);
    fail(&b, &clock);
    let changes = changes.lock().unwrap();
    let opens: Vec<_> = changes.iter().filter_map(|c| c.open_for).collect();
    assert_eq!(opens, [SEC, 3 * SEC]);
    assert_eq!(changes[0].breaker, "dep");
    assert_eq!(
        changes[0].reason,
        ChangeReason::ConsecutiveFailures { failures: 1 }
    );
    assert_eq!(
        changes[2].to_string(),
        "circuit `dep`: half-open → open (a probe failed; open for 3s)"
    );
}

/// A probe whose caller gives up (a dropped permit) gives its place back at once.
#[test]
fn b2_a_cancelled_probe_gives_its_place_back() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(1).break_duration(SEC));
    fail(&b, &clock);
    clock.advance(SEC);
    let probe = b.try_acquire(clock.now()).unwrap();
    refused(&b, &clock);
    drop(probe);
    let again = b.try_acquire(clock.now()).expect("the place is free");
    assert!(again.is_probe());
    assert_eq!(
        b.state(clock.now()),
        CircuitState::HalfOpen,
        "nothing was reported"
    );
}

/// Polly: a probe that never reports does not hold the circuit half-open for ever; after a
/// break's length, new probes are admitted.
#[test]
fn b2_polly_probes_that_never_report_expire_after_a_break() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(1).break_duration(SEC));
    fail(&b, &clock);
    clock.advance(SEC);
    let lost = b.try_acquire(clock.now()).unwrap();
    std::mem::forget(lost); // its caller vanished without a trace
    clock.advance(SEC - MS);
    assert_eq!(refused(&b, &clock).retry_after(), Some(MS));
    clock.advance(MS);
    succeed(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
}

/// An outcome that arrives after the state it was admitted in has ended changes nothing:
/// a slow call admitted while closed cannot close a half-open circuit, nor can a probe of an
/// earlier half-open period.
#[test]
fn b2_late_outcomes_of_an_earlier_state_change_nothing() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(1).break_duration(SEC));
    let slow = b.try_acquire(clock.now()).unwrap();
    fail(&b, &clock); // opens
    clock.advance(SEC);
    let probe = b.try_acquire(clock.now()).unwrap();
    slow.success(clock.now());
    assert_eq!(b.state(clock.now()), CircuitState::HalfOpen);
    probe.failure(clock.now());
    assert_eq!(b.state(clock.now()), CircuitState::Open);

    let late = b.try_acquire(clock.now() + SEC).unwrap(); // a probe of the next period
    assert!(late.is_probe());
    clock.advance(3 * SEC); // that period's probes expire; a new one starts
    let current = b.try_acquire(clock.now()).unwrap();
    late.failure(clock.now());
    assert_eq!(
        b.state(clock.now()),
        CircuitState::HalfOpen,
        "the old probe is ignored"
    );
    current.success(clock.now());
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
}

// ---- by hand

/// Polly's `Isolate`, resilience4j's forced-open state: refused until reset.
#[test]
fn b2_isolate_refuses_until_reset() {
    let clock = MockClock::new();
    let b = breaker(|b| b.consecutive_failures(2).break_duration(SEC));
    let log = recorded(&b, &clock);
    fail(&b, &clock);
    b.isolate(clock.now());
    clock.advance(60 * SEC);
    let open = refused(&b, &clock);
    assert_eq!(
        (open.state(), open.retry_after()),
        (CircuitState::Isolated, None)
    );
    assert_eq!(
        open.to_string(),
        "circuit `dep` is isolated: calls are refused until it is reset"
    );
    b.reset(clock.now());
    fail(&b, &clock);
    assert_eq!(
        b.state(clock.now()),
        CircuitState::Closed,
        "reset forgot the first failure"
    );
    b.reset(clock.now()); // already closed: no event
    assert_eq!(
        *log.lock().unwrap(),
        [
            "0ms closed → isolated (isolated by hand)",
            "60000ms isolated → closed (reset by hand)",
        ]
    );
}

#[test]
fn b2_reset_closes_an_open_circuit_and_clears_its_window() {
    let clock = MockClock::new();
    let b = breaker(|b| {
        b.without_consecutive_failures()
            .failure_ratio(0.5)
            .minimum_throughput(2)
    });
    fail(&b, &clock);
    fail(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Open);
    b.reset(clock.now());
    fail(&b, &clock);
    assert_eq!(b.state(clock.now()), CircuitState::Closed);
}

/// A listener runs after the change and outside any lock: it may look at, and even change,
/// the breaker.
#[test]
fn b2_listeners_may_use_the_breaker() {
    let clock = MockClock::new();
    let b = Arc::new(breaker(|b| b.consecutive_failures(1)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (inner, sink, now) = (Arc::downgrade(&b), Arc::clone(&seen), clock.now());
    b.on_state_change(move |change: &StateChange| {
        let Some(b) = inner.upgrade() else { return };
        sink.lock().unwrap().push(b.state(now));
        if change.to == CircuitState::Open {
            b.isolate(now); // an operator's policy: an open circuit stays open
        }
    });
    fail(&b, &clock);
    assert_eq!(
        *seen.lock().unwrap(),
        [CircuitState::Open, CircuitState::Isolated]
    );
    assert_eq!(b.state(clock.now()), CircuitState::Isolated);
}

// ---- shared across threads

#[test]
fn b3_a_static_breaker_is_shared_across_threads_and_bounds_its_probes() {
    static SHARED: CircuitBreaker = CircuitBreaker::with_config(
        match CircuitBreaker::builder()
            .name("shared")
            .consecutive_failures(1)
            .break_duration(Duration::from_millis(1))
            .half_open_probes(4)
            .validate()
        {
            Ok(config) => config,
            Err(e) => panic!("{}", e.message()),
        },
    );
    fn assert_shareable<T: Send + Sync + 'static>(_: &T) {}
    assert_shareable(&SHARED);

    let clock = MockClock::new();
    fail_static(&SHARED, &clock);
    clock.advance(SEC);
    let now = clock.now();
    let admitted = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..1_000 {
                    if let Ok(permit) = SHARED.try_acquire(now) {
                        admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        std::mem::forget(permit); // held for good: places are never freed
                    }
                }
            });
        }
    });
    assert_eq!(
        admitted.into_inner(),
        4,
        "8 threads, 8,000 tries, 4 probe places"
    );
}

fn fail_static(b: &'static CircuitBreaker, clock: &MockClock) {
    b.try_acquire(clock.now()).unwrap().failure(clock.now());
}

// ---- settings

#[test]
fn b3_bad_settings_are_refused_with_their_messages() {
    let cases: [(retry_toolkit::BreakerBuilder, BreakerError, &str); 12] = [
        (
            CircuitBreaker::builder().consecutive_failures(0),
            BreakerError::ConsecutiveFailuresZero,
            "breaker.consecutive_failures must be >= 1",
        ),
        (
            CircuitBreaker::builder().failure_ratio(0.0),
            BreakerError::FailureRatioOutOfRange,
            "breaker.failure_ratio must be > 0 and <= 1",
        ),
        (
            CircuitBreaker::builder().failure_ratio(1.5),
            BreakerError::FailureRatioOutOfRange,
            "breaker.failure_ratio must be > 0 and <= 1",
        ),
        (
            CircuitBreaker::builder().failure_ratio(f64::NAN),
            BreakerError::FailureRatioOutOfRange,
            "breaker.failure_ratio must be > 0 and <= 1",
        ),
        (
            CircuitBreaker::builder().minimum_throughput(0),
            BreakerError::MinimumThroughputZero,
            "breaker.minimum_throughput must be >= 1",
        ),
        (
            CircuitBreaker::builder().sampling_window(Duration::ZERO),
            BreakerError::SamplingWindowTooShort,
            "breaker.sampling_window must be >= 1ms",
        ),
        (
            CircuitBreaker::builder().break_duration(Duration::ZERO),
            BreakerError::BreakDurationTooShort,
            "breaker.break_duration must be >= 1ms",
        ),
        (
            CircuitBreaker::builder().break_growth(0.5),
            BreakerError::BreakGrowthOutOfRange,
            "breaker.break_growth must be >= 1 and finite",
        ),
        (
            CircuitBreaker::builder().break_growth(f64::INFINITY),
            BreakerError::BreakGrowthOutOfRange,
            "breaker.break_growth must be >= 1 and finite",
        ),
        (
            CircuitBreaker::builder().max_break_duration(MS),
            BreakerError::MaxBreakBelowBreak,
            "breaker.max_break_duration must be >= breaker.break_duration",
        ),
        (
            CircuitBreaker::builder().half_open_probes(101),
            BreakerError::HalfOpenProbesOutOfRange,
            "breaker.half_open_probes must be >= 1 and <= 100",
        ),
        (
            CircuitBreaker::builder().without_consecutive_failures(),
            BreakerError::NoTrigger,
            "breaker needs breaker.consecutive_failures or breaker.failure_ratio to open",
        ),
    ];
    for (builder, error, message) in cases {
        assert_eq!(builder.build().unwrap_err(), error, "{builder:?}");
        assert_eq!(error.to_string(), message);
        assert_eq!(error.message(), message);
    }
    assert_eq!(
        CircuitBreaker::builder()
            .half_open_probes(0)
            .validate()
            .unwrap_err(),
        BreakerError::HalfOpenProbesOutOfRange
    );
    let defaults = CircuitBreaker::new();
    assert_eq!(
        defaults.config(),
        CircuitBreaker::builder().build().unwrap().config()
    );
    assert_eq!(defaults.config().break_duration(), 5 * SEC);
}
