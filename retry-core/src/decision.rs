//! The retry decision after a failed attempt, written once: the in-process loop, the task
//! middleware (which runs on that loop) and durable work all ask [`RetryPolicy::next`] — or,
//! inside the loop, the same rules with inputs read only when a rule needs them — so no
//! caller keeps a copy of the rules that could drift from the others.

use std::fmt;
use std::time::Duration;

use crate::policy::RetryPolicy;

/// One failed attempt, as the retry decision reads it: everything the decision depends on,
/// so that the decision itself is a pure function of the policy and this value.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::FailedAttempt;
///
/// let failure = FailedAttempt::new(1, Duration::from_millis(180))
///     .retryable(true)
///     .retry_after(Some(Duration::from_secs(2)));
/// assert_eq!(failure.attempt, 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedAttempt {
    /// The attempt that failed, 1-based.
    pub attempt: u32,
    /// The verdict of the caller's predicate (or the default classification) on the error.
    pub retryable: bool,
    /// The server's retry-after hint carried by the error, if any.
    pub retry_after: Option<Duration>,
    /// The wait the schedule drew for this retry (jittered and clamped by the schedule): the
    /// wait when there is no hint. Passed in so that the decision draws nothing itself.
    pub drawn: Duration,
}

impl FailedAttempt {
    /// Attempt `attempt` (1-based) failed with a retryable error and no hint; `drawn` is the
    /// schedule's wait for the retry that may follow.
    pub const fn new(attempt: u32, drawn: Duration) -> Self {
        FailedAttempt {
            attempt,
            retryable: true,
            retry_after: None,
            drawn,
        }
    }

    /// Sets the predicate's verdict on the error.
    pub const fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Sets the error's retry-after hint.
    pub const fn retry_after(mut self, hint: Option<Duration>) -> Self {
        self.retry_after = hint;
        self
    }
}

/// What follows a failed attempt: [`RetryPolicy::next`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Wait this long, then make the next attempt.
    Retry(Duration),
    /// Make no further attempt: the run ends with the failure, for this reason.
    GiveUp(GiveUp),
}

/// Why a failure ends the run instead of being retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GiveUp {
    /// The failed attempt was the last one the policy allows.
    AttemptsExhausted,
    /// The predicate (or the default classification) does not retry the error.
    NotRetryable,
    /// The error asks for a wait longer than the policy's ceiling on hints: a server must
    /// not be able to park the caller, so the run ends instead of waiting.
    HintAboveCeiling {
        /// The wait the error asked for.
        hint: Duration,
        /// The policy's ceiling ([`RetryPolicy::max_retry_after`]).
        ceiling: Duration,
    },
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::AttemptsExhausted => f.write_str("attempts exhausted"),
            GiveUp::NotRetryable => f.write_str("error not retryable"),
            GiveUp::HintAboveCeiling { hint, ceiling } => write!(
                f,
                "retry-after hint of {hint:?} above the ceiling of {ceiling:?}"
            ),
        }
    }
}

impl<C> RetryPolicy<C> {
    /// Decides what follows a failed attempt: give up when it was the last attempt, when
    /// the error is not retryable, or when its retry-after hint exceeds
    /// [`max_retry_after`](Self::max_retry_after); otherwise retry after the hint, or after
    /// the drawn wait when there is none. Checked in that order. Stateless: the same
    /// failure always gets the same answer.
    ///
    /// A deadline, a retry budget and a circuit breaker are the running loop's own checks,
    /// made after this decision.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::{FailedAttempt, GiveUp, Next, RetryPolicy};
    ///
    /// let policy = RetryPolicy::DEFAULT; // 3 attempts, hints up to 60 s
    /// let drawn = Duration::from_millis(150);
    /// assert_eq!(policy.next(&FailedAttempt::new(1, drawn)), Next::Retry(drawn));
    /// assert_eq!(policy.next(&FailedAttempt::new(3, drawn)), Next::GiveUp(GiveUp::AttemptsExhausted));
    /// let year = FailedAttempt::new(1, drawn).retry_after(Some(Duration::from_secs(365 * 86_400)));
    /// assert!(matches!(policy.next(&year), Next::GiveUp(GiveUp::HintAboveCeiling { .. })));
    /// ```
    pub fn next(&self, failure: &FailedAttempt) -> Next {
        decide(
            self.max_attempts(),
            self.max_retry_after(),
            failure.attempt,
            || failure.retryable,
            || failure.retry_after,
            || failure.drawn,
        )
    }
}

