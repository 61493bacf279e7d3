//! A3: limits too large for the clock are "no limit", never a panic after `started` was written;
//! arguments nested too deep are refused before anything is recorded.

use std::time::Duration;

use retry_toolkit::effects::{
    CallKey, CallLimits, Ledger, MemoryLedger, ToolCall, ToolContext, ToolEffect, ToolRunner,
    ToolSpec, Toolbox, tool_fn,
};
use serde_json::json;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a3_tool_timeout_of_duration_max_runs_the_tool_once_and_commits() {
    let lookup = tool_fn(
        ToolSpec::new("lookup")
            .with_effect(ToolEffect::SideEffect)
            .with_timeout(Duration::MAX),
        |_: (), _: ToolContext| async { Ok::<_, String>(1) },
    );
    let ledger = MemoryLedger::new();
    let runner = ToolRunner::new(ledger.clone(), Toolbox::new().with(lookup).unwrap());
    let key = CallKey::new("run", "c1").unwrap();
    let call = ToolCall::new(key.clone(), "lookup", json!(null));
    let outcome = tokio::spawn(async move { runner.call(call).await.map(|_| ()) }).await;
    assert!(outcome.is_ok(), "the runner panicked");
    let record = ledger.get(key).await.unwrap().unwrap();
    assert_eq!(record.state.name(), "committed");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a3_call_deadline_of_duration_max_is_no_deadline() {
    let lookup = tool_fn(
        ToolSpec::new("lookup").with_effect(ToolEffect::Read),
        |_: (), _: ToolContext| async { Ok::<_, String>(1) },
    );
    let runner = ToolRunner::new(MemoryLedger::new(), Toolbox::new().with(lookup).unwrap());
    let call = ToolCall::new(CallKey::new("run", "c2").unwrap(), "lookup", json!(null));
    let limits = CallLimits::new().deadline(Duration::MAX);
    let outcome =
        tokio::spawn(async move { runner.call_with(call, limits).await.map(|_| ()) }).await;
    assert!(matches!(outcome, Ok(Ok(()))), "{outcome:?}");
}

// ---------------------------------------------------------------------------------------------
// Issue item 4: arguments nested deeper than the documented limit (128 levels, serde_json's own
// parsing limit) are refused before anything is recorded, and refusing them recurses nowhere.

/// `depth` levels: a scalar inside `depth - 1` arrays (a bare scalar is 1 level).
fn nested(depth: usize) -> serde_json::Value {
    let mut value = json!(0);
    for _ in 1..depth {
        value = serde_json::Value::Array(vec![value]);
    }
    value
}

fn echo_runner(ledger: &MemoryLedger) -> ToolRunner<MemoryLedger> {
    let echo = tool_fn(
        ToolSpec::new("echo").with_effect(ToolEffect::Read),
        |args: serde_json::Value, _: ToolContext| async move { Ok::<_, String>(args) },
    );
    ToolRunner::new(ledger.clone(), Toolbox::new().with(echo).unwrap())
}

/// Old code: the test process aborts with `fatal runtime error: stack overflow` (exit 134).
#[test]
fn a5_arguments_nested_10000_deep_are_refused_without_aborting() {
    on_a_worker_stack(async {
        let ledger = MemoryLedger::new();
        let runner = echo_runner(&ledger);
        let key = CallKey::new("run", "deep").unwrap();
        let call = ToolCall::new(key.clone(), "echo", nested(10_000));
        let outcome = tokio::spawn(async move { runner.call(call).await.map(|_| ()) })
            .await
            .unwrap();
        let error = outcome.unwrap_err().to_string();
        assert!(error.contains("nested more than 128 levels"), "{error}");
        assert!(error.contains("run:deep"), "{error}");
        assert_eq!(ledger.get(key).await.unwrap(), None);
    });
}

/// Runs `test` on a thread with the stack of a tokio worker (2 MiB), on a runtime of its own.
fn on_a_worker_stack(test: impl std::future::Future<Output = ()> + Send + 'static) {
    let worker = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(test);
        })
        .unwrap();
    worker.join().unwrap();
}

