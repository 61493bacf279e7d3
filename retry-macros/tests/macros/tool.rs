//! Run-time behaviour of `#[tool]` functions (SPEC X3 with A2–A5): registered in a `Toolbox`,
//! run by the `ToolRunner`, handed the stable key, recovered after a crash according to their
//! declared effect. Paused tokio time throughout: nothing sleeps for real.
//!
//! Tools are free functions, so each test that observes one has its own tools and statics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use retry_toolkit::effects::{
    CallKey, CallResponse, FailureKind, IdempotencyKey, MemoryLedger, RecoveryAction,
    RecoveryPolicy, ResultSource, Review, ToolCall, ToolContext, ToolEffect, ToolOutcome,
    ToolRunner, Toolbox,
};
use retry_toolkit::store::Timestamp;
use retry_toolkit::{retry, tool};
use serde_json::{Value, json};

fn key(run: &str, call: &str) -> CallKey {
    CallKey::new(run, call).unwrap()
}

fn runner(tools: Toolbox) -> ToolRunner<MemoryLedger> {
    ToolRunner::new(MemoryLedger::new(), tools)
}

/// The committed outcome of `call`.
async fn outcome(runner: &ToolRunner<MemoryLedger>, call: ToolCall) -> (ToolOutcome, ResultSource) {
    match runner.call(call).await.unwrap() {
        CallResponse::Done(result) => (result.outcome, result.source),
        other => panic!("{other:?}"),
    }
}

// X3, A4: the key ------------------------------------------------------------------------------

/// The keys `save_note` was called with (per key, so that tests running in parallel, which
/// call it with other keys, do not disturb each other's counts).
static SAVES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn saves_of(key: &str) -> usize {
    SAVES.lock().unwrap().iter().filter(|k| *k == key).count()
}

/// Records the key it was handed, as an upsert downstream would use it.
#[tool(effect = "idempotent-write")]
async fn save_note(
    title: &str,
    body: Option<String>,
    key: IdempotencyKey,
) -> Result<Value, String> {
    SAVES.lock().unwrap().push(key.as_str().to_owned());
    Ok(json!({ "title": title, "body": body, "key": key.as_str() }))
}

#[tokio::test(start_paused = true)]
async fn x3_a4_tool_runs_through_the_runner_with_the_stable_key() {
    assert_eq!(save_note::TOOL_SPEC.name(), "save_note");
    assert_eq!(save_note::TOOL_SPEC.effect(), ToolEffect::IdempotentWrite);
    let runner = runner(Toolbox::new().with(save_note {}).unwrap());
    let call = ToolCall::new(
        key("run-1", "call-7"),
        "save_note",
        json!({ "title": "trip" }),
    );

    let (first, source) = outcome(&runner, call.clone()).await;
    assert_eq!(source, ResultSource::ThisCall);
    assert_eq!(
        first,
        Ok(json!({ "title": "trip", "body": null, "key": "run-1:call-7" }))
    );

    // The same call again: answered from the ledger, the function is not called again.
    let (again, source) = outcome(&runner, call).await;
    assert_eq!((again, source), (first, ResultSource::Ledger));
    assert_eq!(saves_of("run-1:call-7"), 1);
}

// X3: arguments --------------------------------------------------------------------------------

/// Adds two numbers; fails on overflow, with a message for the model.
#[tool(effect = "read")]
async fn add(a: i64, b: i64) -> Result<i64, String> {
    a.checked_add(b)
        .ok_or_else(|| format!("{a} + {b} overflows"))
}

