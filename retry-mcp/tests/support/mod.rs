//! A real rmcp server for the tests — a small shop — and a harness that runs it in process
//! over an in-memory pipe, with faults: refused connects, a server that never answers the
//! handshake, and a connection cut in the middle of a call.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use retry_mcp::{Connector, Stream};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the server saw, in order: the server-side count the tests assert on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A tool call arrived (and, for the writes, took effect).
    Called {
        tool: String,
        arguments: Value,
        /// The idempotency key in the request's `_meta`, if any.
        key: Option<String>,
    },
    /// The client told the server to cancel a call that was still running.
    Cancelled { tool: String },
}

/// Where the server writes what it saw, and how it tells the test that a call is hanging.
pub trait Journal: Send + Sync + 'static {
    fn record(&self, event: Event);
    /// Whether the next call of `tool` should hang until cancelled (asked once per call).
    fn hang(&self, tool: &str) -> bool;
    /// A call of `tool` is hanging now.
    fn hanging(&self, tool: &str);
}

/// The shop: `lookup_order` (read-only hint), `tag_order` (idempotent hint), `refund` and
/// `charge` (no hints), `decline` (an error result), `crash` (a protocol error).
pub struct Shop<J> {
    pub journal: Arc<J>,
    /// Hand out a next page forever.
    pub endless_pages: bool,
}

impl<J> Clone for Shop<J> {
    fn clone(&self) -> Self {
        Shop {
            journal: Arc::clone(&self.journal),
            endless_pages: self.endless_pages,
        }
    }
}

pub fn catalogue() -> Vec<Tool> {
    let schema = |props: Value| -> JsonObject {
        serde_json::from_value(json!({ "type": "object", "properties": props })).unwrap()
    };
    let order = json!({ "order": { "type": "integer" } });
    vec![
        Tool::new("lookup_order", "Looks an order up", schema(order.clone()))
            .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new("tag_order", "Tags an order", schema(order.clone()))
            .with_annotations(ToolAnnotations::new().read_only(false).idempotent(true)),
        Tool::new("refund", "Refunds an order", schema(order.clone())),
        Tool::new("charge", "Charges a card", schema(order)),
        Tool::new("decline", "Always declines", schema(json!({}))),
        Tool::new("crash", "Fails inside the server", schema(json!({}))),
    ]
}

impl<J: Journal> ServerHandler for Shop<J> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut page = ListToolsResult::with_all_items(catalogue());
        if self.endless_pages {
            let n: u64 = request
                .and_then(|r| r.cursor)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            page.next_cursor = Some((n + 1).to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let key = context
            .meta
            .0
            .0
            .get("idempotencyKey")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if !catalogue().iter().any(|t| t.name == tool) {
            return Err(ErrorData::invalid_params(
                format!("no tool named `{tool}`"),
                None,
            ));
        }
        self.journal.record(Event::Called {
            tool: tool.clone(),
            arguments: arguments.clone(),
            key,
        });
        if self.journal.hang(&tool) {
            self.journal.hanging(&tool);
            context.ct.cancelled().await;
            self.journal.record(Event::Cancelled { tool: tool.clone() });
            return Err(ErrorData::internal_error("cancelled", None));
        }
        let order = arguments.get("order").cloned().unwrap_or(Value::Null);
        let result = match tool.as_str() {
            "lookup_order" => {
                CallToolResult::structured(json!({ "order": order, "status": "shipped" }))
            }
            "tag_order" => {
                CallToolResult::success(vec![ContentBlock::text(format!("tagged order {order}"))])
            }
            "refund" => {
                CallToolResult::success(vec![ContentBlock::text(format!("refunded order {order}"))])
            }
            "charge" => {
                CallToolResult::success(vec![ContentBlock::text(format!("charged order {order}"))])
            }
            "decline" => CallToolResult::error(vec![ContentBlock::text("card declined")]),
            _ => return Err(ErrorData::internal_error("the database is down", None)),
        };
        Ok(result.into())
    }
}

/// A journal in memory, for the in-process server.
#[derive(Default)]
pub struct MemoryJournal {
    events: Mutex<Vec<Event>>,
    hang_next: Mutex<BTreeSet<String>>,
    hanging: Notify,
}

impl MemoryJournal {
    pub fn events(&self) -> Vec<Event> {
        lock(&self.events).clone()
    }

    /// How many calls of `tool` arrived.
    pub fn calls(&self, tool: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::Called { tool: t, .. } if t == tool))
            .count()
    }

    pub fn cancelled(&self, tool: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| matches!(e, Event::Cancelled { tool: t } if t == tool))
            .count()
    }

    /// The next call of `tool` hangs until cancelled (or the connection is cut).
    pub fn hang_next(&self, tool: &str) {
        lock(&self.hang_next).insert(tool.to_owned());
    }

    /// Waits until a call hangs on the server.
    pub async fn wait_hanging(&self) {
        self.hanging.notified().await;
    }
}

