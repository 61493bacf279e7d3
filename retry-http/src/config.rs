//! [`HttpRetry`]: the one policy the tower layer and the reqwest middleware share, and its
//! builder.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use retry_toolkit::{
    BreakerError, BudgetError, CancelToken, CircuitBreaker, Clock, DefaultClock, OptionsError,
    RetryBudget, RetryOptions, RetryPolicy,
};

use crate::bound::{BodyClock, Bound, Span, Watch, ending_at};
use crate::classify::{Classify, DefaultClassify, Outcome};
use crate::judge::Hook;
use crate::layer::RetryLayer;
use crate::protect::Protection;

/// How HTTP calls are retried: the retry options (validated as everywhere), what is worth
/// retrying, the time limits and the clock. Build one with [`HttpRetry::builder`], then
/// wrap a client with [`layer`](HttpRetry::layer) (tower, hyper-util) or
/// `middleware` (reqwest, feature `reqwest`). Cheap to clone: clones share one policy.
///
/// Defaults: 3 attempts (2 retries), 100 ms base, 3 s ceiling, full jitter; a server's
/// `Retry-After` honoured up to 60 s; no retry budget or circuit breaker; and **no time
/// limit at all**: no attempt timeout, no deadline, no idle timeout, so a server that
/// accepts a connection and never answers holds the call forever, and so does one that
/// sends a head and stalls its body. Set them: [`bounded`](HttpRetryBuilder::bounded)
/// gives every attempt (its response body included) and every call a limit in one line.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::RetryOptions;
/// use retry_http::HttpRetry;
///
/// let retry = HttpRetry::builder()
///     .options(RetryOptions::new().with_max_attempts(4).with_base_delay_ms(200))
///     .attempt_timeout(Duration::from_secs(10))
///     .deadline(Duration::from_secs(30))
///     .build()?;
/// assert_eq!(retry.policy().max_attempts(), 4);
///
/// let bad = HttpRetry::builder().options(RetryOptions::new().with_max_attempts(0)).build();
/// assert_eq!(bad.unwrap_err().to_string(), "retry.max_attempts must be >= 1");
/// # Ok::<(), retry_http::BuildError>(())
/// ```
pub struct HttpRetry<P = DefaultClassify, C = DefaultClock> {
    pub(crate) shared: Arc<Shared<P, C>>,
}

impl<P, C> Clone for HttpRetry<P, C> {
    fn clone(&self) -> Self {
        HttpRetry {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<P, C: std::fmt::Debug> std::fmt::Debug for HttpRetry<P, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shared;
        f.debug_struct("HttpRetry")
            .field("policy", &s.policy)
            .field("attempt_timeout", &s.attempt_timeout)
            .field("deadline", &s.deadline)
            .field("idle_timeout", &s.idle_timeout)
            .field("first_event", &s.first_event)
            .field("protection", &s.protection)
            .field("notify", &s.notify.is_some())
            .finish_non_exhaustive()
    }
}

/// What every call of one policy reads.
pub(crate) struct Shared<P, C> {
    pub(crate) policy: RetryPolicy<C>,
    pub(crate) classify: P,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) first_event: bool,
    pub(crate) protection: Protection,
    pub(crate) notify: Option<Hook>,
}

impl<P, C: Clock> Shared<P, C> {
    /// When the deadline of a call that started at `start` passes, if the policy sets one
    /// (and the clock can say when). `start` is asked only when there is a deadline: most
    /// calls have none, and need not read the clock for it.
    pub(crate) fn deadline_from(&self, start: impl FnOnce() -> Instant) -> Option<Instant> {
        let deadline = self.deadline?;
        start().checked_add(deadline)
    }

    /// What bounds an attempt that started at `start`, in a call whose deadline passes at
    /// `deadline_at`; `own_deadline`: the attempt ends itself there (see [`Span`]).
    pub(crate) fn span(
        &self,
        start: Instant,
        deadline_at: Option<Instant>,
        own_deadline: bool,
    ) -> Span {
        Span {
            start,
            timeout: self.attempt_timeout,
            deadline: deadline_at.zip(self.deadline),
            own_deadline,
        }
    }
}