#[tokio::test(start_paused = true)]
async fn x3_parameters_are_the_fields_of_the_json_arguments() {
    let runner = runner(Toolbox::new().with(add {}).unwrap());
    let call = |id: &str, args| ToolCall::new(key("run-2", id), "add", args);

    let (sum, _) = outcome(&runner, call("ok", json!({ "b": 3, "a": 2 }))).await;
    assert_eq!(sum, Ok(json!(5)));
    // serde also reads a struct from an array, in parameter order.
    let (sum, _) = outcome(&runner, call("positional", json!([2, 3]))).await;
    assert_eq!(sum, Ok(json!(5)));

    // A failure of the function is the tool's failure, with its `Display`.
    let (overflow, _) = outcome(&runner, call("overflow", json!({ "a": i64::MAX, "b": 1 }))).await;
    let failure = overflow.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Tool);
    assert_eq!(failure.message, format!("{} + 1 overflows", i64::MAX));

    // Arguments that do not fit are refused before the function runs, in words the model can
    // act on.
    let refused = [
        (json!({ "a": 1 }), "missing field `b`"),
        (
            json!({ "a": 1, "b": 2, "c": 3 }),
            "unknown field `c`, expected `a` or `b`",
        ),
        (
            json!("1 + 2"),
            "invalid type: string \"1 + 2\", expected the arguments of tool `add`: an object with the fields `a`, `b`",
        ),
    ];
    for (index, (args, message)) in refused.into_iter().enumerate() {
        let (outcome, _) = outcome(&runner, call(&format!("bad-{index}"), args)).await;
        let failure = outcome.unwrap_err();
        assert_eq!(failure.kind, FailureKind::InvalidInput);
        assert_eq!(failure.message, message);
    }
}

/// A raw name and borrowed arguments: read owned, named without `r#`.
#[tool(effect = "read")]
async fn describe(r#type: &str, bytes: &[u8], tags: Option<Vec<String>>) -> Result<String, String> {
    Ok(format!("{type}: {} bytes, tags {tags:?}", bytes.len()))
}

#[tokio::test(start_paused = true)]
async fn x4_raw_names_and_borrowed_parameters_read_owned_fields() {
    let runner = runner(Toolbox::new().with(describe {}).unwrap());
    let args = json!({ "type": "blob", "bytes": [1, 2, 3] });
    let call = ToolCall::new(key("run-2b", "c"), "describe", args);
    let (outcome, _) = outcome(&runner, call).await;
    assert_eq!(outcome, Ok(json!("blob: 3 bytes, tags None")));
}

// X3, A2: the descriptor -----------------------------------------------------------------------

static RINGS: AtomicU32 = AtomicU32::new(0);

/// No effect declared: a side effect. Needs approval; bounded in time.
#[tool(name = "ring-bell", requires_approval = true, timeout_ms = 1_000)]
async fn ring_bell(ctx: ToolContext) -> Result<String, String> {
    RINGS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("rang for {}", ctx.call()))
}

#[tokio::test(start_paused = true)]
async fn a2_undeclared_is_a_side_effect_and_the_options_reach_the_runner() {
    let spec = ring_bell::TOOL_SPEC;
    assert_eq!(spec.name(), "ring-bell");
    assert_eq!(spec.effect(), ToolEffect::SideEffect);
    assert!(spec.requires_approval());
    assert_eq!(spec.timeout(), Some(Duration::from_secs(1)));

    let runner = runner(Toolbox::new().with(ring_bell {}).unwrap());
    let call = ToolCall::new(key("run-3", "ring"), "ring-bell", json!({}));
    let waiting = runner.call(call).await.unwrap();
    assert_eq!(
        waiting,
        CallResponse::AwaitingApproval(key("run-3", "ring"))
    );
    assert_eq!(RINGS.load(Ordering::SeqCst), 0);

    let approved = runner.review(key("run-3", "ring"), Review::Approve).await;
    let result = approved.unwrap().result().cloned().unwrap();
    assert_eq!(result.effect, ToolEffect::SideEffect);
    assert_eq!(result.outcome, Ok(json!("rang for run-3:ring")));
    assert_eq!(RINGS.load(Ordering::SeqCst), 1);
}