impl Journal for MemoryJournal {
    fn record(&self, event: Event) {
        lock(&self.events).push(event);
    }

    fn hang(&self, tool: &str) -> bool {
        lock(&self.hang_next).remove(tool)
    }

    fn hanging(&self, _tool: &str) {
        self.hanging.notify_one();
    }
}

/// How the next connects go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Refused, as by a socket nobody listens on.
    Refuse,
    /// Accepted, and never a word: the handshake hangs.
    Silent,
    /// A working server.
    Serve,
}

/// The shop served in process, one server per connection, with a relay in between that a
/// test can cut (the process or the network died).
pub struct InProcess {
    pub journal: Arc<MemoryJournal>,
    pub endless_pages: bool,
    connects: AtomicU32,
    script: Mutex<Vec<Answer>>,
    relay: Mutex<Option<AbortHandle>>,
    silent: Mutex<Vec<tokio::io::DuplexStream>>,
}

impl InProcess {
    pub fn new() -> Arc<Self> {
        Self::with_pages(false)
    }

    pub fn with_pages(endless_pages: bool) -> Arc<Self> {
        Arc::new(InProcess {
            journal: Arc::default(),
            endless_pages,
            connects: AtomicU32::new(0),
            script: Mutex::new(Vec::new()),
            relay: Mutex::new(None),
            silent: Mutex::new(Vec::new()),
        })
    }

    /// The next connects answer so, in order; after them, the server serves.
    pub fn then(&self, answers: &[Answer]) {
        lock(&self.script).extend_from_slice(answers);
    }

    /// Connects attempted so far.
    pub fn connects(&self) -> u32 {
        self.connects.load(Ordering::SeqCst)
    }

    /// Whether every scripted answer was used.
    pub fn script_consumed(&self) -> bool {
        lock(&self.script).is_empty()
    }

    /// Cuts the current connection: both ends see it close.
    pub fn cut(&self) {
        if let Some(relay) = lock(&self.relay).take() {
            relay.abort();
        }
    }

    pub fn connector(self: &Arc<Self>) -> Connector {
        let me = Arc::clone(self);
        Connector::new(move || {
            let me = Arc::clone(&me);
            async move { me.open() }
        })
    }

    fn open(&self) -> io::Result<Stream> {
        self.connects.fetch_add(1, Ordering::SeqCst);
        let answer = {
            let mut script = lock(&self.script);
            if script.is_empty() {
                Answer::Serve
            } else {
                script.remove(0)
            }
        };
        let (client, mut near) = tokio::io::duplex(64 * 1024);
        match answer {
            Answer::Refuse => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    "connection refused",
                ));
            }
            Answer::Silent => lock(&self.silent).push(near),
            Answer::Serve => {
                let (mut far, server) = tokio::io::duplex(64 * 1024);
                let relay = tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut near, &mut far).await;
                });
                *lock(&self.relay) = Some(relay.abort_handle());
                let shop = Shop {
                    journal: Arc::clone(&self.journal),
                    endless_pages: self.endless_pages,
                };
                tokio::spawn(async move {
                    if let Ok(running) = shop.serve(server).await {
                        let _ = running.waiting().await;
                    }
                });
            }
        }
        let (read, write) = tokio::io::split(client);
        Ok(Stream::new(read, write))
    }
}

/// `{ "order": n }`.
pub fn order(n: u64) -> JsonObject {
    let mut args = JsonObject::new();
    args.insert("order".to_owned(), json!(n));
    args
}

/// `response` is a failure whose message starts with `prefix`, committed as the call's result
/// in `runner`'s ledger: a call known as not sent, never left for reconciliation.
pub async fn assert_plain_failure<C: retry_toolkit::Clock>(
    runner: &retry_toolkit::effects::ToolRunner<retry_toolkit::effects::MemoryLedger, C>,
    response: &retry_toolkit::effects::CallResponse,
    key: retry_toolkit::effects::CallKey,
    prefix: &str,
) {
    use retry_toolkit::effects::{CallState, Ledger};
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert!(
        failure.message.starts_with(prefix),
        "{key}: {}",
        failure.message
    );
    let record = runner.ledger().get(key.clone()).await.unwrap().unwrap();
    assert!(
        matches!(record.state, CallState::Committed { .. }),
        "{key}: not for reconciliation, but {:?}",
        record.state
    );
}
