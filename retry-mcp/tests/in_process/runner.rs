//! Remote tools in the effects runner (SPEC C3, A2, A3, A7): a real rmcp server in process,
//! reached through `ToolServer`, its tools registered in a `Toolbox` with declared effects.
//! Time is tokio's paused clock.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{Answer, Event, InProcess, assert_plain_failure};
use retry_mcp::{ConnectOptions, RemoteTool, ToolHints, ToolServer};
use retry_toolkit::RetryOptions;
use retry_toolkit::effects::{
    CallKey, CallLimits, CallResponse, CallState, FailureKind, Ledger, MemoryLedger,
    ReconcileReason, RecoveryAction, RecoveryPolicy, Resolution, Review, RunnerError, ToolCall,
    ToolEffect, ToolRunner, Toolbox,
};
use retry_toolkit::store::Timestamp;
use serde_json::{Value, json};

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

fn server(shop: &Arc<InProcess>) -> ToolServer {
    ToolServer::builder("shop", shop.connector())
        .seed(3)
        .build()
        .unwrap()
}

fn runner(tools: Vec<RemoteTool>) -> ToolRunner<MemoryLedger> {
    runner_on(MemoryLedger::new(), tools)
}

fn runner_on(ledger: MemoryLedger, tools: Vec<RemoteTool>) -> ToolRunner<MemoryLedger> {
    let mut toolbox = Toolbox::new();
    for tool in tools {
        toolbox.register(tool).unwrap();
    }
    ToolRunner::new(ledger, toolbox).with_epoch(T0)
}

fn key(call: &str) -> CallKey {
    CallKey::new("run-1", call).unwrap()
}

fn call(id: &str, tool: &str, args: Value) -> ToolCall {
    ToolCall::new(key(id), tool, args)
}

