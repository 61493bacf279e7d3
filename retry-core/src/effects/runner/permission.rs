//! [`Permission`]: the check between a call's input validation and its start. Its own file
//! because it is the one extension point of a call that is not the tool itself.

use serde_json::Value;

use crate::effects::key::CallKey;
use crate::effects::tool::ToolSpec;

/// Decides whether a call may run, after its input was validated and before it starts.
///
/// Any `Fn(&CallKey, &ToolSpec, &Value) -> Result<(), String>` is one; `Err` carries the
/// reason the model reads.
pub trait Permission: Send + Sync {
    /// `Ok` to allow the call, `Err(reason)` to refuse it.
    ///
    /// Asked before the call is recorded, so also for a call id submitted again: its stored
    /// result answers then, whatever this says. Count or audit calls where they are recorded
    /// (the ledger), not here.
    fn check(&self, call: &CallKey, tool: &ToolSpec, args: &Value) -> Result<(), String>;
}

impl<F> Permission for F
where
    F: Fn(&CallKey, &ToolSpec, &Value) -> Result<(), String> + Send + Sync,
{
    fn check(&self, call: &CallKey, tool: &ToolSpec, args: &Value) -> Result<(), String> {
        self(call, tool, args)
    }
}

/// Allows every call: the runner's default permission.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl Permission for AllowAll {
    fn check(&self, _: &CallKey, _: &ToolSpec, _: &Value) -> Result<(), String> {
        Ok(())
    }
}
