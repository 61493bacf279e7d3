//! An agent's tools on a local MCP server that crashes mid-call: the connection is retried at
//! startup, the call in flight is not replayed, the next call reconnects, and a person settles
//! what the crash left unknown.
//!
//! Run with `cargo run -p retry-examples-mcp --example mcp`. The server is this same program, started again with
//! `serve` as a child process and spoken to over its stdin and stdout. Its first start exits
//! before the handshake (a server still warming up); its second dies right after booking a
//! refund, before it can answer. The waits are real and short (a 100 ms base).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use retry_mcp::{ConnectOptions, Connector, ToolServer};
use retry_toolkit::RetryOptions;
use retry_toolkit::effects::{
    CallKey, CallResponse, CallState, Ledger, MemoryLedger, Resolution, ResultSource, RunnerError,
    ToolCall, ToolEffect, ToolRunner, Toolbox,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::process::Command;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("serve") {
        return serve().await;
    }
    let books = tempfile::tempdir()?;

    println!("== an agent's tools on a shop server that crashes mid-call\n");
    let options = ConnectOptions::new().with_retry(RetryOptions::new().with_base_delay_ms(100));
    println!(
        "connection options, as stored with the registration: {}",
        serde_json::to_string(&options)?
    );
    let mut command = Command::new(std::env::current_exe()?);
    command.arg("serve").env("SHOP_BOOKS", books.path());
    let shop = ToolServer::builder("shop", Connector::command(command))
        .options(options)
        .on_retry(|retry| {
            println!(
                "  [client] connection attempt {} failed ({}); next attempt in {} ms",
                retry.attempt,
                retry.failure,
                retry.delay.as_millis()
            );
        })
        .build()?;

    // What the server claims about its tools is only a hint: trusted for the lookup, by choice;
    // the refund is declared, and would be a side effect anyway.
    let listed = shop.list_tools().await?;
    println!("\nthe server lists its tools:");
    for tool in &listed {
        println!(
            "  {:<13} hints: read-only {:?}, idempotent {:?}",
            tool.name, tool.hints.read_only, tool.hints.idempotent
        );
    }
    let lookup_hints = listed
        .iter()
        .find(|t| t.name == "lookup_order")
        .map(|t| t.hints)
        .unwrap_or_default();
    let tools = Toolbox::new()
        .with(shop.tool("lookup_order")?.trust_hints(&lookup_hints))?
        .with(
            shop.tool("tag_order")?
                .effect(ToolEffect::IdempotentWrite)
                .key_in_argument("request_id"),
        )?
        .with(shop.tool("refund")?.effect(ToolEffect::SideEffect))?;
    for name in tools.names() {
        let effect = tools.spec(name).map(|s| s.effect());
        println!(
            "  registered {name:<13} as {}",
            effect.map_or("?", |e| e.name())
        );
    }
    let runner = Arc::new(ToolRunner::new(MemoryLedger::new(), tools));

    println!("\n== the agent's run");
    let steps = [
        ("call-1", "lookup_order", json!({ "order": 17 })),
        ("call-2", "tag_order", json!({ "order": 17, "tag": "vip" })),
        ("call-3", "refund", json!({ "order": 17 })),
        ("call-4", "lookup_order", json!({ "order": 17 })),
    ];
    for (id, tool, args) in steps {
        println!("\n[agent] {id}: {tool} {args}");
        let call = ToolCall::new(CallKey::new("run-1", id)?, tool, args);
        match runner.call(call).await {
            Ok(CallResponse::Done(result)) => match &result.outcome {
                Ok(output) => println!("[agent] {id}: {}", summary(output)),
                Err(failure) => println!("[agent] {id} failed: {failure}"),
            },
            Ok(CallResponse::AwaitingApproval(key)) => println!("[agent] {key} waits for approval"),
            Err(RunnerError::NeedsReconciliation { key, reason }) => {
                println!("[agent] {key}: outcome unknown — {reason}");
                println!("        not sent again; the ledger keeps it for a person to settle");
            }
            Err(error) => println!("[agent] {id}: {error}"),
        }
        println!("        (connection #{} to the shop)", shop.connections());
    }

    println!("\n== after the run");
    for record in runner.ledger().list_run("run-1".to_owned()).await? {
        println!(
            "  {} {:<13} {}",
            record.key,
            record.tool,
            record.state.name()
        );
    }
    let refunds = booked(books.path(), "refund");
    println!(
        "  the shop's books: {refunds} refund of order 17, across {} server processes",
        starts(books.path())
    );

    println!("\na person reads the books: the refund did happen; they record it");
    let key = CallKey::new("run-1", "call-3")?;
    runner
        .resolve(
            key.clone(),
            Resolution::Happened(Ok(json!("refunded order 17"))),
        )
        .await?;
    let again = runner
        .call(ToolCall::new(key.clone(), "refund", json!({ "order": 17 })))
        .await?;
    let from = match again.result().map(|r| r.source) {
        Some(ResultSource::Ledger) => "from the ledger",
        _ => "by the tool (unexpected)",
    };
    println!("  the agent submits {key} again: answered {from}, nothing sent");
    println!(
        "  the shop's books still hold {} refund",
        booked(books.path(), "refund")
    );
    let record = runner.ledger().get(key).await?;
    assert!(matches!(
        record.map(|r| r.state),
        Some(CallState::Committed { .. })
    ));
    assert_eq!(booked(books.path(), "refund"), 1);
    shop.close().await;
    Ok(())
}