/// Runs `call` and cuts the connection once the server is in the middle of it.
async fn cut_mid_call(
    shop: &Arc<InProcess>,
    runner: &Arc<ToolRunner<MemoryLedger>>,
    tool: &str,
    call: ToolCall,
) -> Result<CallResponse, RunnerError> {
    shop.journal.hang_next(tool);
    let running = tokio::spawn({
        let runner = Arc::clone(runner);
        async move { runner.call(call).await }
    });
    shop.journal.wait_hanging().await;
    shop.cut();
    running.await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn c3_a_remote_tool_is_a_side_effect_unless_declared_and_hints_count_only_on_opt_in() {
    let shop = InProcess::new();
    let server = server(&shop);
    let listed = server.list_tools().await.unwrap();
    let lookup_hints = listed[0].hints;
    assert_eq!(lookup_hints, ToolHints::new(Some(true), None, None, None));
    let tag_hints = listed[1].hints;

    let effect = |tool: RemoteTool| tool.effect_in_use();
    // Undeclared: a side effect, whatever the server says.
    assert_eq!(
        effect(server.tool("lookup_order").unwrap()),
        ToolEffect::SideEffect
    );
    // Opted in: the server's word.
    assert_eq!(
        effect(
            server
                .tool("lookup_order")
                .unwrap()
                .trust_hints(&lookup_hints)
        ),
        ToolEffect::Read
    );
    assert_eq!(
        effect(server.tool("tag_order").unwrap().trust_hints(&tag_hints)),
        ToolEffect::IdempotentWrite
    );
    // Hints that claim nothing leave a side effect.
    assert_eq!(
        effect(server.tool("refund").unwrap().trust_hints(&listed[2].hints)),
        ToolEffect::SideEffect
    );
    // A declaration wins over hints, in either order.
    assert_eq!(
        effect(
            server
                .tool("lookup_order")
                .unwrap()
                .trust_hints(&lookup_hints)
                .effect(ToolEffect::SideEffect)
        ),
        ToolEffect::SideEffect
    );
    assert_eq!(
        effect(
            server
                .tool("lookup_order")
                .unwrap()
                .effect(ToolEffect::IdempotentWrite)
                .trust_hints(&lookup_hints)
        ),
        ToolEffect::IdempotentWrite
    );

    // What the toolbox sees is the same.
    let tools = Toolbox::new()
        .with(
            server
                .tool(listed[0].name.clone())
                .unwrap()
                .trust_hints(&lookup_hints),
        )
        .unwrap()
        .with(
            server
                .tool("refund")
                .unwrap()
                .with_approval()
                .with_timeout(Duration::from_secs(5)),
        )
        .unwrap();
    assert_eq!(
        tools.spec("lookup_order").map(|s| s.effect()),
        Some(ToolEffect::Read)
    );
    let refund = tools.spec("refund").unwrap();
    assert_eq!(refund.effect(), ToolEffect::SideEffect);
    assert!(refund.requires_approval());
    assert_eq!(refund.timeout(), Some(Duration::from_secs(5)));
}

#[test]
fn c3_names_the_runner_cannot_take_are_refused_with_the_fix() {
    let shop = InProcess::new();
    let server = server(&shop);
    let error = server.tool("files.read").unwrap_err();
    assert_eq!(
        error.to_string(),
        "`files.read` cannot name a tool in the runner: use 1 to 64 of `A-Z`, `a-z`, `0-9`, `_`, `-` (`ToolServer::tool_as` gives a remote tool another name)"
    );
    let renamed = server.tool_as("files_read", "files.read").unwrap();
    assert_eq!(renamed.remote_name(), "files.read");
    // Two servers with a tool of the same name: one of them renamed.
    let tools = Toolbox::new()
        .with(server.tool("refund").unwrap())
        .unwrap()
        .with(server.tool_as("billing_refund", "refund").unwrap())
        .unwrap();
    assert_eq!(
        tools.names().collect::<Vec<_>>(),
        ["billing_refund", "refund"]
    );
}

#[tokio::test(start_paused = true)]
async fn a7_a_remote_side_effect_whose_connection_failed_goes_to_reconciliation_never_to_a_replay()
{
    let shop = InProcess::new();
    let server = server(&shop);
    let runner = Arc::new(runner(vec![
        server.tool("refund").unwrap(),
        server
            .tool("lookup_order")
            .unwrap()
            .effect(ToolEffect::Read),
    ]));

    let error = cut_mid_call(
        &shop,
        &runner,
        "refund",
        call("c1", "refund", json!({ "order": 7 })),
    )
    .await
    .unwrap_err();
    let RunnerError::NeedsReconciliation { reason, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(*reason, ReconcileReason::AnswerLost);
    assert!(
        error.to_string().contains("whether it acted is unknown"),
        "{error}"
    );

    // Submitted again, recovered with a policy that re-runs what it may: not sent again.
    let again = runner
        .call(call("c1", "refund", json!({ "order": 7 })))
        .await
        .unwrap_err();
    assert!(matches!(again, RunnerError::NeedsReconciliation { .. }));
    let policy = RecoveryPolicy::new()
        .rerun(ToolEffect::Read)
        .and_then(|p| p.rerun(ToolEffect::IdempotentWrite))
        .unwrap();
    let report = runner.recover("run-1", &policy, |_| false).await.unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::NeedsReconciliation {
            reason: ReconcileReason::AnswerLost,
            ..
        }
    ));

    // The next call reconnects, as a new decision; the refund reached the server once.
    let lookup = runner
        .call(call("c2", "lookup_order", json!({ "order": 7 })))
        .await
        .unwrap();
    assert!(lookup.result().unwrap().outcome.is_ok());
    assert_eq!(server.connections(), 2);
    assert_eq!(shop.journal.calls("refund"), 1);

    // A person checks the shop and records what happened.
    let resolved = runner
        .resolve(
            key("c1"),
            Resolution::Happened(Ok(json!("refunded order 7"))),
        )
        .await
        .unwrap();
    assert_eq!(
        resolved.result().unwrap().outcome,
        Ok(json!("refunded order 7"))
    );
    assert_eq!(shop.journal.calls("refund"), 1);
}

