//! Tools on remote servers over the Model Context Protocol: connections that retry under the
//! server's own options, calls that are never replayed, and remote tools in the effects runner.
//!
//! # Why
//!
//! An agent's tools often live in other processes — an MCP server started as a child process,
//! or one across a socket. Two things go wrong there that do not go wrong in-process:
//!
//! - **The server is not there yet, or not any more.** It is still starting, it restarted, it
//!   was woken from hibernation. Connecting deserves a few patient attempts, with options that
//!   belong to that server and are stored with its registration.
//! - **The connection fails in the middle of a call.** The request went out; the answer did
//!   not come back. The server may have done the work — sent the mail, issued the refund — so
//!   sending the call again on a fresh connection could do it twice. A client that reconnects
//!   *and replays* turns every broken pipe into a duplicated effect.
//!
//! So a [`ToolServer`] retries **connecting** and never retries **a call**: a call in flight
//! when the connection fails ends with an error that says its outcome is unknown
//! ([`CallError::answer_lost`]), the connection is dropped, and the next call connects again —
//! a new decision, with a fresh set of attempts.
//!
//! And because a remote tool is still a tool, [`RemoteTool`] puts it in the effects runner of
//! `retry_toolkit::effects` with an effect **you** declare (a side effect unless you say
//! otherwise; the server's own hints only if you opt in). A remote call is then recorded in the
//! ledger before it is sent, carries the stable key `"{run_id}:{call_id}"`, waits for approval
//! if it needs one, and after a lost answer goes to reconciliation — exactly like a local tool
//! whose process died mid-call.
//!
//! The crate has no features of its own; it turns on retry-toolkit's `effects`. Needs Rust 1.88
//! or newer (rmcp's minimum).
//!
//! # What is promised, and what is not
//!
//! Promised:
//! - connection attempts follow the server's [`ConnectOptions`] (3 attempts, 500 ms base, 5 s
//!   ceiling, full jitter, 10 s per attempt by default), validated when given — when the
//!   server is built and when the options are read back from storage;
//! - a call is sent at most once; a failed connection is never used again;
//! - a message the connection cannot deliver — longer than
//!   [`max_message_size`](ToolServerBuilder::max_message_size), a line that never ends, a
//!   line that is not a protocol message — closes the connection at once, and the calls
//!   waiting on it fail with that reason ([`CallError::Unreadable`]) instead of waiting for an
//!   answer that was dropped;
//! - a call that was not sent ([`CallError::Unreachable`], [`CallError::NotSent`]) says so,
//!   and is an ordinary failure in the runner — also when its deadline came before its
//!   connection, at the very instant the connection attempts ended; a call whose answer was
//!   lost is a failure for a read and goes to reconciliation for a write.
//!
//! Not promised: that a remote `idempotent-write` is deduplicated. The key is sent (in `_meta`,
//! and as an argument if you ask); whether the server honours it is up to the server.
//!
//! # How
//!
//! - [`Connector`]: how an attempt opens a byte stream — a child process over stdio
//!   ([`Connector::command`]) or any stream ([`Connector::new`], [`Stream`]).
//! - [`ToolServer`]: a server by name, its options and its connection;
//!   [`call`](ToolServer::call), [`list_tools`](ToolServer::list_tools).
//! - [`RemoteTool`]: one of its tools, with a declared effect, for a
//!   [`Toolbox`](retry_toolkit::effects::Toolbox).
//! - [`CallError`], [`ConnectError`]: what went wrong, and whether the tool may have acted.
//!
//! ```no_run
//! use retry_toolkit::effects::{CallKey, MemoryLedger, ToolCall, ToolEffect, ToolRunner, Toolbox};
//! use retry_mcp::{Connector, ToolServer};
//! use serde_json::json;
//! use tokio::process::Command;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let shop = ToolServer::builder("shop", Connector::command(Command::new("shop-server"))).build()?;
//! let tools = Toolbox::new()
//!     .with(shop.tool("lookup_order")?.effect(ToolEffect::Read))?
//!     .with(shop.tool("refund")?)?; // a side effect: never replayed
//! let runner = ToolRunner::new(MemoryLedger::new(), tools);
//!
//! let call = ToolCall::new(CallKey::new("run-1", "call-1")?, "refund", json!({ "order": 17 }));
//! match runner.call(call).await {
//!     Ok(response) => println!("{:?}", response.result()),
//!     // The connection failed after the refund was sent: a person finds out what happened.
//!     Err(error) => println!("{error}"),
//! }
//! # Ok(()) }
//! ```
//!
//! The protocol itself is [`rmcp`], the official Rust SDK, re-exported so that its types
//! match.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The `tracing` target of this crate (at the root, so that every module can name it without
/// depending on another).
const TARGET: &str = "retry_mcp";

mod call;
mod connector;
mod error;
mod frame;
mod listing;
mod options;
mod remote;
mod server;

pub use connector::{BoxFuture, Connector, Stream};
pub use error::{CallError, ConnectError, ConnectFailure, GaveUp, ListError, UnreadableMessage};
pub use listing::{ListedTool, MAX_TOOL_PAGES, ToolHints};
pub use options::{
    CONNECT_RETRY_DEFAULTS, ConnectOptions, ConnectOptionsError, ConnectPolicy,
    DEFAULT_CONNECT_TIMEOUT,
};
pub use remote::{IDEMPOTENCY_META_KEY, RemoteTool, ToolNameError};
pub use server::{
    CLOSE_GRACE, ConnectRetry, DEFAULT_MAX_MESSAGE_SIZE, ToolServer, ToolServerBuilder,
};

/// The protocol SDK this crate is built on, at the version it uses.
pub use rmcp;

/// The crate README's example, compiled with the doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
