//! What subscribers are told about each task: plain data, so it can be logged, sent or stored.

use std::fmt;

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};

use crate::error::{TaskFailure, classify};

/// A task's number in its scheduler, in submission order from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task #{}", self.0)
    }
}

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum TaskState {
    /// Waiting for a concurrency slot.
    Pending,
    /// Running.
    Running,
    /// Finished with a value.
    Success,
    /// Failed: it ran and failed, or it was refused or drained without running.
    Error,
}

impl TaskState {
    /// Whether the task has finished, one way or the other.
    pub const fn is_done(self) -> bool {
        matches!(self, Self::Success | Self::Error)
    }
}

/// How a task ended, as its done event reports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "state", rename_all = "lowercase"))]
pub enum TaskOutcome {
    /// It returned a value.
    Success,
    /// It failed.
    Error {
        /// The failure's message.
        error: String,
        /// The default classification of the failure ([`classify`]).
        retryable: bool,
    },
}

impl TaskOutcome {
    pub(crate) fn of(result: Result<(), &TaskFailure>) -> Self {
        match result {
            Ok(()) => Self::Success,
            Err(failure) => Self::Error {
                error: failure.to_string(),
                retryable: classify(failure),
            },
        }
    }

    /// The state this outcome leaves the task in.
    pub const fn state(&self) -> TaskState {
        match self {
            Self::Success => TaskState::Success,
            Self::Error { .. } => TaskState::Error,
        }
    }
}

/// A step in a task's life, in this order: registered, started (unless it never ran), done.
///
/// Retries inside a task are not events: the scheduler sees one run, however often the
/// task's [`with_retry`](crate::middleware::with_retry()) layer tried. Record them with
/// [`RetryTask::notify`](crate::middleware::RetryTask::notify).
///
/// ```
/// use retry_toolkit::{TaskEvent, TaskId, TaskOutcome};
///
/// let done = TaskEvent::Done { id: TaskId(2), outcome: TaskOutcome::Error { error: "boom".into(), retryable: true } };
/// assert_eq!(
///     serde_json::to_string(&done)?,
///     r#"{"event":"done","id":2,"outcome":{"state":"error","error":"boom","retryable":true}}"#
/// );
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "event", rename_all = "lowercase"))]
pub enum TaskEvent {
    /// The scheduler accepted the task for consideration (every submission, even one it
    /// then refuses).
    Registered {
        /// The task.
        id: TaskId,
    },
    /// The task got a concurrency slot and started.
    Started {
        /// The task.
        id: TaskId,
    },
    /// The task finished; this is its last event.
    Done {
        /// The task.
        id: TaskId,
        /// How it ended.
        outcome: TaskOutcome,
    },
}

impl TaskEvent {
    /// The task the event is about.
    pub const fn id(&self) -> TaskId {
        match self {
            Self::Registered { id } | Self::Started { id } | Self::Done { id, .. } => *id,
        }
    }
}
