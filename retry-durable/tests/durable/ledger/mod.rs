//! The tool-call ledger's contract, written once against `Ledger` and run on every ledger
//! (memory, SQLite, PostgreSQL) by `ledger_suite!(fresh_ledger_expression)`: compare-and-swap
//! on the revision, inserts that return what is stored, arguments that never change, runs in
//! order, and the runner end to end over the ledger, across a restart.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_toolkit::TokioClock;
use retry_toolkit::effects::{
    CallKey, CallRecord, CallResponse, CallState, Insert, Ledger, LedgerError, RecoveryAction,
    RecoveryPolicy, ResultSource, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec, Toolbox,
    Transition, tool_fn,
};
use retry_toolkit::store::{Revision, Timestamp};
use serde_json::{Value, json};

pub const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

pub fn key(run: &str, call: &str) -> CallKey {
    CallKey::new(run, call).unwrap()
}

pub fn prepared(run: &str, call: &str, effect: ToolEffect, args: Value) -> CallRecord {
    CallRecord::prepared(
        key(run, call),
        "t",
        effect,
        args,
        false,
        T0 + Duration::from_secs(60),
    )
}

fn inserted(insert: Insert) -> CallRecord {
    match insert {
        Insert::Inserted(record) => record,
        Insert::Existing(record) => panic!("{} existed", record.key),
    }
}

pub async fn a1_insert_returns_what_is_stored_and_reads_back_equal<L: Ledger>(ledger: L) {
    let record = prepared(
        "run-1",
        "c1",
        ToolEffect::SideEffect,
        json!({"to": "ana", "n": [1, 2]}),
    );
    let stored = inserted(ledger.insert(record.clone()).await.unwrap());
    assert_eq!(stored.revision, Revision::FIRST);
    assert_eq!(
        ledger.get(key("run-1", "c1")).await.unwrap(),
        Some(stored.clone())
    );
    assert_eq!(ledger.get(key("run-1", "nope")).await.unwrap(), None);
    // The same key again: what is stored, unchanged, whatever was handed in.
    let other = prepared("run-1", "c1", ToolEffect::Read, json!({}));
    assert_eq!(
        ledger.insert(other).await.unwrap(),
        Insert::Existing(stored)
    );
}

pub async fn a5_insert_then_stores_the_call_moved_in_one_write_or_finds_it<L: Ledger>(ledger: L) {
    let args = json!({"to": "ana"});
    let record = prepared("run-1", "c1", ToolEffect::SideEffect, args.clone());
    let lease = T0 + Duration::from_secs(90);
    let started = inserted(
        ledger
            .insert_then(record, Transition::Start { lease_until: lease })
            .await
            .unwrap(),
    );
    assert_eq!(started.revision, Revision::from_u64(2));
    assert_eq!(started.state, CallState::Started);
    assert_eq!(started.lease_until, Some(lease));
    assert_eq!(started.attempts, 1);
    assert_eq!(
        ledger.get(key("run-1", "c1")).await.unwrap(),
        Some(started.clone())
    );
    // The next write is a compare-and-swap at the revision the insert left.
    let done = Transition::Commit {
        outcome: Ok(json!("sent")),
    };
    let committed = ledger.transition(started.clone(), done).await.unwrap();
    assert_eq!(committed.revision, Revision::from_u64(3));

    // Taken: the stored call, unchanged; nothing written.
    let again = prepared("run-1", "c1", ToolEffect::SideEffect, args);
    let found = ledger
        .insert_then(again, Transition::Start { lease_until: lease })
        .await
        .unwrap();
    assert_eq!(found, Insert::Existing(committed));

    // A step the state machine refuses writes nothing: a read waits for no approval.
    let refused = ledger
        .insert_then(
            prepared("run-1", "c2", ToolEffect::Read, json!({})),
            Transition::AwaitApproval,
        )
        .await;
    assert!(
        matches!(refused, Err(LedgerError::Illegal(_))),
        "{refused:?}"
    );
    assert_eq!(ledger.get(key("run-1", "c2")).await.unwrap(), None);
    let run: Vec<_> = ledger
        .list_run("run-1".into())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key.call_id().to_owned())
        .collect();
    assert_eq!(run, ["c1"]);
}

pub async fn a1_a_stale_revision_cannot_move_a_call<L: Ledger>(ledger: L) {
    let first = inserted(
        ledger
            .insert(prepared("run-1", "c1", ToolEffect::SideEffect, json!({})))
            .await
            .unwrap(),
    );
    let started = ledger
        .transition(first.clone(), Transition::Start { lease_until: T0 })
        .await
        .unwrap();
    assert_eq!(Some(started.revision), Revision::FIRST.checked_next());
    let stale = ledger
        .transition(first, Transition::Start { lease_until: T0 })
        .await;
    assert!(
        matches!(stale, Err(LedgerError::Conflict { expected, found: Some(found), .. })
            if expected == Revision::FIRST && found == started.revision),
        "{stale:?}"
    );
    assert_eq!(ledger.get(key("run-1", "c1")).await.unwrap(), Some(started));
    let missing = prepared("run-1", "ghost", ToolEffect::Read, json!({}));
    let err = ledger
        .compare_and_swap(Revision::FIRST, missing)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::Conflict { found: None, .. }),
        "{err:?}"
    );
}

pub async fn a1_a_compare_and_swap_cannot_change_the_arguments<L: Ledger>(ledger: L) {
    let first = inserted(
        ledger
            .insert(prepared(
                "run-1",
                "c1",
                ToolEffect::SideEffect,
                json!({"to": "ana"}),
            ))
            .await
            .unwrap(),
    );
    let mut swapped = prepared("run-1", "c1", ToolEffect::SideEffect, json!({"to": "eve"}));
    swapped.revision = first.revision;
    assert!(
        ledger
            .compare_and_swap(first.revision, swapped)
            .await
            .is_err()
    );
    assert_eq!(ledger.get(key("run-1", "c1")).await.unwrap(), Some(first));
}

