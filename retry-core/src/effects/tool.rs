//! Declaring tools: the [`ToolSpec`] descriptor, the [`Tool`] trait, closures as tools
//! ([`tool_fn`]) and the [`Toolbox`] the runner looks tools up in.
//!
//! A tool is typed on the outside (its arguments and output are Rust types) and JSON on the
//! inside (the ledger stores arguments and results as JSON so they survive a restart and go
//! into a model's transcript). The runner only ever sees the JSON side.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::effect::ToolEffect;
use super::erased::DynTool;
use super::key::{CallKey, IdempotencyKey};

/// What the runner needs to know about a tool before calling it: its name, its effect, whether
/// a person must approve each call, and its time budget.
///
/// `const`, so a tool declares it once, next to its code — the form `#[tool(...)]` expands to.
/// An undeclared effect is [`ToolEffect::SideEffect`].
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::effects::{ToolEffect, ToolSpec};
///
/// const SEND_EMAIL: ToolSpec = ToolSpec::new("send_email")
///     .with_approval()
///     .with_timeout(Duration::from_secs(10));
/// assert_eq!(SEND_EMAIL.effect(), ToolEffect::SideEffect); // undeclared = side effect
///
/// const LOOKUP: ToolSpec = ToolSpec::new("lookup").with_effect(ToolEffect::Read);
/// assert!(!LOOKUP.requires_approval());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ToolSpec {
    name: &'static str,
    effect: ToolEffect,
    requires_approval: bool,
    timeout: Option<Duration>,
    retries: bool,
}

impl ToolSpec {
    /// A side-effect tool called `name`, no approval, no timeout of its own.
    ///
    /// The name is checked when the tool is registered ([`Toolbox::with`]).
    pub const fn new(name: &'static str) -> Self {
        ToolSpec {
            name,
            effect: ToolEffect::SideEffect,
            requires_approval: false,
            timeout: None,
            retries: false,
        }
    }

    /// Declares the effect.
    pub const fn with_effect(mut self, effect: ToolEffect) -> Self {
        self.effect = effect;
        self
    }

    /// Requires a person's approval before every call starts.
    pub const fn with_approval(mut self) -> Self {
        self.requires_approval = true;
        self
    }

    /// Bounds every call: past `timeout` the runner stops waiting for the tool.
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Records that the tool's function retries on its own: `#[tool]` sets this when the
    /// function is under `#[retry]`; set it by hand for a [`tool_fn`] or a [`Tool`] whose call
    /// goes through a retry loop.
    ///
    /// A retry inside one call is fine for a read or an idempotent write (every attempt carries
    /// the same key), but may repeat a side effect that already happened when only its answer
    /// was lost: [`Toolbox::register`] refuses a [`ToolEffect::SideEffect`] tool that retries.
    pub const fn with_internal_retries(mut self) -> Self {
        self.retries = true;
        self
    }

    /// The name the model calls the tool by.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The declared effect.
    pub const fn effect(&self) -> ToolEffect {
        self.effect
    }

    /// Whether each call needs a person's approval.
    pub const fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    /// The tool's own time budget per call.
    pub const fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether the tool's function retries on its own (see [`ToolSpec::with_internal_retries`]).
    pub const fn retries_internally(&self) -> bool {
        self.retries
    }
}

/// What a tool learns about the call it is running: who it is, and the idempotency key to
/// pass downstream.
#[derive(Clone, Debug)]
pub struct ToolContext {
    key: CallKey,
    effect: ToolEffect,
    attempt: u32,
    deadline: Option<Instant>,
}

impl ToolContext {
    pub(crate) fn new(
        key: CallKey,
        effect: ToolEffect,
        attempt: u32,
        deadline: Option<Instant>,
    ) -> Self {
        ToolContext {
            key,
            effect,
            attempt,
            deadline,
        }
    }

    /// The call.
    pub fn call(&self) -> &CallKey {
        &self.key
    }

    /// The stable key `"{run_id}:{call_id}"`: the same on every attempt of this
    /// call, so the downstream system can recognise a repeat. An `idempotent-write` tool must
    /// pass it on; without that, its declaration promises nothing.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        self.key.idempotency_key()
    }

    /// The effect the runner treats this call as having.
    pub fn effect(&self) -> ToolEffect {
        self.effect
    }

    /// Which start of this call this is: 1, or more when recovery re-runs a read or an
    /// idempotent write whose earlier start has no result.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the runner stops waiting, on the runner's clock, if the call has a deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

