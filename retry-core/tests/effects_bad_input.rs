//! A3: limits too large for the clock are "no limit", never a panic after `started` was written.

use std::time::Duration;

use retry_core::effects::{
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
