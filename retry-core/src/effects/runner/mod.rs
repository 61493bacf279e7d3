//! [`ToolRunner`]: runs tool calls through the ledger, once each.
//!
//! The runner has four jobs, one file each, so that each reads on its own:
//!
//! - `call` — running a call: prepare, checks, start, the tool, commit
//!   ([`call`](ToolRunner::call), [`call_with`](ToolRunner::call_with));
//! - `approval` — a person's review of a call that waits for approval
//!   ([`review`](ToolRunner::review));
//! - `reconcile` — a person's finding on a call whose outcome is unknown
//!   ([`resolve`](ToolRunner::resolve));
//! - [`recovery`] — what happens to the calls a dead runner left behind
//!   ([`recover`](ToolRunner::recover)).
//!
//! This file holds what they share: the runner and its builder, and reading the ledger back.
//! The jobs that a person drives (approval, reconciliation) hand the call to `call` to run
//! it; nothing in `call` depends on them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::erased::DynTool;
use super::key::CallKey;
use super::ledger::{Ledger, LedgerError};
use super::record::{CallRecord, CallStateKind, Transition};
use super::tool::Toolbox;
use crate::store::{Epoch, Timestamp};
use crate::time::{Clock, DefaultClock};

mod approval;
mod call;
mod error;
mod permission;
mod reconcile;
pub mod recovery;

pub use approval::Review;
pub use call::{CallLimits, CallResponse, ResultSource, ToolCall, ToolResult};
pub use error::{KeyConflict, RunnerError};
pub use permission::{AllowAll, Permission};
pub use reconcile::Resolution;

/// The `tracing` target of the effects runtime.
pub(crate) const TARGET: &str = "retry_toolkit::effects";

/// How long a runner owns a call it works on when the call has no deadline: 5 minutes.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(5 * 60);

/// Added to a call's deadline to make its lease: time to write the result after the tool
/// returns.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// Runs tool calls through a [`Ledger`], once each.
///
/// ```
/// use retry_toolkit::effects::{
///     CallKey, CallResponse, MemoryLedger, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec,
///     Toolbox, tool_fn,
/// };
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let add = tool_fn(
///     ToolSpec::new("add").with_effect(ToolEffect::Read),
///     |(a, b): (i64, i64), _: ToolContext| async move { Ok::<_, String>(a + b) },
/// );
/// let runner = ToolRunner::new(MemoryLedger::new(), Toolbox::new().with(add)?);
///
/// let call = ToolCall::new(CallKey::new("run-1", "call-1")?, "add", json!([2, 3]));
/// let CallResponse::Done(result) = runner.call(call.clone()).await? else { return Ok(()) };
/// assert_eq!(result.outcome, Ok(json!(5)));
///
/// // The same call again: answered from the ledger, the tool is not called.
/// let again = runner.call(call).await?;
/// assert_eq!(again.result().map(|r| r.source), Some(retry_toolkit::effects::ResultSource::Ledger));
/// # Ok(()) }
/// ```
pub struct ToolRunner<L, C = DefaultClock> {
    ledger: L,
    tools: Toolbox,
    clock: C,
    epoch: Epoch,
    permission: Arc<dyn Permission>,
    lease: Duration,
}

impl<L: fmt::Debug, C: fmt::Debug> fmt::Debug for ToolRunner<L, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolRunner")
            .field("ledger", &self.ledger)
            .field("tools", &self.tools)
            .field("clock", &self.clock)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<L: Ledger> ToolRunner<L> {
    /// A runner over `ledger` and `tools`, on the default clock, allowing every call, with the
    /// [`DEFAULT_LEASE`].
    pub fn new(ledger: L, tools: Toolbox) -> Self {
        ToolRunner {
            epoch: Epoch::anchor(&DefaultClock, Timestamp::system_now()),
            ledger,
            tools,
            clock: DefaultClock,
            permission: Arc::new(AllowAll),
            lease: DEFAULT_LEASE,
        }
    }
}

impl<L: Ledger, C: Clock> ToolRunner<L, C> {
    /// Runs deadlines and leases on `clock`, anchored to the system's wall-clock time now.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> ToolRunner<L, C2> {
        ToolRunner {
            epoch: Epoch::anchor(&clock, Timestamp::system_now()),
            clock,
            ledger: self.ledger,
            tools: self.tools,
            permission: self.permission,
            lease: self.lease,
        }
    }

    /// Declares that the clock's current instant is wall-clock time `now`: leases written
    /// and compared from here on count from it. For tests and simulations of a restart.
    pub fn with_epoch(mut self, now: Timestamp) -> Self {
        self.epoch = Epoch::anchor(&self.clock, now);
        self
    }

    /// Checks every call with `permission` after its input is validated.
    pub fn with_permission(mut self, permission: impl Permission + 'static) -> Self {
        self.permission = Arc::new(permission);
        self
    }

    /// How long the runner owns a call without a deadline (default [`DEFAULT_LEASE`]).
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The ledger.
    pub fn ledger(&self) -> &L {
        &self.ledger
    }

    /// The tools.
    pub fn tools(&self) -> &Toolbox {
        &self.tools
    }

    /// Wall-clock time on the runner's clock.
    pub fn now(&self) -> Timestamp {
        self.epoch.now(&self.clock)
    }

    fn tool(&self, name: &str) -> Result<&dyn DynTool, RunnerError> {
        self.tools
            .get(name)
            .ok_or_else(|| RunnerError::UnknownTool {
                name: name.to_owned(),
            })
    }

    /// The record of `key`, checked.
    async fn read(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.ledger.get(key).await?.map(read_back).transpose()
    }

    /// The record of `key`, which must be in state `expected`.
    async fn expect_state(
        &self,
        key: CallKey,
        expected: CallStateKind,
    ) -> Result<CallRecord, RunnerError> {
        let record = self
            .ledger
            .get(key.clone())
            .await?
            .map(read_back)
            .transpose()?
            .ok_or(RunnerError::UnknownCall { key })?;
        if record.state.kind() != expected {
            let (key, state) = (record.key, record.state.name());
            return Err(RunnerError::WrongState {
                key,
                state,
                expected: expected.name(),
            });
        }
        Ok(record)
    }

    /// Writes a person's answer — a review or a finding: the moved record, or `None` if someone moved
    /// the call first (a lost compare-and-swap is a race to report, not a ledger failure).
    ///
    /// Unlike [`commit`](ToolRunner::commit), a loser never writes over what the winner
    /// left: a rejection must not end a call that an approval started meanwhile.
    async fn record_answer(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Option<CallRecord>, RunnerError> {
        match self.ledger.transition(record, transition).await {
            Ok(record) => Ok(Some(record)),
            Err(LedgerError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// A record read from the ledger, refused if it breaks the invariants of [`CallRecord`]: a
/// durable ledger can hand back a corrupt or hand-edited row, and a decision taken on one
/// (re-running a call that committed, say) cannot be taken back.
pub(crate) fn read_back(record: CallRecord) -> Result<CallRecord, LedgerError> {
    record.validated().map_err(LedgerError::from)
}
