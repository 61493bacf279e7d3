//! The shop as a real child process over stdio (SPEC C1, C2, C3, C4, A7), spawned by
//! `Connector::command` and faulted for real: it exits at start, it is killed with SIGKILL in
//! the middle of a call, it answers too slowly; and a hostile server that answers with a
//! message over the size limit, a line that is not JSON, a line that never ends, or nothing.
//!
//! This test has its own `main` (`harness = false`): run with `serve`, the binary *is* the
//! server (nothing else may write to its stdout, which carries the protocol); run by
//! `cargo test`, it runs the scenarios below. What each server process saw goes to a journal
//! file (the server-side count), and what it is doing now to the test over a loopback socket —
//! so the test waits on events, never on wall time. Time in the client is a `MockClock`,
//! moved by hand once the test knows what is pending.

mod support;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use retry_mcp::{
    CallError, ConnectFailure, Connector, DEFAULT_MAX_MESSAGE_SIZE, GaveUp, ListError, ToolServer,
    UnreadableMessage,
};
use retry_testkit::{MockClock, SleepStatus};
use retry_toolkit::effects::{
    CallKey, CallLimits, CallState, FailureKind, Ledger, MemoryLedger, ReconcileReason,
    RunnerError, ToolCall, ToolEffect, ToolRunner, Toolbox,
};
use rmcp::ServiceExt;
use serde_json::json;
use support::{Event, Journal, Shop, order};
use tokio::io::AsyncBufReadExt;
use tokio::net::TcpListener;
use tokio::process::Command;
use tokio::sync::mpsc;

// ---------------------------------------------------------------- the server process

/// The journal of a server process: events appended to a file shared by every process of a
/// scenario, signals to the test over TCP.
struct FileJournal {
    state: PathBuf,
    signal: String,
    hang: Option<String>,
}

impl FileJournal {
    fn signal(&self, line: &str) {
        if let Ok(mut socket) = std::net::TcpStream::connect(&self.signal) {
            let _ = writeln!(socket, "{line}");
        }
    }
}

impl Journal for FileJournal {
    fn record(&self, event: Event) {
        let line = serde_json::to_string(&event).unwrap();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.join("journal.jsonl"))
            .unwrap();
        writeln!(file, "{line}").unwrap();
        file.sync_all().unwrap();
        if let Event::Cancelled { tool } = &event {
            self.signal(&format!("cancelled {tool}"));
        }
    }

    /// The first call of the tool named in `SHOP_HANG`, across every process of the scenario.
    fn hang(&self, tool: &str) -> bool {
        self.hang.as_deref() == Some(tool)
            && std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(self.state.join("hung"))
                .is_ok()
    }

    fn hanging(&self, tool: &str) {
        self.signal(&format!("hanging {tool}"));
    }
}

/// Serves the shop on stdin/stdout, after failing the first `SHOP_FAIL_STARTS` starts.
fn serve() -> ExitCode {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let journal = FileJournal {
        state: PathBuf::from(var("SHOP_STATE")),
        signal: var("SHOP_SIGNAL"),
        hang: std::env::var("SHOP_HANG").ok(),
    };
    let starts_file = journal.state.join("starts");
    let starts = std::fs::read_to_string(&starts_file)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0)
        + 1;
    std::fs::write(&starts_file, starts.to_string()).unwrap();
    journal.signal(&format!("started {} {starts}", std::process::id()));
    if starts <= var("SHOP_FAIL_STARTS").parse().unwrap_or(0) {
        return ExitCode::from(3); // gone before the handshake
    }
    if let Ok(mode) = std::env::var("SHOP_HOSTILE") {
        return hostile(&mode, &journal);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let shop = Shop {
            journal: Arc::new(journal),
            endless_pages: false,
        };
        if let Ok(running) = shop.serve((tokio::io::stdin(), tokio::io::stdout())).await {
            let _ = running.waiting().await;
        }
    });
    ExitCode::SUCCESS
}

