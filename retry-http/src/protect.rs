//! Shared protection for the calls of one policy: retry-toolkit's [`RetryBudget`] and
//! [`CircuitBreaker`], handed to every call's loop, and which outcomes count against the
//! breaker.
//!
//! The loop does the work (retry-toolkit's `protect.rs`): the breaker is asked before each
//! attempt and told each outcome, the budget counts each call and admits each retry. This
//! module only holds them and says what an HTTP outcome means to the breaker.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use retry_toolkit::{CircuitBreaker, RetryBudget};

use crate::classify::Outcome;

/// A budget or a breaker as the policy holds it: whatever handle the caller gave (a
/// `&'static`, an `Arc`), behind one thin pointer each call's loop clones (thin: it lives in
/// every call's future, which is moved by value, so each byte there costs every call).
#[allow(
    clippy::redundant_allocation,
    reason = "the box makes the shared pointer thin"
)]
pub(crate) struct Held<T: 'static>(Arc<Box<dyn Deref<Target = T> + Send + Sync>>);

impl<T> Held<T> {
    fn new<R: Deref<Target = T> + Send + Sync + 'static>(handle: R) -> Self {
        Held(Arc::new(Box::new(handle)))
    }
}

impl<T> Clone for Held<T> {
    fn clone(&self) -> Self {
        Held(Arc::clone(&self.0))
    }
}

impl<T> Deref for Held<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A predicate on outcomes: which count against the breaker.
type CountsFn = Arc<dyn Fn(&Outcome<'_>) -> bool + Send + Sync>;

/// The budget and the breaker of a policy, each optional, and what counts against the
/// breaker (`None`: [`Outcome::breaker_counts_by_default`]).
#[derive(Clone, Default)]
pub(crate) struct Protection {
    pub(crate) budget: Option<Held<RetryBudget>>,
    pub(crate) breaker: Option<Held<CircuitBreaker>>,
    counts: Option<CountsFn>,
}

impl Protection {
    pub(crate) fn set_budget<R>(&mut self, budget: R)
    where
        R: Deref<Target = RetryBudget> + Send + Sync + 'static,
    {
        self.budget = Some(Held::new(budget));
    }

    pub(crate) fn set_breaker<K>(&mut self, breaker: K)
    where
        K: Deref<Target = CircuitBreaker> + Send + Sync + 'static,
    {
        self.breaker = Some(Held::new(breaker));
    }

    pub(crate) fn set_counts<F>(&mut self, counts: F)
    where
        F: Fn(&Outcome<'_>) -> bool + Send + Sync + 'static,
    {
        self.counts = Some(Arc::new(counts));
    }

    /// Whether neither a budget nor a breaker is set: the loop then runs without either.
    #[inline]
    pub(crate) fn is_none(&self) -> bool {
        self.budget.is_none() && self.breaker.is_none()
    }

    /// Whether a breaker is set: only then is an outcome weighed for it.
    #[inline]
    pub(crate) fn has_breaker(&self) -> bool {
        self.breaker.is_some()
    }

    /// Whether `outcome` is a failure for the breaker (`false` without one: nobody asks).
    pub(crate) fn counts(&self, outcome: &Outcome<'_>) -> bool {
        if !self.has_breaker() {
            return false;
        }
        match &self.counts {
            Some(counts) => counts(outcome),
            None => outcome.breaker_counts_by_default(),
        }
    }
}

impl fmt::Debug for Protection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Protection")
            .field("budget", &self.budget.as_deref())
            .field(
                "breaker",
                &self.breaker.as_deref().map(CircuitBreaker::name),
            )
            .field("custom_counts", &self.counts.is_some())
            .finish()
    }
}
