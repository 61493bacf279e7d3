//! The loop and shared protection: a [`RetryBudget`] and a [`CircuitBreaker`] consulted around
//! each attempt, and the builder methods that add them to a [`Retry`].
//!
//! What the loop asks, and when:
//! - before each attempt, the breaker (an open circuit refuses it); before the first, the
//!   budget too, which counts it as a request;
//! - after each attempt, the breaker is told the outcome: a success, a failure (an error the
//!   caller's predicate counts, or a timed-out attempt), or nothing (an attempt dropped by
//!   cancellation or the deadline, whose probe place is given back);
//! - before a retry is scheduled, the breaker (open past the wait: refused at once, rather
//!   than waiting to be refused) and then the budget, which admits or refuses it.
//!
//! A refusal ends the loop at once. How depends on the loop: a [`Retry`] with a budget or a
//! breaker resolves to [`RetryError`](super::RetryError), whose `CircuitOpen` and
//! `BudgetExhausted` variants carry the last error; the driver behind `#[retry]` returns the
//! last error for a refused retry, and `E::from(CircuitOpen)` for a refused attempt.

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use super::limits::{IntoLimited, Limits, StopReason};
use super::stops::EarlyStop;
use super::{LimitedBy, LoopHooks, Operation, Retry};
use crate::protection::{BudgetExhausted, CircuitBreaker, CircuitOpen, RetryBudget, Ticket};
use crate::time::Clock;

/// Why shared protection stopped a loop.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    CircuitOpen(CircuitOpen),
    BudgetExhausted(BudgetExhausted),
}

/// How a refusal ends a loop.
#[doc(hidden)]
pub enum Ending<E, Token> {
    /// As a limit's outcome, with this proof that the loop's output can say so.
    Stop(Token, StopReason),
    /// With this error.
    Error(E),
    /// With the last error seen; a loop that has none goes on (it cannot say "refused").
    Last,
}

/// What a loop consults besides its own rules. [`Unprotected`] consults nothing, and every
/// call on it folds away; [`Protected`] holds a budget and/or a breaker. Its methods are the
/// loop's side of the seam, called by the loop alone.
pub trait Protection<E> {
    /// Attempt number `attempt` (1-based) is about to start.
    #[doc(hidden)]
    fn admit<C: Clock>(&mut self, attempt: u32, clock: &C) -> Result<(), Refusal>;
    /// The running attempt succeeded.
    #[doc(hidden)]
    fn succeeded<C: Clock>(&mut self, clock: &C);
    /// The running attempt failed with `error`, or timed out (`None`).
    #[doc(hidden)]
    fn failed<C: Clock>(&mut self, error: Option<&E>, clock: &C);
    /// The running attempt was dropped without an outcome.
    #[doc(hidden)]
    fn abandon(&mut self);
    /// Another attempt would follow after `delay`.
    #[doc(hidden)]
    fn retry<C: Clock>(&mut self, delay: Duration, clock: &C) -> Result<(), Refusal>;
    /// How `refusal` ends a loop whose limits hand out `token` (`None`: the loop's output is
    /// the operation's own error type): a retry refused after a failure (`after_failure`,
    /// the error in hand), or an attempt refused as it was about to start.
    #[doc(hidden)]
    fn ending<T>(&self, refusal: Refusal, token: Option<T>, after_failure: bool) -> Ending<E, T>;
}

/// No budget, no breaker.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unprotected;

impl<E> Protection<E> for Unprotected {
    #[inline(always)]
    fn admit<C: Clock>(&mut self, _: u32, _: &C) -> Result<(), Refusal> {
        Ok(())
    }

    #[inline(always)]
    fn succeeded<C: Clock>(&mut self, _: &C) {}

    #[inline(always)]
    fn failed<C: Clock>(&mut self, _: Option<&E>, _: &C) {}

    #[inline(always)]
    fn abandon(&mut self) {}

    #[inline(always)]
    fn retry<C: Clock>(&mut self, _: Duration, _: &C) -> Result<(), Refusal> {
        Ok(())
    }

    fn ending<T>(&self, _: Refusal, _: Option<T>, _: bool) -> Ending<E, T> {
        Ending::Last
    }
}

/// A handle to a shared budget or breaker: `&'static T`, `Arc<T>`, anything that derefs to it.
#[derive(Clone, Copy, Debug)]
pub struct Handle<R>(pub(crate) R);

/// No budget.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBudget;

/// No breaker.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoBreaker;