#[tokio::test(start_paused = true)]
async fn a7_a_remote_read_whose_connection_failed_ends_with_the_failure() {
    let shop = InProcess::new();
    let server = server(&shop);
    let runner = Arc::new(runner(vec![
        server
            .tool("lookup_order")
            .unwrap()
            .effect(ToolEffect::Read),
    ]));
    let response = cut_mid_call(
        &shop,
        &runner,
        "lookup_order",
        call("c1", "lookup_order", json!({ "order": 1 })),
    )
    .await
    .unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Tool);
    assert!(failure.retryable, "a new call may well succeed");
    assert!(
        failure
            .message
            .contains("was lost during the call of `lookup_order`"),
        "{}",
        failure.message
    );
    let record = runner.ledger().get(key("c1")).await.unwrap().unwrap();
    assert!(matches!(record.state, CallState::Committed { .. }));
}

#[tokio::test(start_paused = true)]
async fn c3_without_opting_in_a_tool_the_server_calls_read_only_is_reconciled_like_a_side_effect() {
    let shop = InProcess::new();
    let server = server(&shop);
    let hints = server.list_tools().await.unwrap()[0].hints;

    let untrusted = Arc::new(runner(vec![server.tool("lookup_order").unwrap()]));
    let error = cut_mid_call(
        &shop,
        &untrusted,
        "lookup_order",
        call("c1", "lookup_order", json!({})),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, RunnerError::NeedsReconciliation { .. }),
        "{error:?}"
    );

    let trusted = Arc::new(runner(vec![
        server.tool("lookup_order").unwrap().trust_hints(&hints),
    ]));
    let response = cut_mid_call(
        &shop,
        &trusted,
        "lookup_order",
        call("c1", "lookup_order", json!({})),
    )
    .await
    .unwrap();
    assert!(response.result().unwrap().outcome.is_err());
}

#[tokio::test(start_paused = true)]
async fn a4_the_stable_key_reaches_the_server_and_a_recovered_rerun_carries_the_same_one() {
    let shop = InProcess::new();
    let server = server(&shop);
    let tag = || {
        server
            .tool("tag_order")
            .unwrap()
            .effect(ToolEffect::IdempotentWrite)
            .key_in_argument("idempotency_key")
    };
    let ledger = MemoryLedger::new();
    let first = Arc::new(runner_on(ledger.clone(), vec![tag()]));

    // The runner dies while the server works on the call.
    shop.journal.hang_next("tag_order");
    let running = tokio::spawn({
        let first = Arc::clone(&first);
        async move {
            first
                .call(call("c1", "tag_order", json!({ "order": 4 })))
                .await
        }
    });
    shop.journal.wait_hanging().await;
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());

    // A new runner, after the lease ran out, re-runs the idempotent write: same key.
    let later = runner_on(ledger, vec![tag()]).with_epoch(T0 + Duration::from_secs(3_600));
    let policy = RecoveryPolicy::new()
        .rerun(ToolEffect::IdempotentWrite)
        .unwrap();
    let report = later.recover("run-1", &policy, |_| false).await.unwrap();
    assert!(
        matches!(report.calls[0].action, RecoveryAction::Rerun(Ok(_))),
        "{:?}",
        report.calls[0].action
    );

    let keys: Vec<(Option<String>, Value)> = shop
        .journal
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Called {
                tool,
                key,
                arguments,
            } if tool == "tag_order" => Some((key, arguments["idempotency_key"].clone())),
            _ => None,
        })
        .collect();
    let expected = (Some("run-1:c1".to_owned()), json!("run-1:c1"));
    assert_eq!(keys, [expected.clone(), expected]);
    // The abandoned first call was cancelled on the server.
    assert_eq!(shop.journal.cancelled("tag_order"), 1);
}

