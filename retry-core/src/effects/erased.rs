//! A [`Tool`] seen through JSON ([`DynTool`]), so that tools of different types share a
//! [`Toolbox`](super::Toolbox).
//!
//! A call's arguments are parsed once: [`DynTool::check`] parses and validates them before
//! anything is recorded as started, and hands back the parsed call ([`Checked`]); the tool
//! itself is called only when the runner [`start`](Start::start)s it, after the start is
//! written. Parsing a second time to run the call would allocate the arguments' strings twice.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use serde::Deserialize;
use serde_json::Value;

use super::json;
use super::outcome::{FailureKind, ToolFailure, ToolOutcome};
use super::tool::{Tool, ToolContext, ToolSpec};

/// A boxed tool future, as the erased tool hands it out.
pub(crate) type BoxOutcome<'a> = Pin<Box<dyn Future<Output = Ran> + Send + 'a>>;

/// How a started tool ended, as the runner needs to know it.
pub(crate) enum Ran {
    /// The tool answered: its output, or the failure it reported.
    Finished(ToolOutcome),
    /// The tool's request went out and its answer was lost ([`Tool::answer_lost`]): whether
    /// it acted is unknown. The failure says why, for a read's result and for the log.
    AnswerLost(ToolFailure),
}

/// A call whose arguments parsed and passed the tool's validation; its tool has not been
/// called.
pub(crate) type Checked<'a> = Box<dyn Start<'a> + 'a>;

/// A [`Tool`] seen through JSON.
pub(crate) trait DynTool: Send + Sync {
    fn spec(&self) -> ToolSpec;
    /// Parses and validates the arguments without running anything.
    fn check(&self, args: &Value) -> Result<Checked<'_>, ToolFailure>;
}

/// A checked call, ready to run.
pub(crate) trait Start<'a>: Send {
    /// Calls the tool with `ctx`: only once the call is recorded as started. The same box
    /// becomes the running call's future.
    fn start(self: Box<Self>, ctx: ToolContext) -> BoxOutcome<'a>;
}

/// Parses straight from the borrowed JSON: one copy of the arguments, where cloning the JSON
/// first and parsing the clone holds two at once (an array's old and new elements).
fn parse<T: Tool>(tool: &T, args: &Value) -> Result<T::Args, ToolFailure> {
    let args = T::Args::deserialize(args)
        .map_err(|e| ToolFailure::new(FailureKind::InvalidInput, e.to_string()))?;
    tool.validate(&args)
        .map_err(|why| ToolFailure::new(FailureKind::InvalidInput, why))?;
    Ok(args)
}

/// Runs `tool` once on parsed arguments and turns its result into JSON.
async fn run<T: Tool>(tool: &T, args: T::Args, ctx: ToolContext) -> Ran {
    match tool.call(args, ctx).await {
        Ok(output) => Ran::Finished(
            tool.validate_output(&output)
                .map_err(|why| ToolFailure::new(FailureKind::InvalidOutput, why))
                .and_then(|()| json::bounded_value(output)),
        ),
        Err(error) => {
            let failure = ToolFailure::new(FailureKind::Tool, error.to_string())
                .retryable(tool.retryable(&error));
            if tool.answer_lost(&error) {
                Ran::AnswerLost(failure)
            } else {
                Ran::Finished(Err(failure))
            }
        }
    }
}

impl<T: Tool> DynTool for T {
    fn spec(&self) -> ToolSpec {
        Tool::spec(self)
    }

    fn check(&self, args: &Value) -> Result<Checked<'_>, ToolFailure> {
        let args = parse(self, args)?;
        Ok(Box::new(invocation(move |ctx| run(self, args, ctx))))
    }
}

pin_project! {
    /// The parsed arguments (inside `make`) until the call starts, then the tool's future:
    /// one allocation for both.
    struct Invocation<F, Fut> {
        make: Option<F>,
        #[pin]
        work: Option<Fut>,
    }
}

/// An invocation not started yet (a function so that `Fut` is inferred from `make`).
fn invocation<F, Fut>(make: F) -> Invocation<F, Fut>
where
    F: FnOnce(ToolContext) -> Fut,
{
    Invocation {
        make: Some(make),
        work: None,
    }
}

impl<'a, F, Fut> Start<'a> for Invocation<F, Fut>
where
    F: FnOnce(ToolContext) -> Fut + Send + 'a,
    Fut: Future<Output = Ran> + Send + 'a,
{
    fn start(mut self: Box<Self>, ctx: ToolContext) -> BoxOutcome<'a> {
        if let Some(make) = self.make.take() {
            self.work = Some(make(ctx));
        }
        Box::into_pin(self)
    }
}

impl<F, Fut: Future<Output = Ran>> Future for Invocation<F, Fut> {
    type Output = Ran;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ran> {
        match self.project().work.as_pin_mut() {
            Some(work) => work.poll(cx),
            // Unreachable: only `start` hands the future out, and it fills `work` first.
            None => Poll::Ready(Ran::Finished(Err(ToolFailure::new(
                FailureKind::Tool,
                "the tool was never started",
            )))),
        }
    }
}
