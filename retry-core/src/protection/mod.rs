//! Shared protection for a dependency: a retry budget and a circuit breaker.
//!
//! A retry loop protects one call. When the dependency behind it is down, every caller's loop
//! retries on its own, so three attempts per call send up to three times the traffic to a
//! service that is already failing, at the worst moment. Two things shared across calls
//! stop that:
//!
//! - a [`RetryBudget`] caps retries at a fraction of recent requests (plus a small floor per
//!   second), so retries can add a tenth to the load, never triple it;
//! - a [`CircuitBreaker`] stops sending calls at all once failures cross a threshold, for a
//!   break duration, then lets a few probes find out whether the dependency is back.
//!
//! Both are plain structs of atomics: `const`-constructible (a `static` works), `Send + Sync`,
//! shared by reference or through an `Arc`, and read their time from the caller (the retry
//! loop passes its own clock's, so a mock clock drives them in tests). Their success paths are
//! a few atomic operations: no lock, no allocation.
//!
//! Where each part lives: `budget.rs` (the budget and its settings), `breaker/` (the breaker:
//! `mod.rs` its settings and calls, `state.rs` the one-word state machine, `events.rs` what it
//! reports), `window.rs` (the lock-free sliding window both count in), `ticks.rs` (instants as
//! numbers an atomic can hold).

mod breaker;
mod budget;
mod ticks;
mod window;

pub(crate) use breaker::Ticket;
pub use breaker::{
    BreakerBuilder, BreakerConfig, BreakerError, ChangeReason, CircuitBreaker, CircuitOpen,
    CircuitState, Permit, StateChange,
};
pub use budget::{
    BudgetBuilder, BudgetConfig, BudgetError, BudgetExhausted, BudgetSnapshot, RetryBudget,
};