/// Never answers: the runner's deadline is the tool's `timeout_ms`.
#[tool(effect = "read", timeout_ms = 250)]
async fn stuck() -> Result<(), String> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn a3_the_timeout_option_bounds_each_call() {
    let runner = runner(Toolbox::new().with(stuck {}).unwrap());
    let start = tokio::time::Instant::now();
    let (outcome, _) = outcome(
        &runner,
        ToolCall::new(key("run-4", "c"), "stuck", json!({})),
    )
    .await;
    assert_eq!(outcome.unwrap_err().kind, FailureKind::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_millis(250));
}

// X3 with #[retry]: retries inside one call keep the key ---------------------------------------

static UPSERT_KEYS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Fails twice, then succeeds: `#[retry]` repeats it within one call, with the same key each
/// time — which is what makes repeating a write safe.
#[tool(effect = "idempotent-write")]
#[retry(max_attempts = 3, base_delay_ms = 10, max_delay_ms = 100)]
async fn flaky_upsert(row: u32, key: &IdempotencyKey) -> Result<u32, String> {
    let mut keys = UPSERT_KEYS.lock().unwrap();
    keys.push(key.to_string());
    if keys.len() < 3 {
        Err(format!("503 on attempt {}", keys.len()))
    } else {
        Ok(row)
    }
}

#[tokio::test(start_paused = true)]
async fn x3_retry_inside_an_idempotent_write_repeats_it_with_the_same_key() {
    let runner = runner(Toolbox::new().with(flaky_upsert {}).unwrap());
    let call = ToolCall::new(key("run-5", "up"), "flaky_upsert", json!({ "row": 9 }));
    let (outcome, _) = outcome(&runner, call).await;
    assert_eq!(outcome, Ok(json!(9)));
    assert_eq!(*UPSERT_KEYS.lock().unwrap(), ["run-5:up"; 3]);
}

// A1, X3: the descriptor says whether the function retries -----------------------------------

mod spelled {
    pub(crate) use retry_toolkit::retry as again;
    pub(crate) use retry_toolkit::tool as declare;
}

/// `#[retry]` above `#[tool]`, renamed.
#[spelled::again(max_attempts = 2)]
#[tool(effect = "read")]
async fn retried_read() -> Result<u32, String> {
    Ok(1)
}

/// `#[tool]` above `#[retry]`, renamed, behind `cfg_attr`.
#[cfg_attr(all(), spelled::declare(effect = "read"))]
#[cfg_attr(all(), spelled::again)]
async fn read_retried() -> Result<u32, String> {
    Ok(1)
}

#[test]
fn a1_x3_the_descriptor_says_whether_the_function_retries() {
    // A registration refuses a side effect that retries (SPEC A1): the macros tell it which
    // functions do, in either order and however the attributes are spelled.
    assert!(retried_read::TOOL_SPEC.retries_internally());
    assert!(read_retried::TOOL_SPEC.retries_internally());
    assert!(flaky_upsert::TOOL_SPEC.retries_internally());
    assert!(!save_note::TOOL_SPEC.retries_internally());
    let tools = Toolbox::new()
        .with(retried_read {})
        .and_then(|t| t.with(read_retried {}));
    assert_eq!(tools.unwrap().names().count(), 2);
}

// A5: recovery treats each tool per its declared effect ----------------------------------------

/// What the outside world saw, and whether the process is about to die: while `CRASHING`, a
/// tool does its work and then hangs, so that the runner is dropped mid-call.
static CRASHING: AtomicBool = AtomicBool::new(false);
static LOOKUPS: AtomicU32 = AtomicU32::new(0);
static WRITES: Mutex<Vec<String>> = Mutex::new(Vec::new());
static EMAILS: AtomicU32 = AtomicU32::new(0);

async fn maybe_crash() {
    if CRASHING.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
}