/// One line for a tool's output: its text, or its structured content.
fn summary(output: &Value) -> String {
    match (&output["structuredContent"], &output["content"][0]["text"]) {
        (Value::Null, Value::String(text)) => text.clone(),
        (structured, _) => structured.to_string(),
    }
}

// ---------------------------------------------------------------- the shop server

/// The shop, as the child process runs it; its books are lines in a file.
#[derive(Clone)]
struct Shop {
    books: PathBuf,
    start: u32,
}

fn books_file(dir: &Path) -> PathBuf {
    dir.join("books.txt")
}

fn booked(dir: &Path, what: &str) -> usize {
    let books = std::fs::read_to_string(books_file(dir)).unwrap_or_default();
    books.lines().filter(|line| line.starts_with(what)).count()
}

fn starts(dir: &Path) -> u32 {
    std::fs::read_to_string(dir.join("starts"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::var("SHOP_BOOKS")?);
    let start = starts(&dir) + 1;
    std::fs::write(dir.join("starts"), start.to_string())?;
    if start == 1 {
        eprintln!("  [server #1] still warming up: exits before the handshake");
        std::process::exit(1);
    }
    eprintln!("  [server #{start}] ready, pid {}", std::process::id());
    let shop = Shop { books: dir, start };
    shop.serve((tokio::io::stdin(), tokio::io::stdout()))
        .await?
        .waiting()
        .await?;
    Ok(())
}

impl Shop {
    fn book(&self, line: &str) -> std::io::Result<()> {
        let mut books = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(books_file(&self.books))?;
        writeln!(books, "{line}")?;
        books.sync_all()
    }
}

impl ServerHandler for Shop {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema: JsonObject =
            serde_json::from_value(json!({ "type": "object" })).unwrap_or_default();
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("lookup_order", "Where an order is", schema.clone())
                .with_annotations(ToolAnnotations::new().read_only(true)),
            Tool::new("tag_order", "Tags an order", schema.clone())
                .with_annotations(ToolAnnotations::new().read_only(false).idempotent(true)),
            Tool::new("refund", "Refunds an order", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let order = args.get("order").cloned().unwrap_or(Value::Null);
        let text = match request.name.as_ref() {
            "lookup_order" => {
                return Ok(CallToolResult::structured(
                    json!({ "order": order, "status": "shipped" }),
                )
                .into());
            }
            "tag_order" => {
                let request_id = args
                    .get("request_id")
                    .and_then(Value::as_str)
                    .unwrap_or("none");
                format!("tagged order {order} (request {request_id})")
            }
            "refund" => {
                self.book(&format!("refund order {order}"))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                if self.start == 2 {
                    eprintln!(
                        "  [server #2] refund of order {order} booked; the process dies before it answers"
                    );
                    std::process::exit(70);
                }
                format!("refunded order {order}")
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named `{other}`"),
                    None,
                ));
            }
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}