/// Where a [`Protected`] loop finds its budget (`Slot<RetryBudget>`) or its breaker
/// (`Slot<CircuitBreaker>`): nowhere ([`NoBudget`], [`NoBreaker`]), a [`Handle`], or a handle
/// chosen at run time (`Option`).
pub trait Slot<T> {
    /// The budget or breaker, if there is one.
    fn get(&self) -> Option<&T>;
}

impl Slot<RetryBudget> for NoBudget {
    #[inline(always)]
    fn get(&self) -> Option<&RetryBudget> {
        None
    }
}

impl Slot<CircuitBreaker> for NoBreaker {
    #[inline(always)]
    fn get(&self) -> Option<&CircuitBreaker> {
        None
    }
}

impl<T, R: Deref<Target = T>> Slot<T> for Handle<R> {
    #[inline(always)]
    fn get(&self) -> Option<&T> {
        Some(&self.0)
    }
}

impl<T, S: Slot<T>> Slot<T> for Option<S> {
    #[inline(always)]
    fn get(&self) -> Option<&T> {
        self.as_ref()?.get()
    }
}

/// Where a [`Protected`] loop finds its budget.
pub trait BudgetSlot: Slot<RetryBudget> {}
impl<S: Slot<RetryBudget>> BudgetSlot for S {}

/// Where a [`Protected`] loop finds its breaker.
pub trait BreakerSlot: Slot<CircuitBreaker> {}
impl<S: Slot<CircuitBreaker>> BreakerSlot for S {}

/// Which errors count against the breaker. Every `FnMut(&E) -> bool` is one; a type of the
/// caller's keeps the loop's type nameable (and, zero-sized, adds nothing to its future).
pub trait Counts<E> {
    /// Whether `error` counts as a failure of the dependency; one that does not is, for the
    /// breaker, a success (the dependency answered).
    fn counts(&mut self, error: &E) -> bool;
}

/// The default: every error counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct EveryError;

impl<E> Counts<E> for EveryError {
    #[inline(always)]
    fn counts(&mut self, _: &E) -> bool {
        true
    }
}

impl<E, F: FnMut(&E) -> bool> Counts<E> for F {
    fn counts(&mut self, error: &E) -> bool {
        self(error)
    }
}

impl<E, F: Counts<E>> Counts<E> for Option<F> {
    fn counts(&mut self, error: &E) -> bool {
        self.as_mut().is_none_or(|f| f.counts(error))
    }
}

/// How a [`Protected`] loop's refusals end it: [`Typed`] for a [`Retry`]. Its method is the
/// loop's business.
pub trait Ends<E> {
    /// How `refusal` ends a loop whose limits hand out `token`.
    #[doc(hidden)]
    fn ending<T>(&self, refusal: Refusal, token: Option<T>, after_failure: bool) -> Ending<E, T>;
}

/// A [`Retry`]'s: as [`RetryError`](super::RetryError)'s `CircuitOpen` or `BudgetExhausted`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Typed;

impl<E> Ends<E> for Typed {
    fn ending<T>(&self, refusal: Refusal, token: Option<T>, _: bool) -> Ending<E, T> {
        match token {
            Some(token) => Ending::Stop(token, StopReason::Refused(refusal)),
            None => Ending::Last,
        }
    }
}

/// The `#[retry]` driver's: a refused retry returns the last error; an attempt the breaker
/// refuses as it starts (the first, or one whose wait ended in a break that began meanwhile)
/// is the function's error `E::from(CircuitOpen)`.
#[doc(hidden)]
#[derive(Debug)]
pub struct AsError<E>(pub(crate) Option<fn(CircuitOpen) -> E>);

impl<E> Ends<E> for AsError<E> {
    fn ending<T>(&self, refusal: Refusal, _: Option<T>, after_failure: bool) -> Ending<E, T> {
        match (refusal, self.0) {
            (Refusal::CircuitOpen(open), Some(to_error)) if !after_failure => {
                Ending::Error(to_error(open))
            }
            _ => Ending::Last,
        }
    }
}

/// A budget, a breaker (each possibly absent), which errors count against the breaker, and
/// how refusals end the loop: the protection of a loop given a budget or a breaker.
///
/// `B` is where the budget is ([`NoBudget`], a [`Handle`], or an `Option` of one), `K` the
/// breaker's ([`NoBreaker`], …), `F` which errors count ([`EveryError`], a closure, a
/// [`Counts`] of the caller's), `X` how a refusal ends the loop ([`Typed`]).
pub struct Protected<B, K: BreakerSlot, F, X = Typed> {
    budget: B,
    counts: F,
    ends: X,
    armed: Armed<K>,
}