#[tool(effect = "read")]
async fn lookup(city: String) -> Result<String, String> {
    LOOKUPS.fetch_add(1, Ordering::SeqCst);
    maybe_crash().await;
    Ok(format!("{city}: sunny"))
}

#[tool(effect = "idempotent-write")]
async fn write_row(row: u32, key: IdempotencyKey) -> Result<String, String> {
    WRITES.lock().unwrap().push(key.to_string());
    maybe_crash().await;
    Ok(format!("row {row} under {key}"))
}

#[tool]
async fn send_email(to: String) -> Result<String, String> {
    EMAILS.fetch_add(1, Ordering::SeqCst);
    maybe_crash().await;
    Ok(format!("sent to {to}"))
}

fn recovery_tools() -> Toolbox {
    Toolbox::new()
        .with(lookup {})
        .and_then(|t| t.with(write_row {}))
        .and_then(|t| t.with(send_email {}))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a5_recovery_treats_each_tool_per_its_declared_effect() {
    let ledger = MemoryLedger::new();
    let calls = [
        ToolCall::new(key("run-6", "read"), "lookup", json!({ "city": "Lisbon" })),
        ToolCall::new(key("run-6", "write"), "write_row", json!({ "row": 1 })),
        ToolCall::new(
            key("run-6", "send"),
            "send_email",
            json!({ "to": "ana@example.com" }),
        ),
    ];

    // Process 1: every tool does its work, then the process dies before any result is
    // recorded.
    CRASHING.store(true, Ordering::SeqCst);
    let first = ToolRunner::new(ledger.clone(), recovery_tools());
    for call in &calls {
        let died = tokio::time::timeout(Duration::from_secs(1), first.call(call.clone())).await;
        assert!(died.is_err(), "the call was meant to hang until the crash");
    }
    drop(first);
    CRASHING.store(false, Ordering::SeqCst);

    // Process 2, after every lease expired: reads and idempotent writes may re-run (opted in),
    // the side effect may not.
    let later = Timestamp::system_now() + Duration::from_secs(3600);
    let second = ToolRunner::new(ledger, recovery_tools()).with_epoch(later);
    let policy = RecoveryPolicy::new()
        .rerun(ToolEffect::Read)
        .unwrap()
        .rerun(ToolEffect::IdempotentWrite)
        .unwrap();
    let report = second.recover("run-6", &policy, |_| false).await.unwrap();
    let action = |id: &str| {
        let call = report.calls.iter().find(|c| c.key.call_id() == id).unwrap();
        (call.effect, &call.action)
    };

    let rerun = |id: &str| match action(id).1 {
        RecoveryAction::Rerun(outcome) => outcome.clone(),
        other => panic!("{id}: {other:?}"),
    };
    assert_eq!(action("read").0, ToolEffect::Read);
    assert_eq!(rerun("read"), Ok(json!("Lisbon: sunny")));
    assert_eq!(LOOKUPS.load(Ordering::SeqCst), 2);

    assert_eq!(action("write").0, ToolEffect::IdempotentWrite);
    assert_eq!(rerun("write"), Ok(json!("row 1 under run-6:write")));
    // The re-run carried the same key: downstream, it is a repeat, not a second row.
    assert_eq!(*WRITES.lock().unwrap(), ["run-6:write", "run-6:write"]);

    assert_eq!(action("send").0, ToolEffect::SideEffect);
    assert!(
        matches!(action("send").1, RecoveryAction::NeedsReconciliation { .. }),
        "{report:?}"
    );
    assert_eq!(
        EMAILS.load(Ordering::SeqCst),
        1,
        "a side effect is never replayed"
    );
}

// X4: the function itself ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn x4_the_function_stays_callable_as_written() {
    assert_eq!(add(2, 3).await, Ok(5));
    let key = IdempotencyKey::new("by-hand").unwrap();
    let saved = save_note("t", Some("b".into()), key).await.unwrap();
    assert_eq!(saved["key"], "by-hand");
}