/// The rules of [`RetryPolicy::next`], each input read only when a rule needs it: the loop
/// passes its predicate, hint reader and schedule here, so that the predicate is not asked
/// after the last attempt and no wait is drawn for a failure that is not retried or that
/// carries a hint.
#[inline(always)]
pub(crate) fn decide(
    max_attempts: u32,
    ceiling: Duration,
    attempt: u32,
    retryable: impl FnOnce() -> bool,
    hint: impl FnOnce() -> Option<Duration>,
    drawn: impl FnOnce() -> Duration,
) -> Next {
    if attempt >= max_attempts {
        return Next::GiveUp(GiveUp::AttemptsExhausted);
    }
    if !retryable() {
        return Next::GiveUp(GiveUp::NotRetryable);
    }
    match hint() {
        Some(hint) if hint > ceiling => Next::GiveUp(GiveUp::HintAboveCeiling { hint, ceiling }),
        Some(hint) => Next::Retry(hint),
        None => Next::Retry(drawn()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryOptions;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// The whole table: each rule, and the order in which they are checked.
    #[test]
    fn the_decision_table() {
        let policy = RetryOptions::new()
            .with_max_attempts(3)
            .resolve()
            .unwrap()
            .with_max_retry_after(MS(5_000));
        let drawn = MS(120);
        let cases = [
            // (attempt, retryable, hint, expected)
            (1, true, None, Next::Retry(drawn)),
            (2, true, None, Next::Retry(drawn)),
            (3, true, None, Next::GiveUp(GiveUp::AttemptsExhausted)),
            // The last attempt ends the run whatever the error says.
            (
                3,
                false,
                Some(MS(1)),
                Next::GiveUp(GiveUp::AttemptsExhausted),
            ),
            (
                u32::MAX,
                true,
                None,
                Next::GiveUp(GiveUp::AttemptsExhausted),
            ),
            (1, false, None, Next::GiveUp(GiveUp::NotRetryable)),
            // Not retryable wins over a hint, even one above the ceiling.
            (
                1,
                false,
                Some(MS(9_000)),
                Next::GiveUp(GiveUp::NotRetryable),
            ),
            // A hint replaces the drawn wait, up to and including the ceiling.
            (1, true, Some(MS(700)), Next::Retry(MS(700))),
            (1, true, Some(Duration::ZERO), Next::Retry(Duration::ZERO)),
            (2, true, Some(MS(5_000)), Next::Retry(MS(5_000))),
            (
                1,
                true,
                Some(MS(5_001)),
                Next::GiveUp(GiveUp::HintAboveCeiling {
                    hint: MS(5_001),
                    ceiling: MS(5_000),
                }),
            ),
            (
                2,
                true,
                Some(Duration::from_secs(365 * 86_400)),
                Next::GiveUp(GiveUp::HintAboveCeiling {
                    hint: Duration::from_secs(365 * 86_400),
                    ceiling: MS(5_000),
                }),
            ),
        ];
        for (attempt, retryable, hint, expected) in cases {
            let failure = FailedAttempt::new(attempt, drawn)
                .retryable(retryable)
                .retry_after(hint);
            assert_eq!(policy.next(&failure), expected, "{failure:?}");
        }
    }

    #[test]
    fn one_attempt_never_retries() {
        let policy = RetryOptions::new().with_max_attempts(1).resolve().unwrap();
        assert_eq!(
            policy.next(&FailedAttempt::new(1, MS(1))),
            Next::GiveUp(GiveUp::AttemptsExhausted)
        );
    }

    #[test]
    fn inputs_are_read_only_when_a_rule_needs_them() {
        let untouched = || -> bool { panic!("the predicate is not asked after the last attempt") };
        let next = decide(
            2,
            MS(10),
            2,
            untouched,
            || panic!("no hint read"),
            || panic!("no wait drawn"),
        );
        assert_eq!(next, Next::GiveUp(GiveUp::AttemptsExhausted));
        let hinted = decide(
            2,
            MS(10),
            1,
            || true,
            || Some(MS(3)),
            || panic!("a hinted failure draws no wait"),
        );
        assert_eq!(hinted, Next::Retry(MS(3)));
    }

    #[test]
    fn give_up_says_why() {
        assert_eq!(GiveUp::AttemptsExhausted.to_string(), "attempts exhausted");
        assert_eq!(GiveUp::NotRetryable.to_string(), "error not retryable");
        assert_eq!(
            GiveUp::HintAboveCeiling {
                hint: Duration::from_secs(120),
                ceiling: Duration::from_secs(60)
            }
            .to_string(),
            "retry-after hint of 120s above the ceiling of 60s"
        );
    }
}
