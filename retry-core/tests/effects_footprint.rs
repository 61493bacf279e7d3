//! Issue item 4: what one large tool argument costs in memory. Alone in its own test binary,
//! so that the process's peak resident set (`VmHWM` in `/proc/self/status`) measures one call.

#![cfg(target_os = "linux")]

use retry_toolkit::effects::{
    CallKey, CallResponse, MemoryLedger, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec,
    Toolbox, tool_fn,
};
use serde_json::Value;

fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Old code: the call's peak grew by about four copies of the argument (255 MiB for 64 MiB;
/// seven when the tool echoes it), from a clone per ledger write, a clone kept for the
/// idempotency comparison, and the escaped text of the string for the hash. Then two more
/// copies: the ledger's and the tool's. Now the ledger shares the runner's (issue 13: 63 MiB
/// for 64 MiB): only the tool's copy, beside the one the caller handed over.
#[tokio::test(flavor = "current_thread")]
async fn a5_a_64_mib_argument_costs_at_most_one_more_copy_of_itself() {
    const SIZE: u64 = 64 << 20;
    let tool = tool_fn(
        ToolSpec::new("store").with_effect(ToolEffect::IdempotentWrite),
        |args: Value, _: ToolContext| async move { Ok::<_, String>(args.as_str().map_or(0, str::len)) },
    );
    let runner = ToolRunner::new(MemoryLedger::new(), Toolbox::new().with(tool).unwrap());
    let args = Value::String("x".repeat(SIZE as usize));
    let before = peak_rss_bytes();
    let call = ToolCall::new(CallKey::new("run", "big").unwrap(), "store", args);
    let outcome = runner.call(call).await.unwrap();
    let after = peak_rss_bytes();
    assert!(
        matches!(&outcome, CallResponse::Done(r) if r.outcome == Ok(Value::from(SIZE))),
        "{outcome:?}"
    );
    let growth = after.saturating_sub(before);
    eprintln!(
        "peak grew by {} MiB for a {} MiB argument",
        growth >> 20,
        SIZE >> 20
    );
    assert!(
        growth <= SIZE * 3 / 2,
        "peak grew by {} MiB for a {} MiB argument",
        growth >> 20,
        SIZE >> 20
    );
}