/// The breaker and the running attempt's place in it, given back if the loop is dropped
/// mid-attempt (so a cancelled probe does not hold a half-open circuit's place).
struct Armed<K: BreakerSlot> {
    breaker: K,
    ticket: Option<Ticket>,
}

impl<K: BreakerSlot> Drop for Armed<K> {
    fn drop(&mut self) {
        if let (Some(breaker), Some(ticket)) = (Slot::get(&self.breaker), self.ticket.take()) {
            breaker.release(ticket);
        }
    }
}

impl<B, K: BreakerSlot, F, X> Protected<B, K, F, X> {
    pub(crate) fn new(budget: B, breaker: K, counts: F, ends: X) -> Self {
        Protected {
            budget,
            counts,
            ends,
            armed: Armed {
                breaker,
                ticket: None,
            },
        }
    }
}

impl<R, K, F> Protected<Option<Handle<R>>, Option<Handle<K>>, F>
where
    R: Deref<Target = RetryBudget>,
    K: Deref<Target = CircuitBreaker>,
{
    /// A budget and a breaker chosen at run time, each absent or present, and which errors
    /// count against the breaker: what [`Retry::protection`] sets, built apart, for
    /// [`retry_with`](crate::RetryPolicy::retry_with).
    #[inline]
    pub fn of(budget: Option<R>, breaker: Option<K>, counts: F) -> Self {
        Protected::new(budget.map(Handle), breaker.map(Handle), counts, Typed)
    }
}

impl<B, K: BreakerSlot, F, X> Protected<B, K, F, X> {
    /// Replaces which errors count against the breaker; nothing is running yet.
    pub(crate) fn count_with(&mut self, counts: F) {
        self.counts = counts;
    }
}

impl<B, K: BreakerSlot, F, X> std::fmt::Debug for Protected<B, K, F, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protected")
            .field(
                "breaker",
                &Slot::get(&self.armed.breaker).map(CircuitBreaker::name),
            )
            .finish_non_exhaustive()
    }
}

impl<E, B, K, F, X> Protection<E> for Protected<B, K, F, X>
where
    B: BudgetSlot,
    K: BreakerSlot,
    F: Counts<E>,
    X: Ends<E>,
{
    #[inline]
    fn admit<C: Clock>(&mut self, attempt: u32, clock: &C) -> Result<(), Refusal> {
        let armed = &mut self.armed;
        if let Some(breaker) = Slot::get(&armed.breaker) {
            if let Some(old) = armed.ticket.take() {
                breaker.release(old);
            }
            let ticket = breaker
                .admit(|| clock.now())
                .map_err(Refusal::CircuitOpen)?;
            armed.ticket = Some(ticket);
        }
        if attempt == 1 {
            if let Some(budget) = Slot::get(&self.budget) {
                budget.deposit(clock.now());
            }
        }
        Ok(())
    }

    #[inline]
    fn succeeded<C: Clock>(&mut self, clock: &C) {
        let armed = &mut self.armed;
        if let (Some(breaker), Some(ticket)) = (Slot::get(&armed.breaker), armed.ticket.take()) {
            breaker.succeeded(ticket, || clock.now());
        }
    }

    fn failed<C: Clock>(&mut self, error: Option<&E>, clock: &C) {
        let armed = &mut self.armed;
        let (Some(breaker), Some(ticket)) = (Slot::get(&armed.breaker), armed.ticket.take()) else {
            return;
        };
        // A timed-out attempt counts: a dependency that hangs is failing.
        if error.is_none_or(|e| self.counts.counts(e)) {
            breaker.failed(ticket, clock.now());
        } else {
            // The dependency answered; the error is the caller's business.
            breaker.succeeded(ticket, || clock.now());
        }
    }

    fn abandon(&mut self) {
        let armed = &mut self.armed;
        if let (Some(breaker), Some(ticket)) = (Slot::get(&armed.breaker), armed.ticket.take()) {
            breaker.release(ticket);
        }
    }

    fn retry<C: Clock>(&mut self, delay: Duration, clock: &C) -> Result<(), Refusal> {
        let (budget, breaker) = (Slot::get(&self.budget), Slot::get(&self.armed.breaker));
        if budget.is_none() && breaker.is_none() {
            return Ok(());
        }
        let now = clock.now();
        if let Some(breaker) = breaker {
            let at = now.checked_add(delay).unwrap_or(now);
            if let Some(open) = breaker.refuses_until(now, at) {
                return Err(Refusal::CircuitOpen(open));
            }
        }
        if let Some(budget) = budget {
            budget.try_withdraw(now).map_err(Refusal::BudgetExhausted)?;
        }
        Ok(())
    }

    fn ending<T>(&self, refusal: Refusal, token: Option<T>, after_failure: bool) -> Ending<E, T> {
        self.ends.ending(refusal, token, after_failure)
    }
}