/// A hand-written server that speaks the protocol as far as `mode` lets it, then answers every
/// `tools/call` (and `tools/list`) with something the client cannot take — and keeps the
/// connection open, so that only the client can end the wait:
/// - `oversized`: an answer of 17 MiB, over the default limit (`SHOP_ANSWER_BYTES` sets it);
/// - `malformed`: a line that is not JSON;
/// - `unterminated`: 1 MiB with no newline, then a good answer;
/// - `silent`: not even an answer to `initialize`;
/// - `mute`: a good handshake, then no answer to anything;
/// - `babbler`: a log line on stdout before its answer to `initialize`.
fn hostile(mode: &str, journal: &FileJournal) -> ExitCode {
    use std::io::BufRead;
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let (Some(method), Some(id)) = (message["method"].as_str(), message.get("id")) else {
            continue; // a notification
        };
        journal.signal(method);
        let answer = |result: serde_json::Value| {
            let mut line = json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string();
            line.push('\n');
            line.into_bytes()
        };
        let bytes = match (method, mode) {
            ("initialize", "silent") => continue,
            ("initialize", "babbler") => b"Server listening on stdio\n".to_vec(),
            ("initialize", _) => answer(json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "hostile", "version": "0" },
            })),
            (_, "mute") => continue,
            ("tools/call" | "tools/list", _) => {
                if method == "tools/call" {
                    journal.record(Event::Called {
                        tool: message["params"]["name"].as_str().unwrap_or("").to_owned(),
                        arguments: message["params"]["arguments"].clone(),
                        key: None,
                    });
                }
                let good =
                    answer(json!({ "content": [{ "type": "text", "text": "done" }], "tools": [] }));
                match mode {
                    "oversized" => {
                        // Written out by hand: serializing 17 MiB is slow in a debug build.
                        let bytes: usize = std::env::var("SHOP_ANSWER_BYTES")
                            .ok()
                            .and_then(|b| b.parse().ok())
                            .unwrap_or(17 << 20);
                        format!(
                            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"{}\"}}],\"tools\":[]}}}}\n",
                            "x".repeat(bytes)
                        )
                        .into_bytes()
                    }
                    "malformed" => b"Traceback (most recent call last):\n".to_vec(),
                    "unterminated" => {
                        let mut bytes = vec![b'x'; 1 << 20];
                        bytes.extend_from_slice(&good);
                        bytes
                    }
                    _ => good,
                }
            }
            _ => continue,
        };
        if out.write_all(&bytes).and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

// ---------------------------------------------------------------- the test side

/// One scenario's server state and signal line.
struct Fixture {
    dir: tempfile::TempDir,
    signal: String,
    signals: mpsc::UnboundedReceiver<String>,
    clock: MockClock,
}

impl Fixture {
    async fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let signal = listener.local_addr().unwrap().to_string();
        let (tx, signals) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(socket).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let _ = tx.send(line);
                    }
                });
            }
        });
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            signal,
            signals,
            clock: MockClock::new(),
        }
    }

    fn command(&self, fail_starts: u32, hang: Option<&str>) -> Command {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .arg("serve")
            .env("SHOP_STATE", self.dir.path())
            .env("SHOP_SIGNAL", &self.signal)
            .env("SHOP_FAIL_STARTS", fail_starts.to_string());
        if let Some(tool) = hang {
            command.env("SHOP_HANG", tool);
        }
        command
    }

    /// The hostile server in `mode` (see `hostile`).
    fn hostile(&self, mode: &str) -> Command {
        let mut command = self.command(0, None);
        command.env("SHOP_HOSTILE", mode);
        command
    }

    /// The next signal from a server process.
    async fn next(&mut self) -> String {
        self.signals.recv().await.unwrap()
    }

    /// Waits for the signal that starts with `prefix`; returns its words after it.
    async fn expect(&mut self, prefix: &str) -> Vec<String> {
        loop {
            let line = self.next().await;
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.split_whitespace().map(str::to_owned).collect();
            }
        }
    }

    fn starts(&self) -> u32 {
        std::fs::read_to_string(self.dir.path().join("starts"))
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(0)
    }

    fn journal(&self) -> Vec<Event> {
        read_journal(self.dir.path())
    }

    fn calls(&self, tool: &str) -> usize {
        self.journal()
            .iter()
            .filter(|e| matches!(e, Event::Called { tool: t, .. } if t == tool))
            .count()
    }
}