/// A tool: typed arguments in, typed output out, with a [`ToolSpec`].
///
/// This is what `#[tool(effect = "...")]` implements for an `async fn`; it can be written by
/// hand just as well:
///
/// ```
/// use retry_toolkit::effects::{Tool, ToolContext, ToolEffect, ToolSpec};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize)]
/// struct Note { title: String, body: String }
///
/// #[derive(Serialize)]
/// struct Saved { id: String }
///
/// /// Saves a note under the call's idempotency key: a repeat overwrites the same note.
/// struct SaveNote;
///
/// impl SaveNote {
///     const TOOL_SPEC: ToolSpec = ToolSpec::new("save_note").with_effect(ToolEffect::IdempotentWrite);
/// }
///
/// impl Tool for SaveNote {
///     type Args = Note;
///     type Output = Saved;
///     type Error = std::io::Error;
///
///     fn spec(&self) -> ToolSpec {
///         Self::TOOL_SPEC
///     }
///
///     fn validate(&self, note: &Note) -> Result<(), String> {
///         if note.title.is_empty() { Err("`title` must not be empty".into()) } else { Ok(()) }
///     }
///
///     async fn call(&self, note: Note, ctx: ToolContext) -> Result<Saved, std::io::Error> {
///         let id = ctx.idempotency_key().to_string(); // the upsert key downstream
///         let _ = note.body;
///         Ok(Saved { id })
///     }
/// }
/// ```
pub trait Tool: Send + Sync + 'static {
    /// The arguments, parsed from the call's JSON.
    type Args: DeserializeOwned + Send;
    /// The output, stored as JSON.
    type Output: Serialize + Send;
    /// The tool's own error; its `Display` is what the model reads.
    type Error: fmt::Display + Send;

    /// The descriptor. Should return the same value every time.
    fn spec(&self) -> ToolSpec;

    /// Input validation beyond parsing, before anything runs. `Err` ends the call with
    /// [`FailureKind::InvalidInput`](super::FailureKind::InvalidInput) and the tool is not
    /// called.
    fn validate(&self, args: &Self::Args) -> Result<(), String> {
        let _ = args;
        Ok(())
    }

    /// Output validation, after the tool ran. `Err` ends the call with
    /// [`FailureKind::InvalidOutput`](super::FailureKind::InvalidOutput); whatever the tool
    /// did stays done.
    fn validate_output(&self, output: &Self::Output) -> Result<(), String> {
        let _ = output;
        Ok(())
    }

    /// The tool's diagnosis of its own error: might another try succeed? Recorded with the
    /// failure, never acted on by the runner: a diagnosis, not a permission to retry.
    fn retryable(&self, error: &Self::Error) -> bool {
        let _ = error;
        false
    }

    /// Whether `error` means that the tool's request went out and its answer was lost — a
    /// connection that failed mid-call — so that the system it called may have acted.
    ///
    /// The runner then treats the call like one interrupted by its deadline: a
    /// [`Read`](ToolEffect::Read) ends with this error as its result, a write goes to
    /// reconciliation and is never run again on its own. `false` (the default) means the
    /// error is the call's result, as for any failure the tool reports.
    fn answer_lost(&self, error: &Self::Error) -> bool {
        let _ = error;
        false
    }

    /// Runs the tool once.
    fn call(
        &self,
        args: Self::Args,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
}

/// A closure as a [`Tool`]; see [`tool_fn`].
pub struct FnTool<F, A> {
    spec: ToolSpec,
    f: F,
    _args: PhantomData<fn(A)>,
}