#[tokio::test(start_paused = true)]
async fn a5_a_remote_call_that_needs_approval_is_not_sent_before_it() {
    let shop = InProcess::new();
    let server = server(&shop);
    let runner = runner(vec![server.tool("refund").unwrap().with_approval()]);
    let waiting = runner
        .call(call("c1", "refund", json!({ "order": 2 })))
        .await
        .unwrap();
    assert_eq!(waiting, CallResponse::AwaitingApproval(key("c1")));
    assert!(shop.journal.events().is_empty());
    assert_eq!(shop.connects(), 0, "not even connected");

    let done = runner.review(key("c1"), Review::Approve).await.unwrap();
    let result = done.result().unwrap().outcome.clone().unwrap();
    assert_eq!(result["content"][0]["text"], "refunded order 2");
    assert_eq!(shop.journal.calls("refund"), 1);
}

#[tokio::test(start_paused = true)]
async fn c1_an_unreachable_server_fails_a_side_effect_plainly_since_nothing_was_sent() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse; 3]);
    let server = server(&shop);
    let runner = runner(vec![server.tool("refund").unwrap()]);
    let response = runner
        .call(call("c1", "refund", json!({ "order": 2 })))
        .await
        .unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Tool);
    assert!(failure.retryable);
    assert_eq!(
        failure.message,
        "could not connect to tool server `shop` after 3 attempts: could not open the connection: connection refused"
    );
    assert!(shop.journal.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn c1_connecting_stops_before_the_calls_deadline_so_nothing_is_left_unknown() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse; 10]);
    let server = ToolServer::builder("shop", shop.connector())
        .options(ConnectOptions::new().with_retry(RetryOptions::new().with_max_attempts(10)))
        .seed(3)
        .build()
        .unwrap();
    let runner = runner(vec![server.tool("refund").unwrap()]);
    let limits = CallLimits::new().deadline(Duration::from_millis(300));
    let response = runner
        .call_with(call("c1", "refund", json!({ "order": 2 })), limits)
        .await
        .unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert!(
        failure
            .message
            .starts_with("could not connect to tool server `shop` before the deadline"),
        "{}",
        failure.message
    );
    assert!(
        shop.connects() < 10,
        "the waits would have crossed the deadline"
    );
    let record = runner.ledger().get(key("c1")).await.unwrap().unwrap();
    assert!(
        matches!(record.state, CallState::Committed { .. }),
        "not left for reconciliation"
    );
}

#[tokio::test(start_paused = true)]
async fn a3_a_slow_remote_call_past_its_deadline_is_cancelled_and_a_write_is_reconciled() {
    let shop = InProcess::new();
    let server = server(&shop);
    let runner = runner(vec![
        server.tool("refund").unwrap(),
        server
            .tool("lookup_order")
            .unwrap()
            .effect(ToolEffect::Read)
            .with_timeout(Duration::from_secs(2)),
    ]);

    shop.journal.hang_next("refund");
    let limits = CallLimits::new().deadline(Duration::from_secs(5));
    let error = runner
        .call_with(call("c1", "refund", json!({ "order": 2 })), limits)
        .await
        .unwrap_err();
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

    shop.journal.hang_next("lookup_order");
    let response = runner
        .call(call("c2", "lookup_order", json!({ "order": 2 })))
        .await
        .unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.kind, FailureKind::DeadlineExceeded);

    // Both were told to stop; the connection stayed.
    for _ in 0..1_000 {
        if shop.journal.cancelled("refund") + shop.journal.cancelled("lookup_order") == 2 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        (
            shop.journal.cancelled("refund"),
            shop.journal.cancelled("lookup_order")
        ),
        (1, 1)
    );
    assert_eq!(server.connections(), 1);
}