fn read_journal(dir: &Path) -> Vec<Event> {
    std::fs::read_to_string(dir.join("journal.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A runner on `fx`'s clock with `server`'s `refund` (undeclared: a side effect) and
/// `lookup_order` (declared a read).
fn shop_runner(
    fx: &Fixture,
    server: &ToolServer<MockClock>,
) -> Arc<ToolRunner<MemoryLedger, MockClock>> {
    let tools = Toolbox::new()
        .with(server.tool("refund").unwrap())
        .unwrap()
        .with(
            server
                .tool("lookup_order")
                .unwrap()
                .effect(ToolEffect::Read),
        )
        .unwrap();
    Arc::new(ToolRunner::new(MemoryLedger::new(), tools).with_clock(fx.clock.clone()))
}

fn kill_9(pid: &str) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {pid}");
}

async fn c1_a_server_that_exits_at_its_first_two_starts_is_reached_on_the_third() {
    let mut fx = Fixture::new().await;
    let (retried, mut retries) = mpsc::unbounded_channel();
    let server = ToolServer::builder("shop", Connector::command(fx.command(2, None)))
        .clock(fx.clock.clone())
        .seed(11)
        .on_retry(move |retry| {
            let _ = retried.send((retry.attempt, retry.failure.to_string(), retry.delay));
        })
        .build()
        .unwrap();
    let call = tokio::spawn({
        let server = server.clone();
        async move { server.call("lookup_order", order(7)).await }
    });
    for expected in 1..=2 {
        let (attempt, failure, delay) = retries.recv().await.unwrap();
        assert_eq!(attempt, expected);
        assert!(failure.starts_with("the handshake failed"), "{failure}");
        // The wait is pending on the mock clock now: let it pass, and nothing more.
        fx.clock.advance(delay);
    }
    let result = call.await.unwrap().unwrap();
    assert_eq!(
        result.structured_content,
        Some(json!({ "order": 7, "status": "shipped" }))
    );
    assert_eq!(fx.starts(), 3);
    assert_eq!(fx.calls("lookup_order"), 1);
    for n in 1..=3 {
        assert_eq!(fx.expect("started ").await[1], n.to_string());
    }
    server.close().await; // closes its stdin; the process exits on its own
    assert!(!server.is_connected());
}

async fn a7_a_server_killed_mid_call_leaves_the_call_unknown_and_the_restarted_server_never_sees_it()
 {
    let mut fx = Fixture::new().await;
    let server = ToolServer::builder("shop", Connector::command(fx.command(0, Some("refund"))))
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let runner = shop_runner(&fx, &server);
    let key = CallKey::new("run-1", "c1").unwrap();
    let refund = ToolCall::new(key.clone(), "refund", json!({ "order": 7 }));

    let running = tokio::spawn({
        let (runner, refund) = (Arc::clone(&runner), refund.clone());
        async move { runner.call(refund).await }
    });
    let pid = fx.expect("started ").await[0].clone();
    fx.expect("hanging refund").await;
    kill_9(&pid); // after the refund took effect, before its answer

    let error = running.await.unwrap().unwrap_err();
    assert_answer_lost(&error);
    // The next call starts a new server process; the refund is not sent to it, now or when
    // submitted again.
    let lookup = ToolCall::new(
        CallKey::new("run-1", "c2").unwrap(),
        "lookup_order",
        json!({ "order": 7 }),
    );
    assert!(
        runner
            .call(lookup)
            .await
            .unwrap()
            .result()
            .unwrap()
            .outcome
            .is_ok()
    );
    assert!(matches!(
        runner.call(refund).await,
        Err(RunnerError::NeedsReconciliation { .. })
    ));
    assert_eq!(fx.starts(), 2);
    assert_eq!(server.connections(), 2);
    assert_eq!(fx.calls("refund"), 1, "across both server processes");
    assert_eq!(fx.calls("lookup_order"), 1);
    server.close().await;
}

async fn a3_a_server_slower_than_the_deadline_is_told_to_cancel_and_the_write_is_reconciled() {
    let mut fx = Fixture::new().await;
    let server = ToolServer::builder("shop", Connector::command(fx.command(0, Some("refund"))))
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let tools = Toolbox::new().with(server.tool("refund").unwrap()).unwrap();
    let runner = Arc::new(ToolRunner::new(MemoryLedger::new(), tools).with_clock(fx.clock.clone()));
    let refund = ToolCall::new(
        CallKey::new("run-1", "c1").unwrap(),
        "refund",
        json!({ "order": 9 }),
    );

    let running = tokio::spawn({
        let runner = Arc::clone(&runner);
        async move {
            runner
                .call_with(refund, CallLimits::new().deadline(Duration::from_secs(5)))
                .await
        }
    });
    fx.expect("hanging refund").await;
    fx.clock.advance(Duration::from_secs(5)); // the deadline, and nothing else, is pending

    let error = running.await.unwrap().unwrap_err();
    assert!(
        matches!(
            error,
            RunnerError::NeedsReconciliation {
                reason: ReconcileReason::DeadlineExceeded,
                ..
            }
        ),
        "{error:?}"
    );
    fx.expect("cancelled refund").await; // the server was told, over the same connection
    assert_eq!(
        fx.journal()
            .iter()
            .filter(|e| matches!(e, Event::Cancelled { tool } if tool == "refund"))
            .count(),
        1
    );
    // The connection is fine: the next call uses it, no new process.
    server.call("refund", order(10)).await.unwrap();
    assert_eq!((fx.starts(), server.connections()), (1, 1));
    server.close().await;
}

async fn c1_a_program_that_does_not_exist_is_not_retried() {
    let fx = Fixture::new().await;
    let missing = Command::new(fx.dir.path().join("no-such-server"));
    let server = ToolServer::builder("shop", Connector::command(missing))
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let error = server.call("refund", order(1)).await.unwrap_err();
    let CallError::Unreachable(connect) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        (connect.attempts(), connect.gave_up()),
        (1, GaveUp::NotRetryable)
    );
    assert!(matches!(
        connect.last_failure(),
        Some(ConnectFailure::Open(_))
    ));
    assert!(
        error
            .to_string()
            .ends_with("(not retried: waiting would not fix it)"),
        "{error}"
    );
    // The only timer was the attempt's own connect timeout, dropped when it failed: no wait.
    let log = fx.clock.sleep_log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].duration, retry_mcp::DEFAULT_CONNECT_TIMEOUT);
    assert!(matches!(log[0].status, SleepStatus::Dropped { .. }));
    assert_eq!(fx.clock.elapsed(), Duration::ZERO);
}

