//! Reconciliation: a person's finding on a call in `needs_reconciliation`, whose effect may or
//! may not have happened.
//!
//! Only a person (or the system the tool wrote to) can tell, so this is the one way out of
//! that state: commit what happened, or run the call again because it verifiably did not.

use super::ToolRunner;
use super::call::{CallResponse, ResultSource, settled};
use super::error::RunnerError;
use crate::effects::json::{MAX_JSON_DEPTH, dismantle, exceeds_depth};
use crate::effects::key::CallKey;
use crate::effects::ledger::Ledger;
use crate::effects::outcome::ToolOutcome;
use crate::effects::record::{CallStateKind, Transition};
use crate::time::Clock;

/// A person's finding on a call in `needs_reconciliation`.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// The effect happened (or failed) with this result: commit it.
    Happened(ToolOutcome),
    /// The effect verifiably did not happen: run the call again.
    DidNotHappen,
}

impl<L: Ledger, C: Clock> ToolRunner<L, C> {
    /// Applies a person's finding to a call in `needs_reconciliation`: commit what happened,
    /// or run it again because it verifiably did not happen.
    ///
    /// As with [`review`](ToolRunner::review), of several findings at once one wins and the
    /// others get what the ledger holds after it.
    ///
    /// # Errors
    ///
    /// [`RunnerError::WrongState`] if the call does not need reconciliation;
    /// [`RunnerError::TooDeep`] for a result nested more than [`MAX_JSON_DEPTH`] levels deep;
    /// otherwise as [`call_with`](ToolRunner::call_with).
    pub async fn resolve(
        &self,
        key: CallKey,
        resolution: Resolution,
    ) -> Result<CallResponse, RunnerError> {
        if let Resolution::Happened(Ok(value)) = &resolution {
            if exceeds_depth(value, MAX_JSON_DEPTH) {
                if let Resolution::Happened(Ok(value)) = resolution {
                    dismantle(value);
                }
                return Err(RunnerError::TooDeep {
                    key,
                    what: "result",
                    limit: MAX_JSON_DEPTH,
                });
            }
        }
        let record = self
            .expect_state(key.clone(), CallStateKind::NeedsReconciliation)
            .await?;
        match resolution {
            Resolution::Happened(outcome) => {
                match self
                    .record_answer(record, Transition::Commit { outcome })
                    .await?
                {
                    Some(record) => settled(record, ResultSource::ThisCall),
                    None => self.reread(key).await,
                }
            }
            Resolution::DidNotHappen => {
                let tool = self.tool(&record.tool)?;
                let lease_until = self.now() + self.lease;
                let Some(record) = self
                    .record_answer(record, Transition::Reopen { lease_until })
                    .await?
                else {
                    return self.reread(key).await;
                };
                self.drive_stored(record, tool).await
            }
        }
    }
}
