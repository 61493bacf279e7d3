//! Approvals: a person's review of a call that waits in `awaiting_approval`.
//!
//! Apart from running a call, because a person drives it, at any time, perhaps several people
//! at once: one review wins the compare-and-swap and the others are told what it did. An
//! approved call then runs through the same steps as any other call.

use super::ToolRunner;
use super::call::{CallResponse, ResultSource, settled};
use super::error::RunnerError;
use crate::effects::key::CallKey;
use crate::effects::ledger::Ledger;
use crate::effects::outcome::{FailureKind, ToolFailure};
use crate::effects::record::{CallStateKind, Transition};
use crate::time::Clock;

/// A person's review of a call in `awaiting_approval`: approve it, or reject it with a
/// reason. Given to [`ToolRunner::review`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Review {
    /// Run it.
    Approve,
    /// Do not: the call ends with a [`FailureKind::Rejected`] result carrying the reason.
    Reject {
        /// What the model is told.
        reason: String,
    },
}

impl<L: Ledger, C: Clock> ToolRunner<L, C> {
    /// Applies a person's `review` to a call in `awaiting_approval`: approve runs
    /// it, reject commits a [`FailureKind::Rejected`] result.
    ///
    /// Several people (or retried requests) may review the same call at once; one review
    /// wins. The others get what the ledger holds after the winner's write, as a resubmitted
    /// [`call`](ToolRunner::call) does: the winner's result with [`ResultSource::Ledger`] if
    /// it has committed, or [`RunnerError::InProgress`] while its tool still runs.
    ///
    /// # Errors
    ///
    /// [`RunnerError::WrongState`] if the call is not awaiting approval; otherwise as
    /// [`call_with`](ToolRunner::call_with).
    pub async fn review(&self, key: CallKey, review: Review) -> Result<CallResponse, RunnerError> {
        let record = self
            .expect_state(key.clone(), CallStateKind::AwaitingApproval)
            .await?;
        match review {
            Review::Approve => {
                let tool = self.tool(&record.tool)?;
                let lease_until = self.now() + self.lease;
                let Some(record) = self
                    .record_answer(record, Transition::Approve { lease_until })
                    .await?
                else {
                    return self.reread(key).await;
                };
                self.drive_stored(record, tool).await
            }
            Review::Reject { reason } => {
                let outcome = Err(ToolFailure::new(FailureKind::Rejected, reason));
                match self
                    .record_answer(record, Transition::Commit { outcome })
                    .await?
                {
                    Some(record) => settled(record, ResultSource::ThisCall),
                    None => self.reread(key).await,
                }
            }
        }
    }
}