// ---------------------------------------------------------------- hostile servers (C4)

/// A server on `fx`'s clock for the hostile server in `mode`, and a runner with its `refund`
/// (a side effect) and `lookup_order` (declared a read) on the same clock.
fn hostile_setup(
    fx: &Fixture,
    mode: &str,
    max_message: Option<usize>,
) -> (
    ToolServer<MockClock>,
    Arc<ToolRunner<MemoryLedger, MockClock>>,
) {
    let mut builder =
        ToolServer::builder("shop", Connector::command(fx.hostile(mode))).clock(fx.clock.clone());
    if let Some(bytes) = max_message {
        builder = builder.max_message_size(bytes);
    }
    let server = builder.build().unwrap();
    let runner = shop_runner(fx, &server);
    (server, runner)
}

/// A call with a deadline far away, so that "at once" means "before the clock moved".
fn far(call: &str, tool: &str) -> (ToolCall, CallLimits) {
    (
        ToolCall::new(
            CallKey::new("run-1", call).unwrap(),
            tool,
            json!({ "order": 7 }),
        ),
        CallLimits::new().deadline(Duration::from_secs(30)),
    )
}

/// The runner sent the call to reconciliation because its answer was lost.
fn assert_answer_lost(error: &RunnerError) {
    assert!(
        matches!(
            error,
            RunnerError::NeedsReconciliation {
                reason: ReconcileReason::AnswerLost,
                ..
            }
        ),
        "{error:?}"
    );
}