/// Turns any protection into [`Protected`], keeping what was already set: what lets
/// [`Retry::budget`] and [`Retry::breaker`] add to either.
pub trait IntoProtected {
    /// Where the budget is.
    type Budget: BudgetSlot;
    /// Where the breaker is.
    type Breaker: BreakerSlot;
    /// Which errors count against the breaker.
    type Counts;
    /// The same protection as a [`Protected`].
    fn into_protected(self) -> Protected<Self::Budget, Self::Breaker, Self::Counts>;
}

impl IntoProtected for Unprotected {
    type Budget = NoBudget;
    type Breaker = NoBreaker;
    type Counts = EveryError;

    fn into_protected(self) -> Protected<NoBudget, NoBreaker, EveryError> {
        Protected::new(NoBudget, NoBreaker, EveryError, Typed)
    }
}

impl<B: BudgetSlot, K: BreakerSlot, F> IntoProtected for Protected<B, K, F> {
    type Budget = B;
    type Breaker = K;
    type Counts = F;

    fn into_protected(self) -> Protected<B, K, F> {
        self
    }
}

/// A protection of type `P` with its budget replaced by `R`'s.
type WithBudget<P, R> =
    Protected<Handle<R>, <P as IntoProtected>::Breaker, <P as IntoProtected>::Counts>;
/// A protection of type `P` with its breaker replaced by `R`'s.
type WithBreaker<P, R> =
    Protected<<P as IntoProtected>::Budget, Handle<R>, <P as IntoProtected>::Counts>;
/// A protection of type `P` counting the errors `F` counts.
type WithCounts<P, F> = Protected<<P as IntoProtected>::Budget, <P as IntoProtected>::Breaker, F>;
/// A budget and a breaker chosen at run time, each absent or a handle, and which errors count
/// against the breaker: what [`Protected::of`] builds and [`Retry::protection`] sets.
pub type Chosen<R, K, F> = Protected<Option<Handle<R>>, Option<Handle<K>>, F>;

/// What stops a loop under limits `L` and protection `G` once budget `R` is added.
type Budgeted<L, G, R> = EarlyStop<LimitedBy<L>, WithBudget<G, R>>;
/// What stops a loop under limits `L` and protection `G` once breaker `R` is added.
type Broken<L, G, R> = EarlyStop<LimitedBy<L>, WithBreaker<G, R>>;
/// What stops a loop under limits `L` and protection `G` once its breaker counts `F`'s errors.
type Counting<L, G, F> = EarlyStop<L, WithCounts<G, F>>;
/// What stops a loop under limits `L` once its protection is chosen at run time.
type ChosenStops<L, R, K, F> = EarlyStop<LimitedBy<L>, Chosen<R, K, F>>;

