//! Tool calls with declared effects: run once, recorded before they run, never replayed
//! blindly after a crash.
//!
//! # Why
//!
//! Retrying a network read is harmless; replaying a tool that sent an e-mail or moved money
//! is not. After a timeout or a crash the caller cannot tell "did not happen" from "happened,
//! but the answer was lost", so a runtime that retries or replays tool calls on its own turns
//! every outage into duplicated effects. Local bookkeeping cannot fix that on its own: no
//! transaction spans our ledger and someone else's mail server. What it *can* do is record
//! enough, early enough, to never repeat an effect it is unsure about, and to hand those
//! cases to a person instead of guessing.
//!
//! # What is promised, and what is not
//!
//! Promised:
//! - every change to a call's record is a compare-and-swap on its [`Revision`](crate::store::Revision): two runners
//!   (or a runner and recovery) can never both move the same call, nothing is silently
//!   overwritten;
//! - a call is recorded as `started` **before** its tool runs; a result recorded as
//!   `committed` is final and is returned — not re-run — when the call is submitted again or
//!   recovered, and is appended to the transcript at most once;
//! - a [`SideEffect`](ToolEffect::SideEffect) call that started without a recorded result is
//!   never run again automatically: it goes to `needs_reconciliation` and waits for a person;
//! - a read or idempotent write is re-run after a crash only if a [`RecoveryPolicy`] asks for
//!   it, with the same idempotency key, within an attempt budget;
//! - the runner itself never retries.
//!
//! Not promised:
//! - **exactly once**. A crash after a tool acted and before its result was committed leaves
//!   the outcome unknown; that is reported, not resolved;
//! - "effectively once" for an idempotent write, unless the tool passes the
//!   [`IdempotencyKey`] on and the downstream system really deduplicates on it. The runtime
//!   derives and hands over the key; it cannot check what the tool does with it;
//! - durability beyond the [`Ledger`] you use: [`MemoryLedger`] dies with the process.
//!
//! # How
//!
//! - [`ToolEffect`]: `read`, `idempotent-write`, `side-effect` (the default).
//! - [`ToolSpec`] + [`Tool`], or [`tool_fn`]: declaring a tool. `#[tool(effect = "...")]`
//!   generates the same: a `const` [`ToolSpec`] and a [`Tool`] impl.
//! - [`CallKey`], [`IdempotencyKey`], [`ArgsHash`]: call identity and the stable key
//!   `"{run_id}:{call_id}"`.
//! - [`CallRecord`], [`CallState`], [`Transition`]: the pending-call state machine.
//! - [`Ledger`], [`MemoryLedger`]: where records live.
//! - [`ToolRunner`]: runs a call once ([`call`](ToolRunner::call)), takes approvals
//!   ([`review`](ToolRunner::review)) and reconciliations ([`resolve`](ToolRunner::resolve)),
//!   and recovers a run after a crash ([`recover`](ToolRunner::recover)).
//! - [`RetrySafe`], [`decide_retry`]: may this work run again?
//!
#![cfg_attr(
    feature = "effects",
    doc = r###"
```
use retry_toolkit::effects::{
    CallKey, MemoryLedger, RecoveryPolicy, ToolCall, ToolContext, ToolEffect, ToolRunner,
    ToolSpec, Toolbox, tool_fn,
};
use serde_json::json;

# #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
let send = tool_fn(ToolSpec::new("send_email"), |to: String, _: ToolContext| async move {
    Ok::<_, String>(format!("sent to {to}"))
});
let ledger = MemoryLedger::new();
let runner = ToolRunner::new(ledger.clone(), Toolbox::new().with(send)?);
let key = CallKey::new("run-1", "call-1")?;
runner.call(ToolCall::new(key.clone(), "send_email", json!("ana@example.com"))).await?;

// After a restart: the committed call is completed from the ledger, not sent again.
let report = runner.recover("run-1", &RecoveryPolicy::new(), |_| false).await?;
assert_eq!(report.to_append().count(), 1);
assert_eq!(report.calls[0].effect, ToolEffect::SideEffect);
# Ok(()) }
```
"###
)]

// Compiled without the `effects` feature: the effect classification, its retry-safety rules,
// and call identity (the primitives every durable store shares are in `crate::store`). A store
// in another crate needs these and nothing of the in-memory runner.
mod backend;
mod effect;
mod key;
mod safety;

// The runtime: the pending-call ledger, its records and the runner, which store JSON
// (`serde_json`) and hash it (`sha2`).
#[cfg(feature = "effects")]
mod args;
#[cfg(feature = "effects")]
mod canonical;
#[cfg(feature = "effects")]
mod erased;
#[cfg(feature = "effects")]
mod hash;
#[cfg(feature = "effects")]
mod json;
#[cfg(feature = "effects")]
mod ledger;
#[cfg(feature = "effects")]
mod memory;
#[cfg(feature = "effects")]
mod outcome;
#[cfg(feature = "effects")]
mod record;
#[cfg(feature = "effects")]
mod runner;
#[cfg(feature = "effects")]
mod tool;

pub use backend::BackendKind;
pub use effect::{ToolEffect, UnknownEffect};
pub use key::{CallKey, IdempotencyKey, KeyError};
pub use safety::{
    CommitState, NotRetrySafe, RefuseReason, RetryDecision, RetryFacts, RetrySafe, decide_retry,
};

#[cfg(feature = "effects")]
#[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
pub use recovery::{NotRerun, Recovered, RecoveryAction, RecoveryPolicy, RecoveryReport};
#[cfg(feature = "effects")]
#[cfg_attr(docsrs, doc(cfg(feature = "effects")))]
pub use {
    args::CallArgs,
    hash::{ArgsHash, BadArgsHash},
    json::MAX_JSON_DEPTH,
    ledger::{Insert, Ledger, LedgerError},
    memory::MemoryLedger,
    outcome::{FailureKind, ToolFailure, ToolOutcome},
    record::{
        CallRecord, CallState, CallStateKind, IllegalTransition, InvalidRecord, ReconcileReason,
        RecordProblem, Transition,
    },
    runner::recovery,
    runner::{
        AllowAll, CallLimits, CallResponse, DEFAULT_LEASE, KeyConflict, LEASE_MARGIN, Permission,
        Resolution, ResultSource, Review, RunnerError, ToolCall, ToolResult, ToolRunner,
    },
    tool::{FnTool, Tool, ToolContext, ToolSpec, Toolbox, ToolboxError, tool_fn},
};
