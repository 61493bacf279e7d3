//! What can stop a loop early, as one value: its limits (deadline, attempt timeout,
//! cancellation, with the timer that races each attempt) and its shared protection (retry
//! budget, circuit breaker).
//!
//! Both answer the same question around each attempt — may the loop go on? — and both change
//! what the loop resolves to: a loop that neither can stop returns the operation's own error,
//! one that either can returns a [`RetryError`](super::RetryError). So the loop's type names
//! them together, as [`EarlyStop`], and each builder that adds one (`deadline`, `budget`, …)
//! replaces that one parameter.

use pin_project_lite::pin_project;

use std::pin::Pin;

use super::limits::{Limits, Unlimited};
use super::protect::Unprotected;

pin_project! {
    /// What can stop a loop before its attempts run out: limits `L` ([`Unlimited`] or
    /// [`Limited`](super::Limited)) and protection `G` ([`Unprotected`] or a budget and/or a
    /// breaker). The defaults stop nothing, and cost nothing.
    #[derive(Debug, Default)]
    pub struct EarlyStop<L = Unlimited, G = Unprotected> {
        #[pin]
        pub(super) limits: L,
        pub(super) guard: G,
    }
}

impl<L, G> EarlyStop<L, G> {
    /// Limits ([`Unlimited`], or a deadline and a cancellation signal:
    /// [`Limited::new`](super::Limited::new)) and protection ([`Unprotected`], or a budget and
    /// a breaker), together.
    #[inline]
    pub const fn new(limits: L, protection: G) -> Self {
        EarlyStop {
            limits,
            guard: protection,
        }
    }
}

impl<L, G> EarlyStop<L, G> {
    /// The protection, to tell it an attempt's outcome.
    #[inline(always)]
    pub(super) fn guard(self: Pin<&mut Self>) -> &mut G {
        self.project().guard
    }

    /// The limits, pinned: their cancellation signal is polled in place.
    #[inline(always)]
    pub(super) fn limits(self: Pin<&mut Self>) -> Pin<&mut L> {
        self.project().limits
    }
}

mod sealed {
    pub trait Sealed {}
}

impl<L, G> sealed::Sealed for EarlyStop<L, G> {}

/// What can stop a loop early, as the loop reads it: implemented by [`EarlyStop`] alone
/// (sealed). The loop's type takes its limits and protection as one parameter; this trait
/// lets the loop still reach each of them.
pub trait LoopStops: sealed::Sealed {
    /// The limits: [`Unlimited`] or [`Limited`](super::Limited).
    type Limits: Limits;
    /// The protection: [`Unprotected`], or a budget and/or a breaker.
    type Guard;

    /// Both, pinned (the limits' cancellation signal is polled in place).
    fn parts(self: Pin<&mut Self>) -> Pin<&mut EarlyStop<Self::Limits, Self::Guard>>;
}

impl<L: Limits, G> LoopStops for EarlyStop<L, G> {
    type Limits = L;
    type Guard = G;

    #[inline(always)]
    fn parts(self: Pin<&mut Self>) -> Pin<&mut Self> {
        self
    }
}