/// Runs `call` and asserts that a side effect was sent and went to reconciliation, and that the
/// ledger says so.
async fn assert_reconciled(runner: &ToolRunner<MemoryLedger, MockClock>, call: &str) {
    let (refund, limits) = far(call, "refund");
    let key = refund.key.clone();
    let error = runner.call_with(refund, limits).await.unwrap_err();
    assert_answer_lost(&error);
    let record = runner.ledger().get(key).await.unwrap().unwrap();
    assert!(
        matches!(record.state, CallState::NeedsReconciliation { .. }),
        "{:?}",
        record.state
    );
}

async fn c4_an_answer_over_the_size_limit_fails_the_call_at_once_as_unknown() {
    let fx = Fixture::new().await;
    // The default limit, against an answer of 17 MiB.
    let (server, _) = hostile_setup(&fx, "oversized", None);

    let error = server
        .call_within("refund", order(7), Duration::from_secs(30))
        .await
        .unwrap_err();
    let CallError::Unreadable { message, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        *message,
        UnreadableMessage::TooLarge {
            limit: DEFAULT_MAX_MESSAGE_SIZE
        }
    );
    assert!(error.answer_lost() && error.was_sent());
    assert_eq!(
        error.to_string(),
        "tool server `shop` sent a message longer than the limit of 16777216 bytes during the call of `refund`: the connection was closed, whether the call acted is unknown, and it was not sent again"
    );
    assert_eq!(fx.clock.elapsed(), Duration::ZERO, "at once");
    assert_eq!(fx.calls("refund"), 1);
    server.close().await;

    // A limit of 64 KiB, against answers of 1 MiB (cheaper, the same path).
    let mut command = fx.hostile("oversized");
    command.env("SHOP_ANSWER_BYTES", (1 << 20).to_string());
    let server = ToolServer::builder("shop", Connector::command(command))
        .clock(fx.clock.clone())
        .max_message_size(64 << 10)
        .build()
        .unwrap();
    let runner = shop_runner(&fx, &server);
    // Through the runner: a side effect goes to reconciliation, a read ends with the failure.
    assert_reconciled(&runner, "c1").await;
    let (lookup, limits) = far("c2", "lookup_order");
    let response = runner.call_with(lookup, limits).await.unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Tool);
    assert!(
        failure.message.contains("longer than the limit"),
        "{}",
        failure.message
    );
    // A listing too.
    let listing = server.list_tools().await.unwrap_err();
    assert!(
        matches!(
            listing,
            ListError::Unreadable {
                message: UnreadableMessage::TooLarge { .. },
                ..
            }
        ),
        "{listing:?}"
    );
    assert_eq!(
        fx.clock.elapsed(),
        Duration::ZERO,
        "every failure came at once"
    );
    // Each failure dropped its connection; every call connected anew (C2).
    assert_eq!(server.connections(), 3);
    assert_eq!(fx.calls("refund"), 2, "the direct call, then the runner's");
    assert_eq!(fx.calls("lookup_order"), 1);
    server.close().await;
}

