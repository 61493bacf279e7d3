//! [`RemoteTool`]: a tool on a [`ToolServer`] as a tool of the effects runner, with the effect
//! the caller declares — so that it gets the ledger, the stable key, approval and recovery
//! exactly like a local tool.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use retry_toolkit::effects::{Tool, ToolContext, ToolEffect, ToolSpec};
use retry_toolkit::{Clock, DefaultClock};
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::Value;

use crate::call::Outgoing;
use crate::error::CallError;
use crate::listing::ToolHints;
use crate::server::ToolServer;

/// The `_meta` key under which every remote call carries its idempotency key unless told
/// otherwise ([`RemoteTool::key_in_meta`]).
pub const IDEMPOTENCY_META_KEY: &str = "idempotencyKey";

/// A tool on a remote server, registered in a [`Toolbox`](retry_toolkit::effects::Toolbox) like
/// any other.
///
/// Its effect is what **you** declare with [`effect`](RemoteTool::effect): a side effect
/// otherwise. The server's own claims ([`ToolHints`]) count only if you opt in with
/// [`trust_hints`](RemoteTool::trust_hints), and a declaration wins over them. So a remote
/// call is recorded in the ledger before it is sent, waits for approval if it needs one,
/// carries the stable key `"{run_id}:{call_id}"`, and is never replayed: if the connection
/// fails after the call was sent, a side effect or an idempotent write goes to reconciliation,
/// a read ends with the failure.
///
/// The key goes in the request's `_meta` as [`IDEMPOTENCY_META_KEY`] (see
/// [`key_in_meta`](RemoteTool::key_in_meta)), and into the arguments as well with
/// [`key_in_argument`](RemoteTool::key_in_argument), for servers that take it as a parameter.
/// An `idempotent-write` declaration promises no more than the server's deduplication on that
/// key.
///
/// The tool times its connection attempts on the server's clock, against the call's deadline
/// on the runner's: give both the same clock.
///
/// ```
/// use retry_toolkit::effects::{ToolEffect, Toolbox};
/// use retry_mcp::{Connector, ToolServer};
/// use tokio::process::Command;
///
/// let shop = ToolServer::builder("shop", Connector::command(Command::new("shop-server"))).build()?;
/// let tools = Toolbox::new()
///     .with(shop.tool("lookup_order")?.effect(ToolEffect::Read))?
///     .with(shop.tool("refund")?.with_approval())?; // undeclared: a side effect
/// assert_eq!(tools.spec("refund").map(|s| s.effect()), Some(ToolEffect::SideEffect));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RemoteTool<C = DefaultClock> {
    server: ToolServer<C>,
    remote: String,
    local: &'static str,
    declared: Option<ToolEffect>,
    hinted: Option<ToolEffect>,
    approval: bool,
    timeout: Option<Duration>,
    key_meta: Cow<'static, str>,
    key_argument: Option<String>,
}

