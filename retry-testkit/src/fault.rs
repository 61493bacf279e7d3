//! Fault scripts: operations that fail, hang, take time and succeed exactly as planned.
//!
//! A retry test needs an operation whose failures are known up front — "fail twice with
//! `503`, then succeed" — and a way to check afterwards that the loop made exactly the
//! attempts the plan expected. A [`FaultScript`] is that plan; bound to a [`MockClock`] it
//! becomes a [`Scripted`] operation that plays one step per attempt, records when each
//! attempt started and ended on the clock, and can tell at the end whether every step was
//! used.

use std::collections::VecDeque;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::clock::{MockClock, MockSleep};
use crate::format::ms;

/// A ready-made error for scripts: a message and an optional retry-after hint.
///
/// ```
/// use std::time::Duration;
/// use retry_testkit::Fault;
///
/// let throttled = Fault::new("429 Too Many Requests").with_retry_after(Duration::from_secs(2));
/// assert_eq!(throttled.retry_after(), Some(Duration::from_secs(2)));
/// assert_eq!(throttled.to_string(), "429 Too Many Requests (retry after 2000ms)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    message: String,
    retry_after: Option<Duration>,
}

impl Fault {
    /// A fault with this message and no hint.
    pub fn new(message: impl Into<String>) -> Self {
        Fault {
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same fault, asking the client to wait `wait` before the next attempt.
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The hint, if any; pass `Fault::retry_after` to
    /// [`Retry::retry_after`](retry_toolkit::Retry::retry_after).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        match self.retry_after {
            Some(wait) => write!(f, " (retry after {})", ms(wait)),
            None => Ok(()),
        }
    }
}

impl Error for Fault {}

/// What one attempt of a script does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T, E> {
    /// Returns `Ok(value)`.
    Succeed(T),
    /// Returns `Err(error)`.
    Fail(E),
    /// Never completes: only a timeout, a deadline or cancellation ends the attempt.
    Hang,
}

impl<T, E> Outcome<T, E> {
    fn kind(&self) -> &'static str {
        match self {
            Outcome::Succeed(_) => "succeed",
            Outcome::Fail(_) => "fail",
            Outcome::Hang => "hang",
        }
    }
}

/// One step of a [`FaultScript`]: an outcome, and how much clock time the attempt takes
/// before it.
///
/// ```
/// use std::time::Duration;
/// use retry_testkit::{Fault, Step};
///
/// let slow_success: Step<&str, Fault> = Step::succeed("ok").taking(Duration::from_millis(80));
/// assert_eq!(slow_success.takes(), Duration::from_millis(80));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step<T, E> {
    outcome: Outcome<T, E>,
    takes: Duration,
}

impl<T, E> Step<T, E> {
    /// An attempt that returns `Ok(value)` at once.
    pub fn succeed(value: T) -> Self {
        Self::new(Outcome::Succeed(value))
    }

    /// An attempt that returns `Err(error)` at once.
    pub fn fail(error: E) -> Self {
        Self::new(Outcome::Fail(error))
    }

    /// An attempt that never completes.
    pub fn hang() -> Self {
        Self::new(Outcome::Hang)
    }

    /// A step with this outcome, taking no time.
    pub fn new(outcome: Outcome<T, E>) -> Self {
        Step {
            outcome,
            takes: Duration::ZERO,
        }
    }

    /// The same step, taking `duration` of clock time before its outcome (a hanging step
    /// hangs after it).
    pub fn taking(mut self, duration: Duration) -> Self {
        self.takes = duration;
        self
    }

    /// The step's outcome.
    pub fn outcome(&self) -> &Outcome<T, E> {
        &self.outcome
    }

    /// The clock time the step takes before its outcome.
    pub fn takes(&self) -> Duration {
        self.takes
    }
}

impl<T, E> fmt::Display for Step<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.outcome.kind())?;
        if !self.takes.is_zero() {
            write!(f, " after {}", ms(self.takes))?;
        }
        Ok(())
    }
}

