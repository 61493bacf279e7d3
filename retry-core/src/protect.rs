//! The seam between the retry loop and shared protection, for adapters that build a loop in
//! one step and name its type.
//!
//! A loop given a budget or a breaker with the builder methods
//! ([`Retry::budget`](crate::Retry::budget), [`Retry::breaker`](crate::Retry::breaker),
//! [`Retry::protection`](crate::Retry::protection)) never names these types. An adapter that
//! builds its loop with [`RetryPolicy::retry_with`](crate::RetryPolicy::retry_with) — to
//! avoid moving a large operation through each builder call — and names the loop's type (as
//! the associated `Future` of a tower `Service`) needs them: the protection inside an
//! [`EarlyStop`](crate::EarlyStop) is [`Unprotected`](crate::Unprotected) or a [`Protected`].
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use retry_toolkit::protect::{EveryError, Protected};
//! use retry_toolkit::{CircuitBreaker, EarlyStop, FromPolicy, Hooks, Limited, NoHint, RetryBudget, RetryError, RetryPolicy, Silent};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let budget = Arc::new(RetryBudget::new());
//! // Chosen at run time: a budget, no breaker, every error counting against a breaker.
//! let guard = Protected::of(Some(budget), None::<Arc<CircuitBreaker>>, EveryError);
//! let stops = EarlyStop::new(Limited::new(None, None::<std::future::Pending<()>>), guard);
//! let hooks = Hooks::new(FromPolicy, |_: &&str, _| true, Silent, NoHint);
//! let result: Result<u32, RetryError<&str>> = RetryPolicy::DEFAULT
//!     .retry_with(|attempt| async move { if attempt < 2 { Err("503") } else { Ok(attempt) } }, hooks, stops)
//!     .await;
//! assert_eq!(result, Ok(2));
//! # }
//! ```

pub use crate::retry::{
    BreakerSlot, BudgetSlot, Chosen, Counts, Ends, EveryError, Handle, IntoProtected, NoBreaker,
    NoBudget, Protected, Protection, Slot, Typed,
};