async fn c4_a_line_that_is_not_json_fails_the_call_at_once_as_unknown() {
    let fx = Fixture::new().await;
    let (server, runner) = hostile_setup(&fx, "malformed", None);
    let error = server.call("refund", order(7)).await.unwrap_err();
    let CallError::Unreadable {
        message: UnreadableMessage::Malformed { detail },
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(detail, "not a JSON object");
    assert!(error.answer_lost());
    assert_reconciled(&runner, "c1").await;
    assert_eq!(fx.clock.elapsed(), Duration::ZERO, "at once");
    assert_eq!(fx.calls("refund"), 2);
    server.close().await;
}

async fn c4_a_server_that_writes_a_log_line_on_stdout_fails_its_handshake_with_the_reason() {
    let fx = Fixture::new().await;
    let server = ToolServer::builder("shop", Connector::command(fx.hostile("babbler")))
        .options(
            retry_mcp::ConnectOptions::new()
                .with_retry(retry_toolkit::RetryOptions::new().with_max_attempts(1)),
        )
        .clock(fx.clock.clone())
        .build()
        .unwrap();
    let error = server.connect().await.unwrap_err();
    let Some(ConnectFailure::Unreadable(UnreadableMessage::Malformed { detail })) =
        error.last_failure()
    else {
        panic!("{error:?}")
    };
    assert_eq!(detail, "not a JSON object");
    assert_eq!(
        error.to_string(),
        "could not connect to tool server `shop` after 1 attempt: the handshake failed: the server sent a line that is not a protocol message (not a JSON object)"
    );
    assert_eq!(fx.clock.elapsed(), Duration::ZERO, "at once");
    server.close().await;
}

async fn c4_a_line_that_never_ends_fails_at_the_limit_and_swallows_no_answer() {
    let fx = Fixture::new().await;
    let limit = 64 << 10;
    let (server, runner) = hostile_setup(&fx, "unterminated", Some(limit));
    // The good answer after the endless line is never taken for the answer: the line is cut
    // where it crossed the limit, and the call fails with that reason.
    let error = server.call("refund", order(7)).await.unwrap_err();
    assert!(
        matches!(
            &error,
            CallError::Unreadable { message: UnreadableMessage::TooLarge { limit: l }, .. } if *l == limit
        ),
        "{error:?}"
    );
    assert_reconciled(&runner, "c1").await;
    assert_eq!(fx.clock.elapsed(), Duration::ZERO, "at once");
    assert_eq!(fx.calls("refund"), 2);
    server.close().await;
}

async fn c4_a_server_that_never_answers_the_handshake_leaves_a_side_effect_not_sent() {
    let mut fx = Fixture::new().await;
    let (server, runner) = hostile_setup(&fx, "silent", None);
    let deadline = Duration::from_secs(5);
    let running = tokio::spawn({
        let runner = Arc::clone(&runner);
        async move {
            let (refund, _) = far("c1", "refund");
            runner
                .call_with(refund, CallLimits::new().deadline(deadline))
                .await
        }
    });
    fx.expect("initialize").await;
    fx.clock.advance(deadline); // the call's deadline, and the connection's, in one step

    let response = running.await.unwrap().unwrap();
    let key = CallKey::new("run-1", "c1").unwrap();
    let connect = "could not connect to tool server `shop` before the deadline";
    support::assert_plain_failure(&runner, &response, key, connect).await;
    assert_eq!(fx.clock.elapsed(), deadline);
    assert_eq!(fx.calls("refund"), 0);
    server.close().await;
}

async fn c4_listing_a_server_that_never_answers_ends_at_its_bound() {
    // Never a handshake: no connection within the bound.
    let mut fx = Fixture::new().await;
    let (server, _) = hostile_setup(&fx, "silent", None);
    let bound = Duration::from_secs(3);
    let listing = tokio::spawn({
        let server = server.clone();
        async move { server.list_tools_within(bound).await }
    });
    fx.expect("initialize").await;
    fx.clock.advance(bound);
    let error = listing.await.unwrap().unwrap_err();
    let ListError::Unreachable(connect) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(connect.gave_up(), GaveUp::Deadline);
    assert_eq!(fx.clock.elapsed(), bound);
    server.close().await;

    // A handshake, then no answer to the listing.
    let mut fx = Fixture::new().await;
    let (server, _) = hostile_setup(&fx, "mute", None);
    let listing = tokio::spawn({
        let server = server.clone();
        async move { server.list_tools_within(bound).await }
    });
    fx.expect("tools/list").await;
    fx.clock.advance(bound);
    let error = listing.await.unwrap().unwrap_err();
    assert!(
        matches!(error, ListError::TimedOut { timeout, .. } if timeout == bound),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "tool server `shop` did not list its tools within 3s"
    );
    assert_eq!(fx.clock.elapsed(), bound);
    assert!(
        server.is_connected(),
        "a slow listing leaves the connection open"
    );
    server.close().await;
}

// ---------------------------------------------------------------- the runner of this file

type Scenario = fn() -> Pin<Box<dyn Future<Output = ()>>>;

const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "c1_a_server_that_exits_at_its_first_two_starts_is_reached_on_the_third",
        || Box::pin(c1_a_server_that_exits_at_its_first_two_starts_is_reached_on_the_third()),
    ),
    (
        "a7_a_server_killed_mid_call_leaves_the_call_unknown_and_the_restarted_server_never_sees_it",
        || {
            Box::pin(a7_a_server_killed_mid_call_leaves_the_call_unknown_and_the_restarted_server_never_sees_it())
        },
    ),
    (
        "a3_a_server_slower_than_the_deadline_is_told_to_cancel_and_the_write_is_reconciled",
        || {
            Box::pin(
                a3_a_server_slower_than_the_deadline_is_told_to_cancel_and_the_write_is_reconciled(
                ),
            )
        },
    ),
    ("c1_a_program_that_does_not_exist_is_not_retried", || {
        Box::pin(c1_a_program_that_does_not_exist_is_not_retried())
    }),
    (
        "c4_an_answer_over_the_size_limit_fails_the_call_at_once_as_unknown",
        || Box::pin(c4_an_answer_over_the_size_limit_fails_the_call_at_once_as_unknown()),
    ),
    (
        "c4_a_line_that_is_not_json_fails_the_call_at_once_as_unknown",
        || Box::pin(c4_a_line_that_is_not_json_fails_the_call_at_once_as_unknown()),
    ),
    (
        "c4_a_server_that_writes_a_log_line_on_stdout_fails_its_handshake_with_the_reason",
        || {
            Box::pin(
                c4_a_server_that_writes_a_log_line_on_stdout_fails_its_handshake_with_the_reason(),
            )
        },
    ),
    (
        "c4_a_line_that_never_ends_fails_at_the_limit_and_swallows_no_answer",
        || Box::pin(c4_a_line_that_never_ends_fails_at_the_limit_and_swallows_no_answer()),
    ),
    (
        "c4_a_server_that_never_answers_the_handshake_leaves_a_side_effect_not_sent",
        || Box::pin(c4_a_server_that_never_answers_the_handshake_leaves_a_side_effect_not_sent()),
    ),
    (
        "c4_listing_a_server_that_never_answers_ends_at_its_bound",
        || Box::pin(c4_listing_a_server_that_never_answers_ends_at_its_bound()),
    ),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        return serve();
    }
    if args.iter().any(|a| a == "--list") {
        for (name, _) in SCENARIOS {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let chosen: Vec<_> = SCENARIOS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", chosen.len());
    let mut failed = Vec::new();
    for (name, scenario) in &chosen {
        let outcome = std::panic::catch_unwind(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(scenario())
        });
        println!(
            "test {name} ... {}",
            if outcome.is_ok() { "ok" } else { "FAILED" }
        );
        if outcome.is_err() {
            failed.push(*name);
        }
    }
    let passed = chosen.len() - failed.len();
    println!(
        "\ntest result: {}. {passed} passed; {} failed\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