#[tokio::test(start_paused = true)]
async fn a3_arguments_that_are_not_an_object_are_refused_before_anything_is_sent() {
    let shop = InProcess::new();
    let server = server(&shop);
    let runner = runner(vec![server.tool("refund").unwrap()]);
    let response = runner.call(call("c1", "refund", json!([7]))).await.unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.kind, FailureKind::InvalidInput);
    assert_eq!(
        failure.message,
        "the arguments must be a JSON object, not an array"
    );
    assert_eq!(shop.connects(), 0);
    // No arguments at all is an empty object.
    let none = runner
        .call(call("c2", "refund", Value::Null))
        .await
        .unwrap();
    assert!(none.result().unwrap().outcome.is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_servers_answers_are_committed_as_results() {
    let shop = InProcess::new();
    let server = server(&shop);
    let runner = runner(vec![
        server
            .tool("lookup_order")
            .unwrap()
            .effect(ToolEffect::Read),
        server.tool("decline").unwrap(),
        server.tool("crash").unwrap(),
    ]);

    let lookup = runner
        .call(call("c1", "lookup_order", json!({ "order": 5 })))
        .await
        .unwrap();
    let output = lookup.result().unwrap().outcome.clone().unwrap();
    assert_eq!(
        output["structuredContent"],
        json!({ "order": 5, "status": "shipped" })
    );

    let declined = runner.call(call("c2", "decline", json!({}))).await.unwrap();
    let failure = declined.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(
        (failure.kind, failure.message.as_str(), failure.retryable),
        (FailureKind::Tool, "card declined", false)
    );

    let crashed = runner.call(call("c3", "crash", json!({}))).await.unwrap();
    let failure = crashed.result().unwrap().outcome.clone().unwrap_err();
    assert!(failure.message.contains("the database is down"));
    // Answers are final: asking again reads the ledger.
    let again = runner.call(call("c2", "decline", json!({}))).await.unwrap();
    assert_eq!(
        again.result().unwrap().source,
        retry_toolkit::effects::ResultSource::Ledger
    );
    assert_eq!(shop.journal.calls("decline"), 1);
}

/// Yields until `clock` has at least `sleeps` pending: every task got as far as its timers.
async fn until_pending(clock: &retry_testkit::MockClock, sleeps: usize) {
    for _ in 0..10_000 {
        if clock.pending() >= sleeps {
            // A few more turns, so that nothing else is about to register.
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("only {} sleeps pending, not {sleeps}", clock.pending());
}

/// SPEC C4: a side-effect call whose connection never came is known as not sent — never sent
/// to reconciliation — even when its deadline ties with the connection's: the server never
/// answers the handshake, another caller's connection round is running (so the call's own
/// round starts late), and the call's deadline passes in the same step of the clock that ends
/// everything else. 100 rounds at different offsets, on the mock clock.
#[tokio::test]
async fn c4_a_call_whose_connection_never_came_is_not_sent_even_when_the_deadlines_tie() {
    use retry_testkit::MockClock;

    for round in 0..100u64 {
        let clock = MockClock::new();
        let shop = InProcess::new();
        shop.then(&[Answer::Silent; 4]);
        let server = ToolServer::builder("shop", shop.connector())
            .clock(clock.clone())
            .seed(round)
            .build()
            .unwrap();
        let runner = Arc::new(
            ToolRunner::new(
                MemoryLedger::new(),
                Toolbox::new().with(server.tool("refund").unwrap()).unwrap(),
            )
            .with_clock(clock.clone()),
        );
        // Someone else is connecting already (its attempt waits for the silent handshake).
        let connecting = tokio::spawn({
            let server = server.clone();
            async move { server.connect().await }
        });
        until_pending(&clock, 1).await;
        // The call comes a little later, with a deadline well inside that attempt's timeout.
        let skew = Duration::from_micros(round * 37);
        clock.advance(skew);
        let deadline = Duration::from_millis(100 + round * 13);
        let running = tokio::spawn({
            let runner = Arc::clone(&runner);
            async move {
                runner
                    .call_with(
                        call("c1", "refund", json!({ "order": round })),
                        CallLimits::new().deadline(deadline),
                    )
                    .await
            }
        });
        until_pending(&clock, 2).await;
        clock.advance(deadline); // the call's deadline, in one step

        let response = running.await.unwrap().unwrap_or_else(|error| {
            panic!("round {round}: {error:?}");
        });
        let connect = "could not connect to tool server `shop` before the deadline";
        assert_plain_failure(&runner, &response, key("c1"), connect).await;
        assert_eq!(clock.elapsed(), skew + deadline, "round {round}: at once");
        assert!(shop.journal.events().is_empty());
        connecting.abort();
    }
}

/// Our side of a pipe whose writes a test can make fail, as a pipe whose reader went away.
struct Breakable {
    inner: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    broken: Arc<std::sync::atomic::AtomicBool>,
}

impl tokio::io::AsyncWrite for Breakable {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.broken.load(std::sync::atomic::Ordering::SeqCst) {
            return std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// SPEC C4, C2: when the connection fails before a byte of the call was written — here, our
/// writes fail while the server's answers could still come — the call knows it was not sent:
/// a side effect is a plain failure, never reconciliation, and the server never saw it. The
/// connection is dropped and the next call connects anew.
#[tokio::test(start_paused = true)]
async fn c4_a_call_whose_request_could_not_be_written_is_not_sent() {
    use crate::support::{MemoryJournal, Shop};
    use retry_mcp::{CallError, Connector, Stream};
    use rmcp::ServiceExt;
    use std::sync::atomic::{AtomicBool, Ordering};

    let journal = Arc::new(MemoryJournal::default());
    let broken = Arc::new(AtomicBool::new(false));
    let connector = Connector::new({
        let (journal, broken) = (Arc::clone(&journal), Arc::clone(&broken));
        move || {
            let (journal, broken) = (Arc::clone(&journal), Arc::clone(&broken));
            async move {
                let (client, server) = tokio::io::duplex(64 * 1024);
                let shop = Shop {
                    journal,
                    endless_pages: false,
                };
                tokio::spawn(async move {
                    if let Ok(running) = shop.serve(server).await {
                        let _ = running.waiting().await;
                    }
                });
                let (read, write) = tokio::io::split(client);
                Ok(Stream::new(
                    read,
                    Breakable {
                        inner: write,
                        broken,
                    },
                ))
            }
        }
    });
    let server = ToolServer::builder("shop", connector).build().unwrap();
    server.connect().await.unwrap();
    broken.store(true, Ordering::SeqCst);

    let error = server
        .call("refund", crate::support::order(1))
        .await
        .unwrap_err();
    assert!(matches!(error, CallError::NotSent { .. }), "{error:?}");
    assert!(!error.was_sent() && !error.answer_lost() && error.is_retryable());
    assert!(
        error.to_string().starts_with(
            "the call of `refund` was not sent: the connection to tool server `shop` failed first"
        ),
        "{error}"
    );
    assert!(!server.is_connected(), "the failed connection was dropped");

    // Through the runner, on a fresh connection that fails the same way: a plain failure.
    let runner = runner(vec![server.tool("refund").unwrap()]);
    broken.store(false, Ordering::SeqCst);
    server.connect().await.unwrap();
    broken.store(true, Ordering::SeqCst);
    let response = runner
        .call(call("c1", "refund", json!({ "order": 2 })))
        .await
        .unwrap();
    let not_sent = "the call of `refund` was not sent";
    assert_plain_failure(&runner, &response, key("c1"), not_sent).await;

    // Writes work again: the next call connects anew and goes through.
    broken.store(false, Ordering::SeqCst);
    server
        .call("refund", crate::support::order(3))
        .await
        .unwrap();
    assert_eq!(server.connections(), 3);
    assert_eq!(
        journal.calls("refund"),
        1,
        "only the call that was written arrived"
    );
}