impl<F, A> fmt::Debug for FnTool<F, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnTool")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// Declares a tool from a [`ToolSpec`] and an async closure — the plain-Rust spelling of
/// `#[tool]`.
///
/// ```
/// use retry_toolkit::effects::{ToolContext, ToolEffect, ToolSpec, Toolbox, tool_fn};
///
/// let lookup = tool_fn(
///     ToolSpec::new("lookup_weather").with_effect(ToolEffect::Read),
///     |city: String, _ctx: ToolContext| async move {
///         Ok::<_, std::convert::Infallible>(format!("{city}: 21 °C"))
///     },
/// );
/// let tools = Toolbox::new().with(lookup)?;
/// assert_eq!(tools.spec("lookup_weather").map(|s| s.effect()), Some(ToolEffect::Read));
/// # Ok::<(), retry_toolkit::effects::ToolboxError>(())
/// ```
pub fn tool_fn<A, F, Fut, O, E>(spec: ToolSpec, f: F) -> FnTool<F, A>
where
    F: Fn(A, ToolContext) -> Fut,
    Fut: Future<Output = Result<O, E>>,
{
    FnTool {
        spec,
        f,
        _args: PhantomData,
    }
}

impl<A, F, Fut, O, E> Tool for FnTool<F, A>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Serialize + Send,
    E: fmt::Display + Send,
{
    type Args = A;
    type Output = O;
    type Error = E;

    fn spec(&self) -> ToolSpec {
        self.spec
    }

    fn call(&self, args: A, ctx: ToolContext) -> impl Future<Output = Result<O, E>> + Send {
        (self.f)(args, ctx)
    }
}

/// A tool that cannot be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolboxError {
    /// Two tools with one name: the ledger could not tell their calls apart.
    #[error("a tool named `{0}` is already registered; tool names must be unique")]
    Duplicate(&'static str),
    /// A name outside `[A-Za-z0-9_-]{{1,64}}`, the rule model providers apply to tool names.
    #[error("`{0}` is not a valid tool name: use 1 to 64 of `A-Z`, `a-z`, `0-9`, `_`, `-`")]
    InvalidName(&'static str),
    /// A side-effect tool whose function retries on its own: a retry may repeat an effect that
    /// already happened when only its answer was lost.
    #[error(
        "the tool `{0}` is a `side-effect` tool that retries on its own, and a retry may repeat an effect that already happened when only its answer was lost. \
         Declare it `idempotent-write` and pass its `IdempotencyKey` to the system it writes to, or remove the retry and leave an unknown outcome to reconciliation"
    )]
    SideEffectRetries(&'static str),
}

/// The tools a runner can call, by name.
///
/// ```
/// use retry_toolkit::effects::{ToolContext, ToolSpec, Toolbox, ToolboxError, tool_fn};
///
/// let ping = || tool_fn(ToolSpec::new("ping"), |_: (), _: ToolContext| async {
///     Ok::<_, String>("pong")
/// });
/// let tools = Toolbox::new().with(ping())?;
/// assert_eq!(tools.with(ping()).unwrap_err(), ToolboxError::Duplicate("ping"));
/// # Ok::<(), ToolboxError>(())
/// ```
#[derive(Clone, Default)]
pub struct Toolbox {
    tools: BTreeMap<&'static str, Arc<dyn DynTool>>,
}

impl fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}

impl Toolbox {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`.
    ///
    /// # Errors
    ///
    /// [`ToolboxError`] if its name is taken or invalid, or if it is a side effect that
    /// retries on its own. The toolbox is consumed; use
    /// [`Toolbox::register`] to keep it after an error.
    pub fn with<T: Tool>(mut self, tool: T) -> Result<Self, ToolboxError> {
        self.register(tool)?;
        Ok(self)
    }

    /// Adds `tool` in place.
    ///
    /// # Errors
    ///
    /// [`ToolboxError`] if its name is taken or invalid, or if it is a side effect that
    /// retries on its own ([`ToolSpec::retries_internally`]); nothing is added then.
    pub fn register<T: Tool>(&mut self, tool: T) -> Result<(), ToolboxError> {
        let spec = Tool::spec(&tool);
        let name = spec.name();
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ToolboxError::InvalidName(name));
        }
        if spec.effect() == ToolEffect::SideEffect && spec.retries_internally() {
            return Err(ToolboxError::SideEffectRetries(name));
        }
        if self.tools.contains_key(name) {
            return Err(ToolboxError::Duplicate(name));
        }
        self.tools.insert(name, Arc::new(tool));
        Ok(())
    }

    /// The descriptor of the tool called `name`.
    pub fn spec(&self, name: &str) -> Option<ToolSpec> {
        self.tools.get(name).map(|tool| tool.spec())
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.keys().copied()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&dyn DynTool> {
        self.tools.get(name).map(|tool| &**tool)
    }
}
