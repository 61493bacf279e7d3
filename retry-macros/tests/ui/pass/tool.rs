//! Tool declarations that compile (SPEC X3, X4): each effect, every option, the parameters a
//! tool may take, `#[retry]` around reads and idempotent writes in either order, docs, `cfg`,
//! visibility, a renamed runtime, and the function still callable as written.
#![deny(warnings, missing_docs)]

extern crate retry_toolkit as resilience;

use std::borrow::Cow;
use std::io;

use retry_toolkit::effects::{IdempotencyKey, ToolContext, ToolEffect, Toolbox};
use retry_toolkit::{retry, tool};

/// Tools with every kind of parameter.
pub mod tools {
    use super::*;

    /// A read: borrowed, optional and raw-named arguments.
    #[tool(effect = "read")]
    pub async fn search(
        query: &str,
        r#type: Option<String>,
        limit: u32,
    ) -> Result<Vec<String>, String> {
        Ok(vec![format!("{query}:{type:?}:{limit}")])
    }

    /// An idempotent write: the key by value, the context by reference, a lifetime.
    #[tool(effect = "idempotent-write", name = "save-note", timeout_ms = 5_000)]
    pub async fn save_note<'a>(
        title: Cow<'a, str>,
        mut body: String,
        key: IdempotencyKey,
        ctx: &ToolContext,
    ) -> io::Result<String> {
        body.push_str(ctx.call().call_id());
        Ok(format!("{title}{body}{key}"))
    }

    /// A side effect, declared, with approval; the key by reference, the context twice.
    #[tool(effect = "side-effect", requires_approval = true)]
    pub(crate) async fn send_email(
        to: String,
        key: &IdempotencyKey,
        ctx: ToolContext,
        again: ToolContext,
    ) -> Result<(), String> {
        let _ = (to, key, ctx.attempt(), again.deadline());
        Ok(())
    }

    /// Undeclared: a side effect. No arguments at all; a `const` timeout.
    #[tool(timeout_ms = TIMEOUT_MS)]
    pub async fn ring_bell() -> Result<(), std::fmt::Error> {
        Ok(())
    }

    /// The bell's time budget.
    pub const TIMEOUT_MS: u64 = 250;

    /// A mutable borrow and a slice, read owned.
    #[tool(effect = "read")]
    pub async fn checksum(bytes: &[u8], scratch: &mut Vec<u8>) -> Result<u32, String> {
        scratch.extend_from_slice(bytes);
        Ok(scratch.iter().map(|b| u32::from(*b)).sum())
    }
}

/// `#[retry]` around a read and an idempotent write, in both orders and by path.
pub mod retried {
    use super::*;

    /// Retry outside.
    #[retry(max_attempts = 3)]
    #[tool(effect = "read")]
    pub async fn lookup(city: String) -> Result<String, String> {
        Ok(city)
    }

    /// Retry inside, both by path.
    #[retry_toolkit::tool(effect = "idempotent-write")]
    #[retry_toolkit::retry(max_attempts = 3)]
    pub async fn upsert(row: u64, key: IdempotencyKey) -> Result<String, String> {
        Ok(format!("{row}@{key}"))
    }
}

/// A renamed runtime, `cfg` on the function, a deprecated function.
pub mod renamed {
    /// Compiled out together with its tool.
    #[cfg(any())]
    #[resilience::tool(crate = "resilience", effect = "read")]
    pub async fn gone(missing: NoSuchType) -> Result<(), String> {
        Ok(())
    }

    /// Kept.
    #[cfg(all())]
    #[deprecated = "use something else"]
    #[resilience::tool(crate = "resilience", effect = "read")]
    pub async fn kept() -> Result<u8, String> {
        Ok(1)
    }
}

fn main() {
    let tools = Toolbox::new()
        .with(tools::search {})
        .and_then(|t| t.with(tools::save_note {}))
        .and_then(|t| t.with(tools::send_email {}))
        .and_then(|t| t.with(tools::ring_bell {}))
        .and_then(|t| t.with(tools::checksum {}))
        .and_then(|t| t.with(retried::lookup {}))
        .and_then(|t| t.with(retried::upsert {}))
        .and_then(|t| t.with(renamed::kept {}));
    let tools = tools.unwrap_or_default();
    assert_eq!(tools.names().count(), 8);
    assert_eq!(tools::save_note::TOOL_SPEC.name(), "save-note");
    assert_eq!(tools::ring_bell::TOOL_SPEC.effect(), ToolEffect::SideEffect);
    assert!(tools::send_email::TOOL_SPEC.requires_approval());
    // The functions are still plain functions.
    drop(tools::search("rust", None, 3));
    drop(retried::upsert(
        1,
        IdempotencyKey::new("k").unwrap_or_else(|_| unreachable!()),
    ));
}
