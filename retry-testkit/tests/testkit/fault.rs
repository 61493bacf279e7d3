//! Fault scripts: SPEC T4 (scripted failures, checked to be consumed), used with the retry
//! loop's R1/R2 behaviour.

use crate::support;

use std::time::Duration;

use retry_testkit::{
    AttemptEnd, AttemptRecord, Fault, FaultScript, MockClock, Outcome, Step, Unconsumed,
};
use support::{MS, no_jitter};

#[test]
fn t4_fail_twice_then_succeed_records_every_attempt() {
    let clock = MockClock::new();
    let script = FaultScript::new()
        .fail_times(2, Fault::new("503"))
        .succeed("body")
        .on(&clock);
    let out = clock
        .block_on(no_jitter(5).retry(script.operation()))
        .unwrap();
    assert_eq!(out, Ok("body"));
    let record = |number, start: u32, outcome| AttemptRecord {
        number,
        start: start * MS,
        end: Some(start * MS),
        outcome,
    };
    assert_eq!(
        script.attempts(),
        [
            record(1, 0, AttemptEnd::Failed),
            record(2, 200, AttemptEnd::Failed),
            record(3, 600, AttemptEnd::Succeeded),
        ]
    );
    assert_eq!((script.calls(), script.remaining()), (3, 0));
    script.assert_consumed();
}

#[test]
fn t4_a_step_taking_time_moves_the_clock_by_exactly_that() {
    let clock = MockClock::new();
    let script = FaultScript::<_, Fault>::new()
        .then(Step::succeed(()).taking(80 * MS))
        .on(&clock);
    clock
        .block_on(no_jitter(1).retry(script.operation()))
        .unwrap()
        .unwrap();
    assert_eq!(clock.elapsed(), 80 * MS);
    assert_eq!(script.attempts()[0].end, Some(80 * MS));
    assert_eq!(clock.sleeps(), [80 * MS]);
}

#[test]
fn t4_r2_the_last_error_is_returned_when_the_script_keeps_failing() {
    let clock = MockClock::new();
    let script = FaultScript::<(), _>::new()
        .fail(Fault::new("first"))
        .fail(Fault::new("second"))
        .fail(Fault::new("third"))
        .on(&clock);
    let out = clock
        .block_on(no_jitter(3).retry(script.operation()))
        .unwrap();
    assert_eq!(out, Err(Fault::new("third")));
    script.assert_consumed();
}

#[test]
fn t4_unused_steps_are_reported_clearly() {
    let clock = MockClock::new();
    let script = FaultScript::new()
        .fail(Fault::new("503"))
        .succeed(1)
        .then(Step::succeed(2).taking(80 * MS))
        .hang()
        .on(&clock);
    let _ = clock.block_on(no_jitter(5).retry(script.operation()));
    assert_eq!(
        script.check_consumed(),
        Err(Unconsumed {
            used: 2,
            total: 4,
            unused: "step 3: succeed after 80ms, step 4: hang".to_owned(),
        })
    );
    assert_eq!(
        script.check_consumed().unwrap_err().to_string(),
        "fault script not consumed: 2 of 4 step(s) used, left unused: step 3: succeed after \
         80ms, step 4: hang; the loop made fewer attempts than the script expected"
    );
}

#[test]
#[should_panic(expected = "fault script not consumed: 0 of 1 step(s) used")]
fn t4_assert_consumed_fails_the_test_when_steps_are_left() {
    let clock = MockClock::new();
    FaultScript::<(), Fault>::new()
        .fail(Fault::new("never played"))
        .on(&clock)
        .assert_consumed();
}

#[test]
#[should_panic(
    expected = "fault script exhausted: call 3 (attempt 3) found no step left in a script of 2 step(s)"
)]
fn t4_more_attempts_than_steps_fails_the_test_with_a_clear_message() {
    let clock = MockClock::new();
    let script = FaultScript::<(), _>::new()
        .fail_times(2, Fault::new("503"))
        .on(&clock);
    let _ = clock.block_on(no_jitter(3).retry(script.operation()));
}

#[test]
fn t4_a_hanging_step_ends_only_by_a_limit() {
    let clock = MockClock::new();
    let script = FaultScript::<_, Fault>::new()
        .hang()
        .succeed("second")
        .on(&clock);
    let out = clock
        .block_on(
            no_jitter(2)
                .retry(script.operation())
                .attempt_timeout(Duration::from_secs(1)),
        )
        .unwrap();
    assert_eq!(out, Ok("second"));
    let outcomes: Vec<_> = script.attempts().iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, [AttemptEnd::Dropped, AttemptEnd::Succeeded]);
    assert_eq!(
        script.attempts()[1].start,
        Duration::from_secs(1) + 200 * MS
    );
}

#[test]
fn t4_scripts_are_plain_data_until_bound_to_a_clock() {
    let script = FaultScript::new()
        .fail_times(2, "busy")
        .then(Step::new(Outcome::Succeed(5)).taking(MS));
    assert_eq!(script.len(), 3);
    assert!(!script.is_empty() && FaultScript::<(), ()>::default().is_empty());
    assert_eq!(script.steps()[0].outcome(), &Outcome::Fail("busy"));
    assert_eq!(script.steps()[2].to_string(), "succeed after 1ms");
    // One plan, two independent runs.
    for _ in 0..2 {
        let clock = MockClock::new();
        let scripted = script.clone().on(&clock);
        let out = clock
            .block_on(no_jitter(3).retry(scripted.operation()))
            .unwrap();
        assert_eq!(out, Ok(5));
        scripted.assert_consumed();
    }
}

#[test]
fn fault_displays_its_message_and_hint() {
    let plain = Fault::new("503 Service Unavailable");
    assert_eq!(plain.to_string(), "503 Service Unavailable");
    assert_eq!(
        (plain.message(), plain.retry_after()),
        ("503 Service Unavailable", None)
    );
    let hinted = plain.with_retry_after(Duration::from_millis(1500));
    assert_eq!(
        hinted.to_string(),
        "503 Service Unavailable (retry after 1500ms)"
    );
    let _: &dyn std::error::Error = &hinted;
}