impl<P, C> BodyClock for Shared<P, C>
where
    P: Send + Sync,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send + 'static,
{
    fn watch(&self, at: Instant, deadline: bool) -> Watch {
        let bound = if deadline {
            Bound::Deadline(self.deadline.unwrap_or_default())
        } else {
            Bound::AttemptTimeout(self.attempt_timeout.unwrap_or_default())
        };
        ending_at(self.policy.clock(), at, bound)
    }
}

impl HttpRetry {
    /// A builder with the defaults.
    pub fn builder() -> HttpRetryBuilder {
        HttpRetryBuilder {
            options: RetryOptions::new(),
            policy: None,
            max_retry_after: None,
            classify: DefaultClassify,
            clock: DefaultClock,
            attempt_timeout: None,
            deadline: None,
            idle_timeout: None,
            cancel: None,
            first_event: true,
            protection: Protection::default(),
            notify: None,
        }
    }
}

impl Default for HttpRetry {
    fn default() -> Self {
        // The defaults are valid: `build` cannot fail on them.
        from_parts(HttpRetry::builder(), RetryPolicy::DEFAULT)
    }
}

/// The policy of a builder whose options resolved to `policy`.
fn from_parts<P, C: Clock>(b: HttpRetryBuilder<P, C>, policy: RetryPolicy) -> HttpRetry<P, C> {
    {
        let mut policy = policy.with_clock(b.clock);
        if let Some(ceiling) = b.max_retry_after {
            policy = policy.with_max_retry_after(ceiling);
        }
        HttpRetry {
            shared: Arc::new(Shared {
                policy,
                classify: b.classify,
                attempt_timeout: b.attempt_timeout,
                deadline: b.deadline,
                idle_timeout: b.idle_timeout,
                cancel: b.cancel,
                first_event: b.first_event,
                protection: b.protection,
                notify: b.notify,
            }),
        }
    }
}

impl<P, C> HttpRetry<P, C> {
    /// The retry policy: attempts, delays, the `Retry-After` ceiling, the clock.
    pub fn policy(&self) -> &RetryPolicy<C> {
        &self.shared.policy
    }

    /// The per-attempt timeout, if any.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.shared.attempt_timeout
    }

    /// The overall deadline of a call, if any.
    pub fn deadline(&self) -> Option<Duration> {
        self.shared.deadline
    }

    /// How long a response body may go without a byte, if limited.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.shared.idle_timeout
    }

    /// The shared retry budget the calls spend their retries from, if one was given.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.shared.protection.budget.as_deref()
    }

    /// The shared circuit breaker the calls go through, if one was given: its
    /// [`state`](CircuitBreaker::state), [`isolate`](CircuitBreaker::isolate) and
    /// [`reset`](CircuitBreaker::reset) are at hand here.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.shared.protection.breaker.as_deref()
    }

    /// The tower [`Layer`](tower_layer::Layer) that retries calls of the service it wraps
    /// under this policy.
    ///
    /// **Times nothing unless the policy has limits:** without an attempt timeout and a
    /// deadline ([`bounded`](HttpRetryBuilder::bounded)), a server that never answers, or
    /// stalls its body, holds the call forever.
    pub fn layer(&self) -> RetryLayer<P, C> {
        RetryLayer::new(self.clone())
    }
}

/// Builds an [`HttpRetry`]; [`build`](HttpRetryBuilder::build) checks everything at once.
#[must_use = "call `build` to get the policy"]
pub struct HttpRetryBuilder<P = DefaultClassify, C = DefaultClock> {
    options: RetryOptions,
    policy: Option<RetryPolicy>,
    max_retry_after: Option<Duration>,
    classify: P,
    clock: C,
    attempt_timeout: Option<Duration>,
    deadline: Option<Duration>,
    idle_timeout: Option<Duration>,
    cancel: Option<CancelToken>,
    first_event: bool,
    protection: Protection,
    notify: Option<Hook>,
}