/// Issue 26 item 8: a tool whose result is nested 20,000 deep. Old code: `serde_json::to_value`
/// recursed once per level before the depth check, and the process aborted with a stack
/// overflow. Now the call fails with an invalid-output failure that names the limit.
#[test]
fn a5_a_tool_result_nested_20000_deep_fails_the_call_without_aborting() {
    on_a_worker_stack(async {
        let deep = tool_fn(
            ToolSpec::new("deep").with_effect(ToolEffect::Read),
            |_: (), _: ToolContext| async { Ok::<_, String>(nested(20_000)) },
        );
        let ledger = MemoryLedger::new();
        let runner = ToolRunner::new(ledger.clone(), Toolbox::new().with(deep).unwrap());
        let key = CallKey::new("run", "deep-result").unwrap();
        let call = ToolCall::new(key.clone(), "deep", json!(null));
        let outcome = tokio::spawn(async move { runner.call(call).await })
            .await
            .unwrap();
        let said = format!("{outcome:?}");
        assert!(said.contains("nested more than 128 levels"), "{said}");
        let record = ledger.get(key).await.unwrap().unwrap();
        assert!(
            format!("{record:?}").contains("nested more than 128 levels"),
            "{record:?}"
        );
    });
}

#[tokio::test(flavor = "current_thread")]
async fn a5_a_tool_result_128_levels_deep_is_kept_and_129_fails() {
    for (depth, kept) in [(128, true), (129, false)] {
        let deep = tool_fn(
            ToolSpec::new("deep").with_effect(ToolEffect::Read),
            move |_: (), _: ToolContext| async move { Ok::<_, String>(nested(depth)) },
        );
        let runner = ToolRunner::new(MemoryLedger::new(), Toolbox::new().with(deep).unwrap());
        let key = CallKey::new("run", "d").unwrap();
        let outcome = runner.call(ToolCall::new(key, "deep", json!(null))).await;
        let said = format!("{outcome:?}");
        assert_eq!(
            !said.contains("nested more than 128 levels"),
            kept,
            "{depth}: {said}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a5_arguments_128_levels_deep_are_accepted_and_129_refused_with_nothing_recorded() {
    let ledger = MemoryLedger::new();
    let runner = echo_runner(&ledger);

    let at_limit = CallKey::new("run", "128").unwrap();
    let outcome = runner
        .call(ToolCall::new(at_limit.clone(), "echo", nested(128)))
        .await;
    assert!(
        matches!(outcome, Ok(retry_toolkit::effects::CallResponse::Done(_))),
        "{outcome:?}"
    );
    assert_eq!(
        ledger.get(at_limit).await.unwrap().unwrap().state.name(),
        "committed"
    );

    let over = CallKey::new("run", "129").unwrap();
    let error = runner
        .call(ToolCall::new(over.clone(), "echo", nested(129)))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("call `run:129`") && error.contains("nested more than 128 levels"),
        "{error}"
    );
    assert_eq!(ledger.get(over).await.unwrap(), None);
    assert_eq!(ledger.list_run("run".to_owned()).await.unwrap().len(), 1);
}

/// Issue 28: the runner writes a new call through the public `insert_then` (no hidden
/// shortcut), and a ledger skips walking the arguments only for ones `CallArgs::new` found
/// within the limit: arguments it measured too deep are still refused by the ledger's check,
/// and nothing is stored.
#[tokio::test]
async fn a5_arguments_made_too_deep_are_refused_by_the_ledger_too() {
    use retry_toolkit::effects::{CallArgs, CallRecord, LedgerError, RecordProblem, Transition};
    use retry_toolkit::store::Timestamp;
    let ledger = MemoryLedger::new();
    let key = CallKey::new("run", "deep").unwrap();
    let record = CallRecord::prepared(
        key.clone(),
        "echo",
        ToolEffect::Read,
        CallArgs::new(nested(200)),
        false,
        Timestamp::from_millis(1_000),
    );
    let lease_until = Timestamp::from_millis(2_000);
    let refused = ledger
        .insert_then(record, Transition::Start { lease_until })
        .await;
    assert!(
        matches!(
            &refused,
            Err(LedgerError::Invalid(e)) if matches!(e.problem, RecordProblem::TooDeep { .. })
        ),
        "{refused:?}"
    );
    assert_eq!(ledger.get(key).await.unwrap(), None);
}