// The return types name what each builder changes: the protection, and the limits with it.
impl<Op, Fut, T, E, C, K, L, G> Retry<Op, Fut, E, C, K, EarlyStop<L, G>>
where
    Op: Operation<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    K: LoopHooks<E>,
    L: Limits,
    G: IntoProtected,
{
    /// Spends retries from a [`RetryBudget`] shared with other calls: the first attempt
    /// counts as a request, and each retry must be admitted by the budget. A refused retry
    /// ends the loop at once with [`RetryError::BudgetExhausted`](super::RetryError), which
    /// carries the last error. The output becomes `Result<T, RetryError<E>>`.
    ///
    /// `budget` is anything that derefs to the budget: `&BUDGET` for a `static`, an
    /// `Arc<RetryBudget>`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use retry_toolkit::{RetryBudget, RetryError, RetryPolicy};
    ///
    /// static BUDGET: RetryBudget = RetryBudget::with_config(
    ///     match RetryBudget::builder().ratio(0.0).min_per_sec(0).validate() {
    ///         Ok(config) => config,
    ///         Err(e) => panic!("{}", e.message()),
    ///     },
    /// );
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let result = RetryPolicy::DEFAULT
    ///     .retry(|_| async { Err::<(), _>("503") })
    ///     .budget(&BUDGET)
    ///     .await;
    /// // A budget without ratio or floor admits no retry: one attempt, the last error.
    /// let Err(RetryError::BudgetExhausted { attempts: 1, last: Some("503"), .. }) = result else {
    ///     panic!("{result:?}");
    /// };
    /// # }
    /// ```
    pub fn budget<R: Deref<Target = RetryBudget>>(
        self,
        budget: R,
    ) -> Retry<Op, Fut, E, C, K, Budgeted<L, G, R>>
    where
        L: IntoLimited,
    {
        self.protected(
            |l| l.into_limited(),
            |g| {
                let p = g.into_protected();
                Protected {
                    budget: Handle(budget),
                    counts: p.counts,
                    ends: Typed,
                    armed: p.armed,
                }
            },
        )
    }

    /// Sends every attempt through a [`CircuitBreaker`] shared with other calls: an open
    /// circuit refuses the attempt, and each attempt's outcome is reported to it (which
    /// errors count: [`breaker_counts`](Retry::breaker_counts); by default all). A refusal
    /// ends the loop at once with [`RetryError::CircuitOpen`](super::RetryError), carrying
    /// the last error if an attempt had failed; so does a retry whose wait would end inside
    /// the break. The output becomes `Result<T, RetryError<E>>`.
    ///
    /// `breaker` is anything that derefs to the breaker: `&BREAKER` for a `static`, an
    /// `Arc<CircuitBreaker>`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use retry_toolkit::{CircuitBreaker, RetryError, RetryPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let breaker = Arc::new(CircuitBreaker::builder().consecutive_failures(2).build()?);
    /// let call = || RetryPolicy::DEFAULT.retry(|_| async { Err::<(), _>("503") }).breaker(Arc::clone(&breaker));
    ///
    /// // Two failures open the circuit: the second retry is refused, not sent.
    /// let Err(RetryError::CircuitOpen { attempts: 2, last: Some("503"), .. }) = call().await else { panic!() };
    /// // The next call is refused before its first attempt.
    /// let Err(RetryError::CircuitOpen { attempts: 0, last: None, .. }) = call().await else { panic!() };
    /// # Ok(()) }
    /// ```
    pub fn breaker<R: Deref<Target = CircuitBreaker>>(
        self,
        breaker: R,
    ) -> Retry<Op, Fut, E, C, K, Broken<L, G, R>>
    where
        L: IntoLimited,
    {
        self.protected(
            |l| l.into_limited(),
            |g| {
                let p = g.into_protected();
                // The old slot holds no attempt yet: dropping it gives nothing back.
                Protected::new(p.budget, Handle(breaker), p.counts, Typed)
            },
        )
    }

    /// Counts only the errors for which `counts(&error)` is true as failures of the
    /// [`breaker`](Retry::breaker); any other error is a success for it (the dependency
    /// answered: a 404, a validation error). A timed-out attempt always counts.
    pub fn breaker_counts<F: FnMut(&E) -> bool>(
        self,
        counts: F,
    ) -> Retry<Op, Fut, E, C, K, Counting<L, G, F>> {
        self.protected(
            |l| l,
            |g| {
                let p = g.into_protected();
                Protected {
                    budget: p.budget,
                    counts,
                    ends: Typed,
                    armed: p.armed,
                }
            },
        )
    }
}

impl<Op, Fut, T, E, C, K, L, G> Retry<Op, Fut, E, C, K, EarlyStop<L, G>>
where
    Op: Operation<Attempt = Fut>,
    Fut: Future<Output = Result<T, E>>,
    C: Clock,
    K: LoopHooks<E>,
    L: Limits,
{
    /// [`budget`](Retry::budget), [`breaker`](Retry::breaker) and
    /// [`breaker_counts`](Retry::breaker_counts) at once, for a loop whose protection is
    /// chosen at run time (each part absent or present): what a policy built from a
    /// configuration (retry-http's) runs. `counts` may be a closure, or a type of the
    /// caller's that implements [`Counts`] (zero-sized: nothing added to the loop's future).
    /// Replaces any protection set before.
    pub fn protection<R, X, F>(
        self,
        budget: Option<R>,
        breaker: Option<X>,
        counts: F,
    ) -> Retry<Op, Fut, E, C, K, ChosenStops<L, R, X, F>>
    where
        L: IntoLimited,
        R: Deref<Target = RetryBudget>,
        X: Deref<Target = CircuitBreaker>,
        F: Counts<E>,
    {
        self.protected(
            |l| l.into_limited(),
            // The old protection holds no attempt yet: dropping it gives nothing back.
            |_| Protected::new(budget.map(Handle), breaker.map(Handle), counts, Typed),
        )
    }
}