impl<P, C> HttpRetryBuilder<P, C> {
    /// The longest [`max_retry_after`](Self::max_retry_after) a policy can hold:
    /// `u32::MAX` milliseconds, about 49.7 days.
    pub const MAX_RETRY_AFTER: Duration = Duration::from_millis(u32::MAX as u64);

    /// Retry options (attempts, base delay, ceiling, jitter), layered over the built-in
    /// defaults and validated by [`build`](HttpRetryBuilder::build) with the same rules
    /// and messages as everywhere.
    pub fn options(mut self, options: RetryOptions) -> Self {
        self.options = options;
        self.policy = None;
        self
    }

    /// A policy resolved already (with a seed, a `Retry-After` ceiling or a clock of its
    /// own), instead of [`options`](Self::options).
    pub fn policy<C2: Clock + Clone>(self, policy: RetryPolicy<C2>) -> HttpRetryBuilder<P, C2> {
        let clock = policy.clock().clone();
        HttpRetryBuilder {
            options: self.options,
            policy: Some(policy.with_clock(DefaultClock)),
            max_retry_after: self.max_retry_after,
            classify: self.classify,
            clock,
            attempt_timeout: self.attempt_timeout,
            deadline: self.deadline,
            idle_timeout: self.idle_timeout,
            cancel: self.cancel,
            first_event: self.first_event,
            protection: self.protection,
            notify: self.notify,
        }
    }

    /// The longest `Retry-After` a server may ask for (default 60 s): a longer hint ends
    /// the call at once with that response, instead of parking the caller. Millisecond
    /// resolution, at most [`MAX_RETRY_AFTER`](Self::MAX_RETRY_AFTER) (about 49.7 days):
    /// [`build`](Self::build) refuses a longer one rather than shorten it.
    pub fn max_retry_after(mut self, ceiling: Duration) -> Self {
        self.max_retry_after = Some(ceiling);
        self
    }

    /// Gives each attempt at most `timeout`, from sending the request to the end of its
    /// response body: the response must be established (its head; for an event stream, its
    /// first event) in that time, or the attempt is retried like a lost connection if its
    /// method allows; and a body the caller reads must end in what is left of it, or it
    /// fails with [`BodyTimedOut`](crate::BodyTimedOut) (never replayed). An event stream,
    /// once established, is not held to it: give it an
    /// [`idle_timeout`](Self::idle_timeout). Must be above zero.
    ///
    /// **Unset by default: nothing is timed.** A server that accepts and never answers then
    /// holds the call forever; [`bounded`](Self::bounded) sets this and the deadline at once.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// Gives each call at most `budget`, attempts, waits and the response body together: a
    /// wait that would end past it is not started, and a body still arriving when it passes
    /// fails with [`BodyTimedOut`](crate::BodyTimedOut) (an event stream excepted, as for
    /// the attempt timeout). Must be above zero.
    ///
    /// **Unset by default: a call may take forever.**
    pub fn deadline(mut self, budget: Duration) -> Self {
        self.deadline = Some(budget);
        self
    }

    /// Sets both limits in one line: each attempt, body included, gets at most
    /// `attempt_timeout`; the whole call at most `deadline`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_http::HttpRetry;
    ///
    /// let retry = HttpRetry::builder()
    ///     .bounded(Duration::from_secs(10), Duration::from_secs(30))
    ///     .build()?;
    /// assert_eq!(retry.deadline(), Some(Duration::from_secs(30)));
    /// # Ok::<(), retry_http::BuildError>(())
    /// ```
    pub fn bounded(self, attempt_timeout: Duration, deadline: Duration) -> Self {
        self.attempt_timeout(attempt_timeout).deadline(deadline)
    }