/// A plan of attempts: each attempt of the operation plays the next step.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{Jitter, RetryPolicy};
/// use retry_testkit::{Fault, FaultScript, MockClock, Step};
///
/// let clock = MockClock::new();
/// let script = FaultScript::new()
///     .fail_times(2, Fault::new("503"))
///     .then(Step::succeed("body").taking(Duration::from_millis(80)))
///     .on(&clock);
///
/// let policy = RetryPolicy::DEFAULT.with_jitter(Jitter::None);
/// let out = clock.block_on(policy.retry(script.operation())).unwrap();
/// assert_eq!(out, Ok("body"));
///
/// let starts: Vec<u128> = script.attempts().iter().map(|a| a.start.as_millis()).collect();
/// assert_eq!(starts, [0, 200, 600]);               // waits of 200 and 400 ms
/// assert_eq!(clock.elapsed(), Duration::from_millis(680)); // the last attempt took 80 ms
/// script.assert_consumed();
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultScript<T, E> {
    steps: Vec<Step<T, E>>,
}

impl<T, E> Default for FaultScript<T, E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, E> FaultScript<T, E> {
    /// An empty script.
    pub fn new() -> Self {
        FaultScript { steps: Vec::new() }
    }

    /// Appends a step.
    pub fn then(mut self, step: Step<T, E>) -> Self {
        self.steps.push(step);
        self
    }

    /// Appends an attempt that fails with `error`.
    pub fn fail(self, error: E) -> Self {
        self.then(Step::fail(error))
    }

    /// Appends `times` attempts that fail with `error`.
    pub fn fail_times(mut self, times: usize, error: E) -> Self
    where
        E: Clone,
    {
        self.steps
            .extend(std::iter::repeat_n(error, times).map(Step::fail));
        self
    }

    /// Appends an attempt that succeeds with `value`.
    pub fn succeed(self, value: T) -> Self {
        self.then(Step::succeed(value))
    }

    /// Appends an attempt that never completes.
    pub fn hang(self) -> Self {
        self.then(Step::hang())
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[Step<T, E>] {
        &self.steps
    }

    /// The number of steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the script has no step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Binds the script to `clock`: steps take time on it, and attempts are timed by it.
    pub fn on(self, clock: &MockClock) -> Scripted<T, E> {
        let total = self.steps.len();
        Scripted {
            clock: clock.clone(),
            state: Arc::new(Mutex::new(ScriptState {
                steps: self.steps.into_iter().collect(),
                total,
                attempts: Vec::new(),
            })),
        }
    }
}

/// How a recorded attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptEnd {
    /// Still running (or hanging).
    Running,
    /// Returned `Ok`.
    Succeeded,
    /// Returned `Err`.
    Failed,
    /// Dropped before it completed: a timeout, a deadline or cancellation cut it off.
    Dropped,
}

/// One attempt made on a [`Scripted`] operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttemptRecord {
    /// The attempt number the loop passed (1-based).
    pub number: u32,
    /// Virtual time when the attempt started.
    pub start: Duration,
    /// Virtual time when it ended, if it did.
    pub end: Option<Duration>,
    /// How it ended.
    pub outcome: AttemptEnd,
}

struct ScriptState<T, E> {
    steps: VecDeque<Step<T, E>>,
    total: usize,
    attempts: Vec<AttemptRecord>,
}

/// A [`FaultScript`] bound to a clock: hands out the operation and reports what happened.
///
/// Clones share the same script and records.
pub struct Scripted<T, E> {
    clock: MockClock,
    state: Arc<Mutex<ScriptState<T, E>>>,
}

impl<T, E> Clone for Scripted<T, E> {
    fn clone(&self) -> Self {
        Scripted {
            clock: self.clock.clone(),
            state: Arc::clone(&self.state),
        }
    }
}

impl<T, E> fmt::Debug for Scripted<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("Scripted")
            .field("steps", &state.total)
            .field("remaining", &state.steps.len())
            .field("attempts", &state.attempts)
            .finish()
    }
}

fn lock<S>(state: &Mutex<S>) -> MutexGuard<'_, S> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The steps a script did not use, reported by [`Scripted::check_consumed`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "fault script not consumed: {used} of {total} step(s) used, left unused: {unused}; \
     the loop made fewer attempts than the script expected"
)]
pub struct Unconsumed {
    /// Steps played.
    pub used: usize,
    /// Steps in the script.
    pub total: usize,
    /// The unused steps, described (`step 3: succeed after 80ms, …`).
    pub unused: String,
}

impl<T, E> Scripted<T, E> {
    /// The operation to retry: each call plays the next step.
    ///
    /// # Panics
    /// An attempt beyond the last step panics, naming the attempt and the script's length:
    /// the loop made more attempts than the test expected.
    pub fn operation(&self) -> impl FnMut(u32) -> ScriptedAttempt<T, E> + Clone + use<T, E> {
        let script = self.clone();
        move |number| script.start(number)
    }

