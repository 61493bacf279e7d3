//! [`ToolOutcome`]: the result of a tool call as the transcript sees it — a value, or a
//! [`ToolFailure`] the model can read.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a finished call produced: the tool's output as JSON, or why there is none.
///
/// It is what the ledger stores when the call commits and what goes into the transcript, so it
/// is plain data (serde).
pub type ToolOutcome = Result<Value, ToolFailure>;

/// Why a call produced no output. Part of the committed result: the model sees it.
///
/// ```
/// use retry_toolkit::effects::{FailureKind, ToolFailure};
///
/// let failure = ToolFailure::new(FailureKind::InvalidInput, "`amount` must be positive");
/// assert_eq!(failure.to_string(), "invalid input: `amount` must be positive");
/// assert!(!failure.retryable);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFailure {
    /// Which check or which party failed.
    pub kind: FailureKind,
    /// What went wrong, for the model and for people.
    pub message: String,
    /// The tool's own diagnosis that another try might succeed. A diagnosis, not a
    /// permission to retry: see [`decide_retry`](super::decide_retry).
    pub retryable: bool,
}

impl ToolFailure {
    /// A failure of `kind`, not diagnosed as retryable.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        ToolFailure {
            kind,
            message: message.into(),
            retryable: false,
        }
    }

    /// Marks the failure as diagnosed retryable.
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ToolFailure {}

/// The reasons a call can end without output, told apart by type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The arguments did not parse into the tool's input type, or its validation refused them.
    /// The tool did not run.
    InvalidInput,
    /// The permission check refused the call. The tool did not run.
    PermissionDenied,
    /// A person refused the approval the tool requires. The tool did not run.
    Rejected,
    /// The call's deadline passed. For a `read` tool only: a write interrupted by its deadline
    /// goes to reconciliation instead, since it may have happened.
    DeadlineExceeded,
    /// The call was cancelled. As for the deadline, only a `read` tool, or a call cancelled
    /// before its tool started, ends with this result.
    Cancelled,
    /// The tool ran, but its output did not serialize or failed output validation. Whatever it
    /// did has been done.
    InvalidOutput,
    /// The tool ran and returned an error.
    Tool,
}

impl FailureKind {
    /// A short name for messages.
    pub const fn name(self) -> &'static str {
        match self {
            FailureKind::InvalidInput => "invalid input",
            FailureKind::PermissionDenied => "permission denied",
            FailureKind::Rejected => "rejected",
            FailureKind::DeadlineExceeded => "deadline exceeded",
            FailureKind::Cancelled => "cancelled",
            FailureKind::InvalidOutput => "invalid output",
            FailureKind::Tool => "tool error",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