    /// Fails a response body when no byte arrives for `timeout`
    /// ([`BodyTimedOut`](crate::BodyTimedOut), never replayed): the limit for event
    /// streams and other long bodies, which the attempt timeout and the deadline do not
    /// cover once established. Unset by default. Must be above zero.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Cancels every call of this policy when `token` is cancelled (a shutdown). A call's
    /// own token, a [`CancelToken`] in its request's extensions, replaces this one.
    pub fn cancel_on(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Whether an event stream counts as established only at its first event (the default,
    /// `true`) or already at its head (`false`).
    pub fn first_event(mut self, wait: bool) -> Self {
        self.first_event = wait;
        self
    }

    /// Spends the retries of every call from `budget`, shared with whatever else holds it:
    /// clones of this policy, other policies, other loops. Each call counts as a request and
    /// each retry must be admitted, so an outage makes retries add a fraction to the load
    /// instead of multiplying it. A refused retry ends the call at once with its last
    /// response or error, [`StopReason::BudgetExhausted`](crate::StopReason::BudgetExhausted).
    ///
    /// `budget` is anything that derefs to one: `&BUDGET` for a `static`, an
    /// `Arc<RetryBudget>` (its settings were checked when it was built).
    pub fn budget<R>(mut self, budget: R) -> Self
    where
        R: Deref<Target = RetryBudget> + Send + Sync + 'static,
    {
        self.protection.set_budget(budget);
        self
    }

    /// Sends every attempt through `breaker`, shared with whatever else holds it (one
    /// breaker per dependency: every request to one host). An open circuit refuses a call
    /// before anything is sent ([`StopReason::CircuitOpen`](crate::StopReason::CircuitOpen),
    /// no attempt), and a retry it would refuse ends the call with its last response or
    /// error. Each attempt's outcome is reported to it; which count as failures:
    /// [`breaker_counts`](Self::breaker_counts).
    ///
    /// `breaker` is anything that derefs to one: `&BREAKER` for a `static`, an
    /// `Arc<CircuitBreaker>`. It runs on this policy's clock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use retry_toolkit::{CircuitBreaker, RetryBudget};
    /// use retry_http::HttpRetry;
    ///
    /// // One breaker and one budget per host, shared by every client that calls it.
    /// let payments = Arc::new(
    ///     CircuitBreaker::builder()
    ///         .name("payments")
    ///         .consecutive_failures(5)
    ///         .break_duration(Duration::from_secs(30))
    ///         .build()?, // a bad setting is a `BuildError` here too
    /// );
    /// let budget = Arc::new(RetryBudget::new());
    /// let retry = HttpRetry::builder()
    ///     .budget(Arc::clone(&budget))
    ///     .breaker(Arc::clone(&payments))
    ///     .build()?;
    /// assert_eq!(retry.breaker().map(CircuitBreaker::name), Some("payments"));
    /// # Ok::<(), retry_http::BuildError>(())
    /// ```
    pub fn breaker<K>(mut self, breaker: K) -> Self
    where
        K: Deref<Target = CircuitBreaker> + Send + Sync + 'static,
    {
        self.protection.set_breaker(breaker);
        self
    }

    /// Counts against the [`breaker`](Self::breaker) only the outcomes for which
    /// `counts(&outcome)` is true; any other outcome is a success for it (the server
    /// answered). The default is [`Outcome::breaker_counts_by_default`]: 408, 429, 5xx and
    /// failures before the response. It is asked of every outcome, whether or not the
    /// classification retries it.
    pub fn breaker_counts<F>(mut self, counts: F) -> Self
    where
        F: Fn(&Outcome<'_>) -> bool + Send + Sync + 'static,
    {
        self.protection.set_counts(counts);
        self
    }

    /// Calls `hook` before each wait for a retry, with what the failed attempt produced (its
    /// status and headers, or its error, or its timeout: an [`Outcome`]), the attempt's
    /// number (from 1) and the wait that follows: for metrics and logs of your own, beside
    /// the `tracing` events. Not called when no retry follows.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use retry_http::{HttpRetry, Outcome};
    ///
    /// let retries = Arc::new(AtomicU32::new(0));
    /// let counter = Arc::clone(&retries);
    /// let retry = HttpRetry::builder()
    ///     .notify(move |outcome: &Outcome<'_>, attempt, delay| {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///         eprintln!("attempt {attempt}: {:?}; retrying in {delay:?}", outcome.status());
    ///     })
    ///     .build()?;
    /// # let _ = retry;
    /// # Ok::<(), retry_http::BuildError>(())
    /// ```
    pub fn notify<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Outcome<'_>, u32, Duration) + Send + Sync + 'static,
    {
        self.notify = Some(Arc::new(hook));
        self
    }

    /// Replaces the default classification of what is worth retrying (see
    /// [`Classify`]). Method safety still applies on top of it.
    pub fn classify<P2: Classify>(self, classify: P2) -> HttpRetryBuilder<P2, C> {
        HttpRetryBuilder {
            options: self.options,
            policy: self.policy,
            max_retry_after: self.max_retry_after,
            classify,
            clock: self.clock,
            attempt_timeout: self.attempt_timeout,
            deadline: self.deadline,
            idle_timeout: self.idle_timeout,
            cancel: self.cancel,
            first_event: self.first_event,
            protection: self.protection,
            notify: self.notify,
        }
    }

    /// Runs waits, timeouts and deadlines on `clock` (the testkit's `MockClock` in tests),
    /// and measures an HTTP-date `Retry-After` from its wall time
    /// ([`Clock::wall_now`]) when the response has no valid `Date` header.
    pub fn clock<C2: Clock>(self, clock: C2) -> HttpRetryBuilder<P, C2> {
        HttpRetryBuilder {
            options: self.options,
            policy: self.policy,
            max_retry_after: self.max_retry_after,
            classify: self.classify,
            clock,
            attempt_timeout: self.attempt_timeout,
            deadline: self.deadline,
            idle_timeout: self.idle_timeout,
            cancel: self.cancel,
            first_event: self.first_event,
            protection: self.protection,
            notify: self.notify,
        }
    }

    /// The policy.
    ///
    /// # Errors
    ///
    /// [`BuildError::Options`] for options that break a rule (the message is the rule's),
    /// [`BuildError::ZeroAttemptTimeout`], [`BuildError::ZeroDeadline`],
    /// [`BuildError::ZeroIdleTimeout`], [`BuildError::RetryAfterCeilingTooLong`].
    pub fn build(self) -> Result<HttpRetry<P, C>, BuildError>
    where
        C: Clock,
    {
        let policy = match self.policy {
            Some(policy) => policy,
            None => self.options.resolve()?,
        };
        if self.attempt_timeout == Some(Duration::ZERO) {
            return Err(BuildError::ZeroAttemptTimeout);
        }
        if self.deadline == Some(Duration::ZERO) {
            return Err(BuildError::ZeroDeadline);
        }
        if self.idle_timeout == Some(Duration::ZERO) {
            return Err(BuildError::ZeroIdleTimeout);
        }
        if let Some(ceiling) = self.max_retry_after {
            if ceiling > Self::MAX_RETRY_AFTER {
                return Err(BuildError::RetryAfterCeilingTooLong(ceiling));
            }
        }
        Ok(from_parts(self, policy))
    }
}

/// Why an [`HttpRetry`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The retry options break a rule.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// An attempt timeout of zero would fail every attempt.
    #[error("http.attempt_timeout must be > 0")]
    ZeroAttemptTimeout,
    /// A deadline of zero would fail every call.
    #[error("http.deadline must be > 0")]
    ZeroDeadline,
    /// An idle timeout of zero would fail every body that is not already complete.
    #[error("http.idle_timeout must be > 0")]
    ZeroIdleTimeout,
    /// A `Retry-After` ceiling longer than a policy can hold
    /// ([`HttpRetryBuilder::MAX_RETRY_AFTER`]); it is refused rather than shortened.
    #[error(
        "http.max_retry_after must be <= 4294967295ms (about 49.7 days), got {0:?}; \
         for no ceiling in practice, use HttpRetryBuilder::MAX_RETRY_AFTER"
    )]
    RetryAfterCeilingTooLong(Duration),
    /// A retry budget's settings break a rule (from [`BudgetBuilder::build`], so that one
    /// `?` covers the policy and its budget).
    ///
    /// [`BudgetBuilder::build`]: retry_toolkit::BudgetBuilder::build
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// A circuit breaker's settings break a rule (from [`BreakerBuilder::build`]).
    ///
    /// [`BreakerBuilder::build`]: retry_toolkit::BreakerBuilder::build
    #[error(transparent)]
    Breaker(#[from] BreakerError),
}