pub async fn list_run_is_the_run_in_insertion_order<L: Ledger>(ledger: L) {
    for call in ["c3", "c1", "c2"] {
        ledger
            .insert(prepared("run-1", call, ToolEffect::Read, json!({})))
            .await
            .unwrap();
        ledger
            .insert(prepared("run-2", call, ToolEffect::Read, json!({})))
            .await
            .unwrap();
    }
    let run: Vec<String> = ledger
        .list_run("run-1".to_owned())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key.call_id().to_owned())
        .collect();
    assert_eq!(run, ["c3", "c1", "c2"]);
    assert!(
        ledger
            .list_run("run-9".to_owned())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A toolbox with one tool of each effect that counts its executions per call.
pub fn toolbox(executions: &Arc<AtomicU32>) -> Toolbox {
    let tool = |spec: ToolSpec| {
        let executions = Arc::clone(executions);
        tool_fn(spec, move |args: Value, ctx: ToolContext| {
            executions.fetch_add(1, Ordering::SeqCst);
            let call = ctx.call().call_id().to_owned();
            async move { Ok::<_, String>(json!({ "call": call, "args": args })) }
        })
    };
    Toolbox::new()
        .with(tool(ToolSpec::new("lookup").with_effect(ToolEffect::Read)))
        .and_then(|t| {
            t.with(tool(
                ToolSpec::new("send").with_effect(ToolEffect::SideEffect),
            ))
        })
        .unwrap()
}

pub fn runner<L: Ledger>(ledger: L, tools: Toolbox, at: Timestamp) -> ToolRunner<L, TokioClock> {
    ToolRunner::new(ledger, tools)
        .with_clock(TokioClock)
        .with_epoch(at)
}

pub async fn a5_the_runner_over_the_ledger_answers_a_repeat_from_it_after_a_restart<
    L: Ledger + Clone,
>(
    ledger: L,
) {
    let executions = Arc::new(AtomicU32::new(0));
    let first = runner(ledger.clone(), toolbox(&executions), T0);
    let call = ToolCall::new(key("run-1", "s1"), "send", json!({"to": "ana"}));
    let CallResponse::Done(done) = first.call(call.clone()).await.unwrap() else {
        panic!("not done")
    };
    assert_eq!(done.source, ResultSource::ThisCall);
    drop(first);

    // A new process on the same store: the committed result comes from the ledger.
    let restarted = runner(
        ledger.clone(),
        toolbox(&executions),
        T0 + Duration::from_secs(3600),
    );
    let CallResponse::Done(again) = restarted.call(call).await.unwrap() else {
        panic!("not done")
    };
    assert_eq!(
        (again.source, again.outcome),
        (ResultSource::Ledger, done.outcome)
    );
    assert_eq!(
        executions.load(Ordering::SeqCst),
        1,
        "the side effect ran twice"
    );
    let record = ledger.get(key("run-1", "s1")).await.unwrap().unwrap();
    assert!(matches!(record.state, CallState::Committed { .. }));
    assert_eq!(record.attempts, 1);
}

pub async fn a5_a_started_side_effect_recovers_into_reconciliation_never_a_replay<
    L: Ledger + Clone,
>(
    ledger: L,
) {
    // What a process that died inside the tool leaves: the call recorded and started.
    let record = inserted(
        ledger
            .insert(prepared("run-1", "s1", ToolEffect::SideEffect, json!({})))
            .await
            .unwrap(),
    );
    let mut record = record;
    record.tool = "send".into();
    ledger
        .transition(
            record,
            Transition::Start {
                lease_until: T0 + Duration::from_secs(30),
            },
        )
        .await
        .ok();
    let executions = Arc::new(AtomicU32::new(0));
    let restarted = runner(
        ledger.clone(),
        toolbox(&executions),
        T0 + Duration::from_secs(3600),
    );
    let report = restarted
        .recover("run-1", &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    let action = &report
        .calls
        .iter()
        .find(|c| c.key == key("run-1", "s1"))
        .unwrap()
        .action;
    assert!(action.needs_attention(), "{action:?}");
    assert!(!matches!(action, RecoveryAction::Rerun { .. }));
    assert_eq!(
        executions.load(Ordering::SeqCst),
        0,
        "a started side effect was replayed"
    );
    let state = ledger.get(key("run-1", "s1")).await.unwrap().unwrap().state;
    assert!(
        matches!(state, CallState::NeedsReconciliation { .. }),
        "{state:?}"
    );
}

/// One `#[tokio::test]` per case on a fresh ledger from `$fresh` (`(ledger, guard)`).
#[macro_export]
macro_rules! ledger_suite {
    ($fresh:expr) => {
        $crate::ledger_suite!(@cases $fresh;
            a1_insert_returns_what_is_stored_and_reads_back_equal,
            a5_insert_then_stores_the_call_moved_in_one_write_or_finds_it,
            a1_a_stale_revision_cannot_move_a_call,
            a1_a_compare_and_swap_cannot_change_the_arguments,
            list_run_is_the_run_in_insertion_order,
            a5_the_runner_over_the_ledger_answers_a_repeat_from_it_after_a_restart,
            a5_a_started_side_effect_recovers_into_reconciliation_never_a_replay,
        );
    };
    (@cases $fresh:expr; $($case:ident),* $(,)?) => {
        $(
            // Real time (nothing here waits): paused time would fire the PostgreSQL pool's
            // connect timeout at once.
            #[tokio::test]
            async fn $case() {
                let (ledger, _guard) = $fresh;
                ledger::$case(ledger).await;
            }
        )*
    };
}