impl<C> fmt::Debug for RemoteTool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteTool")
            .field("server", &self.server.name())
            .field("remote", &self.remote)
            .field("local", &self.local)
            .field("effect", &self.effect_in_use())
            .field("approval", &self.approval)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A name the runner cannot register a tool under.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` cannot name a tool in the runner: use 1 to 64 of `A-Z`, `a-z`, `0-9`, `_`, `-` (`ToolServer::tool_as` gives a remote tool another name)"
)]
pub struct ToolNameError(String);

impl<C> ToolServer<C> {
    /// The server's tool `name`, registered in the runner under the same name.
    ///
    /// # Errors
    /// [`ToolNameError`] if `name` breaks the runner's rule for tool names (1 to 64 of
    /// `A-Za-z0-9_-`); use [`tool_as`](ToolServer::tool_as) then.
    pub fn tool(&self, name: impl Into<Cow<'static, str>>) -> Result<RemoteTool<C>, ToolNameError> {
        let name = name.into();
        let remote = name.to_string();
        self.tool_as(name, remote)
    }

    /// The server's tool `remote`, registered in the runner as `local` — for a remote name the
    /// runner does not accept, or two servers with a tool of the same name.
    ///
    /// # Errors
    /// [`ToolNameError`] if `local` breaks the runner's rule for tool names.
    pub fn tool_as(
        &self,
        local: impl Into<Cow<'static, str>>,
        remote: impl Into<String>,
    ) -> Result<RemoteTool<C>, ToolNameError> {
        Ok(RemoteTool {
            server: self.clone(),
            remote: remote.into(),
            local: intern(local.into())?,
            declared: None,
            hinted: None,
            approval: false,
            timeout: None,
            key_meta: Cow::Borrowed(IDEMPOTENCY_META_KEY),
            key_argument: None,
        })
    }
}

impl<C> RemoteTool<C> {
    /// Declares the tool's effect. Wins over any hints.
    pub fn effect(mut self, effect: ToolEffect) -> Self {
        self.declared = Some(effect);
        self
    }

    /// Takes the server's word for the effect ([`ToolHints::effect`]) where you declared none.
    /// Hints that claim nothing leave the tool a side effect.
    pub fn trust_hints(mut self, hints: &ToolHints) -> Self {
        self.hinted = hints.effect();
        self
    }

    /// Requires a person's approval before every call is sent.
    pub fn with_approval(mut self) -> Self {
        self.approval = true;
        self
    }

    /// Bounds every call: past `timeout` the runner stops waiting (the server is told to
    /// cancel), and a write goes to reconciliation.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends the idempotency key in `_meta` under `key` instead of [`IDEMPOTENCY_META_KEY`].
    pub fn key_in_meta(mut self, key: impl Into<Cow<'static, str>>) -> Self {
        self.key_meta = key.into();
        self
    }

    /// Also sends the idempotency key as the argument `field` (overwriting what the model put
    /// there), for a server whose tool takes it as a parameter.
    pub fn key_in_argument(mut self, field: impl Into<String>) -> Self {
        self.key_argument = Some(field.into());
        self
    }

    /// The effect the runner treats the tool as having: declared, else trusted hints, else a
    /// side effect.
    pub fn effect_in_use(&self) -> ToolEffect {
        self.declared
            .or(self.hinted)
            .unwrap_or(ToolEffect::SideEffect)
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }

    /// The server.
    pub fn server(&self) -> &ToolServer<C> {
        &self.server
    }
}

impl<C> Tool for RemoteTool<C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    type Args = Value;
    type Output = CallToolResult;
    type Error = CallError;

    fn spec(&self) -> ToolSpec {
        let mut spec = ToolSpec::new(self.local).with_effect(self.effect_in_use());
        if self.approval {
            spec = spec.with_approval();
        }
        if let Some(timeout) = self.timeout {
            spec = spec.with_timeout(timeout);
        }
        spec
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        match args {
            Value::Object(_) | Value::Null => Ok(()),
            other => Err(format!(
                "the arguments must be a JSON object, not {}",
                kind(other)
            )),
        }
    }

    fn retryable(&self, error: &CallError) -> bool {
        error.is_retryable()
    }

    fn answer_lost(&self, error: &CallError) -> bool {
        error.answer_lost()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<CallToolResult, CallError> {
        let mut arguments = match args {
            Value::Object(arguments) => arguments,
            Value::Null => JsonObject::new(),
            other => {
                return Err(CallError::InvalidArguments {
                    tool: self.remote.clone(),
                    found: kind(&other),
                });
            }
        };
        let key = ctx.idempotency_key().to_string();
        if let Some(field) = &self.key_argument {
            arguments.insert(field.clone(), Value::String(key.clone()));
        }
        let mut meta = JsonObject::new();
        meta.insert(self.key_meta.to_string(), Value::String(key));
        self.server
            .send(Outgoing {
                tool: &self.remote,
                arguments,
                meta,
                connect_by: ctx.deadline(),
                timeout: None,
            })
            .await
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The runner keeps tool names as `&'static str`. A name given as a `String` is checked, then
/// kept for the life of the process — once per distinct name, at most 64 bytes each — so
/// registering the same remote tools again costs nothing more.
fn intern(name: Cow<'static, str>) -> Result<&'static str, ToolNameError> {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid {
        let shown: String = name.chars().take(80).collect();
        return Err(ToolNameError(shown));
    }
    match name {
        Cow::Borrowed(name) => Ok(name),
        Cow::Owned(name) => {
            static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
            let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(&known) = names.get(name.as_str()) {
                return Ok(known);
            }
            let name: &'static str = Box::leak(name.into_boxed_str());
            names.insert(name);
            Ok(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owned_name_is_kept_once() {
        let a = intern(Cow::Owned("lookup_order".to_owned())).unwrap();
        let b = intern(Cow::Owned("lookup_order".to_owned())).unwrap();
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn a_bad_name_is_refused_before_it_is_kept() {
        let long = "x".repeat(65);
        let error = intern(Cow::Owned(long)).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(&format!("`{}`", "x".repeat(65)))
        );
        assert!(intern(Cow::Borrowed("files.read")).is_err());
        assert!(intern(Cow::Borrowed("")).is_err());
        let huge = "y".repeat(10_000);
        let shown = intern(Cow::Owned(huge)).unwrap_err().to_string();
        assert!(shown.len() < 300, "the message shows a bounded prefix");
    }
}