    fn start(&self, number: u32) -> ScriptedAttempt<T, E> {
        let start = self.clock.elapsed();
        let (step, index) = {
            let mut state = lock(&self.state);
            let index = state.attempts.len();
            state.attempts.push(AttemptRecord {
                number,
                start,
                end: None,
                outcome: AttemptEnd::Running,
            });
            (state.steps.pop_front(), index)
        };
        let Some(step) = step else {
            let total = lock(&self.state).total;
            script_exhausted(index + 1, number, total);
        };
        ScriptedAttempt {
            script: self.clone(),
            index,
            sleep: (!step.takes.is_zero()).then(|| self.clock.sleep(step.takes)),
            outcome: Some(step.outcome),
        }
    }

    fn finish(&self, index: usize, outcome: AttemptEnd) {
        let now = self.clock.elapsed();
        if let Some(record) = lock(&self.state).attempts.get_mut(index) {
            record.end = Some(now);
            record.outcome = outcome;
        }
    }

    /// Every attempt made so far, in order.
    pub fn attempts(&self) -> Vec<AttemptRecord> {
        lock(&self.state).attempts.clone()
    }

    /// The number of attempts made so far.
    pub fn calls(&self) -> usize {
        lock(&self.state).attempts.len()
    }

    /// The number of steps not played yet.
    pub fn remaining(&self) -> usize {
        lock(&self.state).steps.len()
    }

    /// `Ok` when every step was played.
    ///
    /// # Errors
    /// [`Unconsumed`], listing the steps left.
    pub fn check_consumed(&self) -> Result<(), Unconsumed> {
        let state = lock(&self.state);
        if state.steps.is_empty() {
            return Ok(());
        }
        let used = state.total - state.steps.len();
        let unused = state
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| format!("step {}: {step}", used + i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        Err(Unconsumed {
            used,
            total: state.total,
            unused,
        })
    }

    /// Asserts that every step was played: the end of a test.
    ///
    /// # Panics
    /// When steps are left, with the [`Unconsumed`] message.
    #[track_caller]
    pub fn assert_consumed(&self) {
        if let Err(unconsumed) = self.check_consumed() {
            fail_assertion(&unconsumed);
        }
    }
}

#[allow(clippy::panic)] // a test assertion: failing the test is the point
#[track_caller]
fn fail_assertion(unconsumed: &Unconsumed) -> ! {
    panic!("{unconsumed}")
}

#[allow(clippy::panic)] // a test double called more often than its script allows
#[track_caller]
fn script_exhausted(call: usize, number: u32, total: usize) -> ! {
    panic!(
        "fault script exhausted: call {call} (attempt {number}) found no step left in a script of \
         {total} step(s); the loop made more attempts than the script expected"
    )
}

/// One attempt of a [`Scripted`] operation: takes its step's time on the clock, then
/// completes with its outcome.
#[must_use = "futures do nothing unless `.await`ed"]
pub struct ScriptedAttempt<T, E> {
    script: Scripted<T, E>,
    index: usize,
    sleep: Option<MockSleep>,
    outcome: Option<Outcome<T, E>>,
}

// The outcome is only ever moved out, never pinned.
impl<T, E> Unpin for ScriptedAttempt<T, E> {}

impl<T, E> fmt::Debug for ScriptedAttempt<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedAttempt")
            .field("index", &self.index)
            .field("sleep", &self.sleep)
            .finish_non_exhaustive()
    }
}

impl<T, E> Future for ScriptedAttempt<T, E> {
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let this = self.get_mut();
        if let Some(sleep) = this.sleep.as_mut() {
            if Pin::new(sleep).poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.sleep = None;
        }
        match this.outcome.take() {
            Some(Outcome::Succeed(value)) => {
                this.script.finish(this.index, AttemptEnd::Succeeded);
                Poll::Ready(Ok(value))
            }
            Some(Outcome::Fail(error)) => {
                this.script.finish(this.index, AttemptEnd::Failed);
                Poll::Ready(Err(error))
            }
            // Hanging, or polled again after completing: pending for ever.
            Some(Outcome::Hang) => {
                this.outcome = Some(Outcome::Hang);
                Poll::Pending
            }
            None => Poll::Pending,
        }
    }
}

impl<T, E> Drop for ScriptedAttempt<T, E> {
    fn drop(&mut self) {
        if self.outcome.is_some() {
            self.script.finish(self.index, AttemptEnd::Dropped);
        }
    }
}
