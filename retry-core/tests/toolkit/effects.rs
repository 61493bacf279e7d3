//! Tool effects (SPEC A2), idempotency keys (A4), the compare-and-swap ledger (A1) and the
//! runner's single call (A3).

use crate::effects_support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effects_support::{LOOKUP, PAY, RUN, SEND, T0, UPSERT, World, call, key, runner, toolbox};
use retry_toolkit::effects::{
    ArgsHash, CallArgs, CallKey, CallLimits, CallRecord, CallResponse, CallState, FailureKind,
    Insert, KeyError, Ledger, LedgerError, MemoryLedger, ReconcileReason, ResultSource, Review,
    RunnerError, Tool, ToolCall, ToolContext, ToolEffect, ToolFailure, ToolOutcome, ToolSpec,
    Toolbox, ToolboxError, Transition, tool_fn,
};
use retry_toolkit::store::Revision;
use serde_json::{Value, json};

fn crash_free_toolbox(world: &World) -> Toolbox {
    toolbox(world, &effects_support::Crash::never())
}

fn done(outcome: Result<CallResponse, RunnerError>) -> ToolOutcome {
    match outcome {
        Ok(CallResponse::Done(result)) => result.outcome,
        other => panic!("expected a result, got {other:?}"),
    }
}

fn failure(outcome: &ToolOutcome) -> FailureKind {
    match outcome {
        Err(failure) => failure.kind,
        Ok(value) => panic!("expected a failure, got {value}"),
    }
}

// ---------------------------------------------------------------------------------------------
// A2: the effect declaration.

#[test]
fn a2_an_undeclared_effect_is_a_side_effect() {
    assert_eq!(ToolEffect::default(), ToolEffect::SideEffect);
    assert_eq!(ToolSpec::new("anything").effect(), ToolEffect::SideEffect);
    let record: CallRecord = serde_json::from_value(json!({
        "key": {"run_id": "r", "call_id": "c"}, "tool": "t", "effect": "side-effect", "args": null,
        "args_hash": ArgsHash::of(&Value::Null), "state": {"state": "prepared"}, "revision": 1,
        "attempts": 0, "requires_approval": false, "approved": false, "lease_until": null
    }))
    .unwrap();
    assert_eq!(record.effect, ToolEffect::SideEffect);
}

/// A1 defence in depth: a side-effect tool whose function retries on its own (`#[retry]` under
/// a `#[tool]` that the compile-time check missed, or a hand-written tool that says so) is
/// refused when it is registered, with an error rather than a panic; a read or an idempotent
/// write that retries is registered as usual.
#[test]
fn a1_a_side_effect_tool_that_retries_is_not_registered() {
    let tool =
        |spec: ToolSpec| tool_fn(spec, |_: (), _: ToolContext| async { Ok::<_, String>(()) });
    assert!(!ToolSpec::new("send").retries_internally());
    let retried = ToolSpec::new("send").with_internal_retries();
    assert!(retried.retries_internally());
    let mut tools = Toolbox::new();
    let refused = tools.register(tool(retried)).unwrap_err();
    assert_eq!(refused, ToolboxError::SideEffectRetries("send"));
    assert!(
        refused
            .to_string()
            .starts_with("the tool `send` is a `side-effect` tool that retries on its own")
    );
    assert_eq!(tools.names().count(), 0);
    for effect in [ToolEffect::Read, ToolEffect::IdempotentWrite] {
        let spec = ToolSpec::new(effect.name())
            .with_effect(effect)
            .with_internal_retries();
        tools.register(tool(spec)).unwrap();
    }
    assert_eq!(tools.names().count(), 2);
}

#[test]
fn a2_effect_names_are_the_declared_strings() {
    for (effect, name) in [
        (ToolEffect::Read, "read"),
        (ToolEffect::IdempotentWrite, "idempotent-write"),
        (ToolEffect::SideEffect, "side-effect"),
    ] {
        assert_eq!(effect.to_string(), name);
        assert_eq!(name.parse::<ToolEffect>(), Ok(effect));
        assert_eq!(serde_json::to_value(effect).unwrap(), json!(name));
        assert_eq!(
            serde_json::from_value::<ToolEffect>(json!(name)).unwrap(),
            effect
        );
    }
    let err = "idempotent_write".parse::<ToolEffect>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown tool effect `idempotent_write`: expected one of `read`, `idempotent-write`, `side-effect`"
    );
    assert!(serde_json::from_value::<ToolEffect>(json!("write")).is_err());
}

// ---------------------------------------------------------------------------------------------
// A4: stable idempotency keys.

#[tokio::test(start_paused = true)]
async fn a4_an_idempotent_write_receives_the_stable_key_run_id_call_id() {
    let world = World::default();
    // Two runners (two processes) submitting the same call hand the tool the same key.
    for _ in 0..2 {
        let runner = runner(MemoryLedger::new(), crash_free_toolbox(&world), T0);
        done(runner.call(call("c7", UPSERT, json!({"note": 1}))).await).unwrap();
    }
    assert_eq!(world.keys_seen(), ["run-1:c7", "run-1:c7"]);
    assert_eq!(key("c7").idempotency_key().as_str(), "run-1:c7");
}

#[tokio::test(start_paused = true)]
async fn a4_the_same_key_with_other_arguments_is_refused() {
    let world = World::default();
    let runner = runner(MemoryLedger::new(), crash_free_toolbox(&world), T0);
    done(
        runner
            .call(call("c1", UPSERT, json!({"a": 1, "b": [1, 2]})))
            .await,
    )
    .unwrap();

    // Same arguments, members in another order: the same call, answered from the ledger.
    let same = runner
        .call(call("c1", UPSERT, json!({"b": [1, 2], "a": 1})))
        .await
        .unwrap();
    assert_eq!(same.result().map(|r| r.source), Some(ResultSource::Ledger));

    let other = runner
        .call(call("c1", UPSERT, json!({"a": 2, "b": [1, 2]})))
        .await;
    let Err(RunnerError::IdempotencyConflict(conflict)) = other else {
        panic!("{other:?}")
    };
    assert_eq!(conflict.key.as_str(), "run-1:c1");
    assert_eq!(conflict.stored, ArgsHash::of(&json!({"a": 1, "b": [1, 2]})));
    assert_eq!(conflict.given, ArgsHash::of(&json!({"a": 2, "b": [1, 2]})));
    assert!(
        conflict.to_string().contains("cannot be reused"),
        "{conflict}"
    );
    assert_eq!(world.executions("upsert", "c1"), 1);
}

#[tokio::test(start_paused = true)]
async fn a4_the_same_key_for_another_tool_is_refused() {
    let world = World::default();
    let runner = runner(MemoryLedger::new(), crash_free_toolbox(&world), T0);
    done(runner.call(call("c1", LOOKUP, json!(1))).await).unwrap();
    let other = runner.call(call("c1", SEND, json!(1))).await;
    assert!(
        matches!(other, Err(RunnerError::IdempotencyConflict(c)) if c.stored_tool == "lookup" && c.tool == "send")
    );
    assert_eq!(world.total_executions("send"), 0);
}

#[test]
fn a4_ids_that_would_make_an_empty_or_ambiguous_key_are_refused() {
    assert_eq!(CallKey::new("", "c"), Err(KeyError::EmptyRunId));
    assert_eq!(CallKey::new("r", ""), Err(KeyError::EmptyCallId));
    // "a:b" + "c" and "a" + "b:c" would both be "a:b:c".
    assert_eq!(
        CallKey::new("a:b", "c"),
        Err(KeyError::RunIdContainsColon("a:b".into()))
    );
    assert_eq!(
        CallKey::new("a", "b:c").map(|k| k.idempotency_key().to_string()),
        Ok("a:b:c".into())
    );
    assert!(serde_json::from_value::<CallKey>(json!({"run_id": "", "call_id": "c"})).is_err());
    assert!(serde_json::from_value::<retry_toolkit::effects::IdempotencyKey>(json!(" ")).is_err());
}

// ---------------------------------------------------------------------------------------------
// A1: every change is a compare-and-swap; committed is final.

fn prepared(id: &str, effect: ToolEffect) -> CallRecord {
    CallRecord::prepared(
        key(id),
        "t",
        effect,
        json!({}),
        false,
        T0 + Duration::from_secs(60),
    )
}

#[tokio::test]
async fn a1_a_stale_revision_cannot_move_a_call() {
    let ledger = MemoryLedger::new();
    let Insert::Inserted(first) = ledger
        .insert(prepared("c1", ToolEffect::SideEffect))
        .await
        .unwrap()
    else {
        panic!("inserted twice")
    };
    assert_eq!(first.revision, Revision::FIRST);
    let started = ledger
        .transition(first.clone(), Transition::Start { lease_until: T0 })
        .await
        .unwrap();
    assert_eq!(Some(started.revision), Revision::FIRST.checked_next());

    // A second writer holding the old revision loses, and nothing is written.
    let stale = ledger
        .transition(first, Transition::Start { lease_until: T0 })
        .await;
    assert!(matches!(
        stale,
        Err(LedgerError::Conflict { expected, found: Some(found), .. }) if expected == Revision::FIRST && found == started.revision
    ));
    assert_eq!(ledger.get(key("c1")).await.unwrap(), Some(started.clone()));

    // Inserting the same key again returns what is stored, unchanged.
    assert_eq!(
        ledger
            .insert(prepared("c1", ToolEffect::Read))
            .await
            .unwrap(),
        Insert::Existing(started)
    );
}

#[test]
fn a1_the_state_machine_refuses_overwrites_and_blind_replays() {
    let lease = Transition::Start { lease_until: T0 };
    let commit_ok = Transition::Commit {
        outcome: Ok(json!(1)),
    };

    // A committed result is final.
    let committed = prepared("c", ToolEffect::Read)
        .apply(lease.clone())
        .unwrap()
        .apply(commit_ok.clone())
        .unwrap();
    for transition in [
        lease.clone(),
        commit_ok.clone(),
        Transition::Reconcile {
            reason: ReconcileReason::Cancelled,
        },
    ] {
        let err = committed.apply(transition).unwrap_err();
        assert_eq!(err.why, "a committed result is final");
    }

    // A started side effect is never started again; a started read or idempotent write may be.
    let started = prepared("c", ToolEffect::SideEffect)
        .apply(lease.clone())
        .unwrap();
    let err = started.apply(lease.clone()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "call `run-1:c` is `started`: `start` is not allowed (a started side effect is never run again automatically)"
    );
    for effect in [ToolEffect::Read, ToolEffect::IdempotentWrite] {
        let again = prepared("c", effect)
            .apply(lease.clone())
            .unwrap()
            .apply(lease.clone())
            .unwrap();
        assert_eq!(again.attempts, 2);
    }

    // A tool that never started has no output; an approval cannot be skipped.
    assert!(prepared("c", ToolEffect::Read).apply(commit_ok).is_err());
    let mut needs_approval = prepared("c", ToolEffect::Read);
    needs_approval.requires_approval = true;
    assert!(needs_approval.apply(lease.clone()).is_err());
    let waiting = needs_approval.apply(Transition::AwaitApproval).unwrap();
    let approved = waiting
        .apply(Transition::Approve { lease_until: T0 })
        .unwrap();
    assert_eq!(
        approved.apply(lease).map(|r| r.state),
        Ok(CallState::Started)
    );
}

#[tokio::test(start_paused = true)]
async fn a1_two_runners_racing_for_one_call_run_it_once() {
    let world = World::default();
    let ledger = MemoryLedger::new();
    let a = runner(ledger.clone(), crash_free_toolbox(&world), T0);
    let b = runner(ledger.clone(), crash_free_toolbox(&world), T0);
    let c = call("c1", SEND, json!("ana"));
    let (ra, rb) = tokio::join!(a.call(c.clone()), b.call(c));
    let outcomes = [ra, rb];
    assert_eq!(world.executions("send", "c1"), 1);
    // One ran it; the other either found the result or was told it is in progress.
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Ok(CallResponse::Done(r)) if r.source == ResultSource::ThisCall))
    );
    assert!(outcomes.iter().all(|o| matches!(
        o,
        Ok(CallResponse::Done(_)) | Err(RunnerError::InProgress { .. })
    )));
}

#[tokio::test(start_paused = true)]
async fn a1_records_round_trip_through_serde_for_a_durable_ledger() {
    let world = World::default();
    let ledger = MemoryLedger::new();
    let runner = runner(ledger.clone(), crash_free_toolbox(&world), T0);
    done(runner.call(call("c1", UPSERT, json!({"x": 1}))).await).unwrap();
    let record = ledger.get(key("c1")).await.unwrap().unwrap();
    let text = serde_json::to_string(&record).unwrap();
    assert!(text.contains(r#""state":"committed""#), "{text}");
    assert!(text.contains(r#""args_hash":"sha256:"#), "{text}");
    assert_eq!(serde_json::from_str::<CallRecord>(&text).unwrap(), record);
}

// ---------------------------------------------------------------------------------------------
// A3: the runner runs a call once and enforces its limits itself.

/// Fails with an error it diagnoses as retryable, and counts its calls.
struct Flaky(Arc<AtomicU32>);

impl Tool for Flaky {
    type Args = Value;
    type Output = Value;
    type Error = String;

    fn spec(&self) -> ToolSpec {
        ToolSpec::new("flaky").with_effect(ToolEffect::Read)
    }

    fn retryable(&self, _: &String) -> bool {
        true
    }

    async fn call(&self, _: Value, _: ToolContext) -> Result<Value, String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err("503 from upstream".into())
    }
}

#[tokio::test(start_paused = true)]
async fn a3_the_runner_never_retries() {
    let calls = Arc::new(AtomicU32::new(0));
    let runner = runner(
        MemoryLedger::new(),
        Toolbox::new().with(Flaky(calls.clone())).unwrap(),
        T0,
    );
    let c = ToolCall::new(key("c1"), "flaky", json!({}));
    let outcome = done(runner.call(c.clone()).await);
    assert_eq!(
        outcome,
        Err(ToolFailure::new(FailureKind::Tool, "503 from upstream").retryable(true))
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a retryable error is a result, not a retry"
    );
    // Submitting the call again returns the stored failure; the tool is not called.
    let again = runner.call(c).await.unwrap();
    assert_eq!(again.result().map(|r| r.source), Some(ResultSource::Ledger));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[derive(serde::Deserialize)]
struct Transfer {
    amount: i64,
}

/// Validates input and output; counts its calls.
struct Bank(Arc<AtomicU32>);

impl Tool for Bank {
    type Args = Transfer;
    type Output = i64;
    type Error = String;

    fn spec(&self) -> ToolSpec {
        ToolSpec::new("transfer")
    }

    fn validate(&self, t: &Transfer) -> Result<(), String> {
        if t.amount > 0 {
            Ok(())
        } else {
            Err("`amount` must be positive".into())
        }
    }

    fn validate_output(&self, balance: &i64) -> Result<(), String> {
        if *balance >= 0 {
            Ok(())
        } else {
            Err(format!("balance {balance} is negative"))
        }
    }

    async fn call(&self, t: Transfer, _: ToolContext) -> Result<i64, String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(100 - t.amount)
    }
}

#[tokio::test(start_paused = true)]
async fn a3_invalid_input_is_refused_before_the_tool_runs_invalid_output_after() {
    let calls = Arc::new(AtomicU32::new(0));
    let ledger = MemoryLedger::new();
    let runner = runner(
        ledger.clone(),
        Toolbox::new().with(Bank(calls.clone())).unwrap(),
        T0,
    );
    let transfer = |id: &str, args| ToolCall::new(key(id), "transfer", args);

    let not_parsed = done(runner.call(transfer("c1", json!({"amount": "ten"}))).await);
    assert_eq!(failure(&not_parsed), FailureKind::InvalidInput);
    let refused = done(runner.call(transfer("c2", json!({"amount": -5}))).await);
    assert_eq!(refused.unwrap_err().message, "`amount` must be positive");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let record = ledger.get(key("c2")).await.unwrap().unwrap();
    assert_eq!(record.attempts, 0, "never started");

    let overdrawn = done(runner.call(transfer("c3", json!({"amount": 150}))).await);
    assert_eq!(failure(&overdrawn), FailureKind::InvalidOutput);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the tool ran; what it did stays done"
    );
    assert_eq!(
        done(runner.call(transfer("c4", json!({"amount": 30}))).await),
        Ok(json!(70))
    );
}

/// Issue 13: a call's arguments are parsed once, before its start is recorded, and the tool
/// runs on that parse (they were parsed again to run the tool).
#[tokio::test(start_paused = true)]
async fn a3_arguments_are_parsed_once_per_call() {
    static PARSED: AtomicU32 = AtomicU32::new(0);
    struct Counted(u64);
    impl<'de> serde::Deserialize<'de> for Counted {
        fn deserialize<D: serde::Deserializer<'de>>(from: D) -> Result<Self, D::Error> {
            PARSED.fetch_add(1, Ordering::SeqCst);
            u64::deserialize(from).map(Counted)
        }
    }
    let count = tool_fn(
        ToolSpec::new("count").with_effect(ToolEffect::Read),
        |n: Counted, _: ToolContext| async move { Ok::<_, String>(n.0) },
    );
    let runner = runner(MemoryLedger::new(), Toolbox::new().with(count).unwrap(), T0);
    let outcome = runner
        .call(ToolCall::new(key("c1"), "count", json!(7)))
        .await;
    assert_eq!(done(outcome), Ok(json!(7)));
    assert_eq!(PARSED.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a3_permission_is_checked_before_the_tool_runs() {
    let world = World::default();
    let runner = runner(MemoryLedger::new(), crash_free_toolbox(&world), T0).with_permission(
        |_: &CallKey, tool: &ToolSpec, args: &Value| match (tool.effect(), args["to"].as_str()) {
            (ToolEffect::SideEffect, Some(to)) if !to.ends_with("@example.com") => {
                Err(format!("may not write to `{to}`"))
            }
            _ => Ok(()),
        },
    );
    let denied = done(
        runner
            .call(call("c1", SEND, json!({"to": "boss@elsewhere.org"})))
            .await,
    );
    assert_eq!(
        denied,
        Err(ToolFailure::new(
            FailureKind::PermissionDenied,
            "may not write to `boss@elsewhere.org`"
        ))
    );
    assert_eq!(world.executions("send", "c1"), 0);
    done(
        runner
            .call(call("c2", SEND, json!({"to": "ana@example.com"})))
            .await,
    )
    .unwrap();
    assert_eq!(world.executions("send", "c2"), 1);
}

/// A tool of `effect` that takes 10 s; counts how many runs finished.
fn slow(effect: ToolEffect, finished: Arc<AtomicU32>) -> impl Tool {
    tool_fn(
        ToolSpec::new("slow").with_effect(effect),
        move |_: Value, _: ToolContext| {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(json!("late"))
            }
        },
    )
}

#[tokio::test(start_paused = true)]
async fn a3_a_deadline_ends_a_read_with_a_failure_and_a_write_in_reconciliation() {
    for effect in ToolEffect::ALL {
        let finished = Arc::new(AtomicU32::new(0));
        let ledger = MemoryLedger::new();
        let runner = runner(
            ledger.clone(),
            Toolbox::new().with(slow(effect, finished.clone())).unwrap(),
            T0,
        );
        let c = ToolCall::new(key("c1"), "slow", json!({}));
        let began = tokio::time::Instant::now();
        let outcome = runner
            .call_with(
                c.clone(),
                CallLimits::new().deadline(Duration::from_secs(2)),
            )
            .await;
        assert_eq!(
            began.elapsed(),
            Duration::from_secs(2),
            "{effect}: stopped at the deadline"
        );
        assert_eq!(finished.load(Ordering::SeqCst), 0);
        let state = ledger.get(key("c1")).await.unwrap().unwrap().state;
        if effect == ToolEffect::Read {
            assert_eq!(failure(&done(outcome)), FailureKind::DeadlineExceeded);
            assert!(matches!(state, CallState::Committed { .. }));
        } else {
            let reason = ReconcileReason::DeadlineExceeded;
            assert!(
                matches!(outcome, Err(RunnerError::NeedsReconciliation { reason: r, .. }) if r == reason),
                "{effect}"
            );
            assert_eq!(state, CallState::NeedsReconciliation { reason });
            // Not run again on re-submission.
            assert!(matches!(
                runner.call(c).await,
                Err(RunnerError::NeedsReconciliation { .. })
            ));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a3_the_tools_own_timeout_bounds_every_call() {
    let finished = Arc::new(AtomicU32::new(0));
    let timed = tool_fn(
        ToolSpec::new("timed")
            .with_effect(ToolEffect::Read)
            .with_timeout(Duration::from_millis(500)),
        move |_: Value, ctx: ToolContext| {
            let finished = finished.clone();
            async move {
                assert!(ctx.deadline().is_some());
                tokio::time::sleep(Duration::from_secs(1)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(0)
            }
        },
    );
    let runner = runner(MemoryLedger::new(), Toolbox::new().with(timed).unwrap(), T0);
    let began = tokio::time::Instant::now();
    // The call's own deadline is longer: the tool's timeout wins.
    let limits = CallLimits::new().deadline(Duration::from_secs(60));
    let outcome = done(
        runner
            .call_with(ToolCall::new(key("c1"), "timed", json!(null)), limits)
            .await,
    );
    assert_eq!(failure(&outcome), FailureKind::DeadlineExceeded);
    assert_eq!(began.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a3_cancellation_stops_the_call_at_once() {
    for effect in ToolEffect::ALL {
        let finished = Arc::new(AtomicU32::new(0));
        let runner = runner(
            MemoryLedger::new(),
            Toolbox::new().with(slow(effect, finished.clone())).unwrap(),
            T0,
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let limits = CallLimits::new().cancel_on(async move {
            let _ = rx.await;
        });
        let began = tokio::time::Instant::now();
        let (outcome, ()) = tokio::join!(
            runner.call_with(ToolCall::new(key("c1"), "slow", json!({})), limits),
            async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                let _ = tx.send(());
            }
        );
        assert_eq!(began.elapsed(), Duration::from_secs(3), "{effect}");
        assert_eq!(finished.load(Ordering::SeqCst), 0);
        match effect {
            ToolEffect::Read => assert_eq!(failure(&done(outcome)), FailureKind::Cancelled),
            _ => assert!(matches!(
                outcome,
                Err(RunnerError::NeedsReconciliation {
                    reason: ReconcileReason::Cancelled,
                    ..
                })
            )),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a3_a_call_cancelled_before_it_started_never_runs() {
    let world = World::default();
    let runner = runner(MemoryLedger::new(), crash_free_toolbox(&world), T0);
    let limits = CallLimits::new().cancel_on(std::future::ready(()));
    let outcome = done(
        runner
            .call_with(call("c1", SEND, json!("ana")), limits)
            .await,
    );
    assert_eq!(failure(&outcome), FailureKind::Cancelled);
    assert_eq!(world.executions("send", "c1"), 0);
}

#[tokio::test(start_paused = true)]
async fn a3_errors_are_typed_and_say_what_happened() {
    let world = World::default();
    let runner = runner(MemoryLedger::new(), crash_free_toolbox(&world), T0);
    let unknown = runner
        .call(ToolCall::new(key("c1"), "nope", json!(null)))
        .await
        .unwrap_err();
    assert!(matches!(unknown, RunnerError::UnknownTool { ref name } if name == "nope"));
    assert_eq!(unknown.to_string(), "no tool named `nope` is registered");
    assert!(matches!(
        runner.review(key("c2"), Review::Approve).await,
        Err(RunnerError::UnknownCall { .. })
    ));
    done(runner.call(call("c3", LOOKUP, json!(1))).await).unwrap();
    let wrong = runner.review(key("c3"), Review::Approve).await.unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "call `run-1:c3` is `committed`, not `awaiting_approval`"
    );
    assert!(matches!(
        runner.call(call("c4", PAY, json!(1))).await,
        Ok(CallResponse::AwaitingApproval(_))
    ));
    assert_eq!(world.executions("pay", "c4"), 0);
}

// ---------------------------------------------------------------------------------------------
// A5: `started` is persisted before the tool runs.

#[tokio::test(start_paused = true)]
async fn a5_started_is_persisted_before_the_tool_runs() {
    let ledger = MemoryLedger::new();
    let seen = Arc::new(Mutex::new(None));
    let probe = {
        let (ledger, seen) = (ledger.clone(), seen.clone());
        tool_fn(ToolSpec::new("probe"), move |_: Value, ctx: ToolContext| {
            let (ledger, seen) = (ledger.clone(), seen.clone());
            async move {
                let record = ledger
                    .get(ctx.call().clone())
                    .await
                    .map_err(|e| e.to_string())?;
                *seen.lock().unwrap() =
                    record.map(|r| (r.state, r.attempts, r.lease_until.is_some()));
                Ok::<_, String>(ctx.attempt())
            }
        })
    };
    let runner = runner(ledger.clone(), Toolbox::new().with(probe).unwrap(), T0);
    let outcome = done(
        runner
            .call(ToolCall::new(key("c1"), "probe", json!(null)))
            .await,
    );
    assert_eq!(outcome, Ok(json!(1)));
    assert_eq!(*seen.lock().unwrap(), Some((CallState::Started, 1, true)));
    let record = ledger.get(key("c1")).await.unwrap().unwrap();
    assert!(matches!(record.state, CallState::Committed { .. }));
    assert_eq!(record.lease_until, None, "a finished call holds no lease");
    assert_eq!(ledger.list_run(RUN.to_owned()).await.unwrap().len(), 1);
    assert!(ledger.list_run("bad:run".to_owned()).await.is_err());
}

// ---------------------------------------------------------------------------------------------
// Issue item 10: records read back are checked against their invariants.

/// A committed record as a durable ledger would store it, as JSON.
fn committed_json() -> Value {
    let args = json!({"to": "ana"});
    json!({
        "key": {"run_id": "run-1", "call_id": "c9"}, "tool": "send", "effect": "side-effect",
        "args": args, "args_hash": ArgsHash::of(&args),
        "state": {"state": "committed", "outcome": {"Ok": 1}}, "revision": 3,
        "attempts": 1, "requires_approval": false, "approved": false, "lease_until": null
    })
}

#[test]
fn a1_records_read_back_with_a_wrong_hash_a_lease_on_a_settled_call_or_an_edge_revision_are_refused()
 {
    assert!(serde_json::from_value::<CallRecord>(committed_json()).is_ok());
    type Tamper = fn(&mut Value);
    let tampered: [(&str, Tamper); 6] = [
        ("argument hash", |r| r["args"] = json!({"to": "bob"})),
        ("lease", |r| r["lease_until"] = json!(1_700_000_000_000u64)),
        ("revision 0", |r| r["revision"] = json!(0)),
        ("revision 18446744073709551615", |r| {
            r["revision"] = json!(u64::MAX)
        }),
        ("approved", |r| r["approved"] = json!(true)),
        ("never started", |r| r["attempts"] = json!(0)),
    ];
    for (what, tamper) in tampered {
        let mut record = committed_json();
        tamper(&mut record);
        let error = serde_json::from_value::<CallRecord>(record)
            .expect_err(what)
            .to_string();
        assert!(error.contains("run-1:c9"), "{what}: {error}");
        assert!(error.contains(what), "{what}: {error}");
    }
}

#[test]
fn a4_argument_hashes_parse_in_canonical_lowercase_form_only() {
    let hash = ArgsHash::of(&json!({"a": 1}));
    let text = hash.to_string();
    assert_eq!(ArgsHash::try_from(text.clone()), Ok(hash));
    let hex = &text["sha256:".len()..];
    assert!(hex.bytes().any(|b| b.is_ascii_alphabetic()), "{text}");
    assert!(ArgsHash::try_from(format!("sha256:{}", hex.to_uppercase())).is_err());
    assert!(ArgsHash::try_from(format!("sha256:+{}", &hex[1..])).is_err());
    assert!(ArgsHash::try_from(format!("sha256:{}+{}", &hex[..2], &hex[3..])).is_err());
    assert!(ArgsHash::try_from(format!("SHA256:{hex}")).is_err());
}

#[test]
fn a1_a_revision_never_saturates() {
    let mut record = prepared("c1", ToolEffect::Read);
    record.revision = Revision::from_u64(u64::MAX - 1);
    let refused = record.apply(Transition::Start { lease_until: T0 });
    assert!(refused.is_err(), "{refused:?}");
}

/// Hands out records whose lease was tampered with, as a corrupted store would.
struct LeaseOnEverything(MemoryLedger);

impl Ledger for LeaseOnEverything {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        self.0.insert(record).await
    }
    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        let record = self.0.get(key).await?;
        Ok(record.map(|mut r| {
            r.lease_until = Some(T0);
            r
        }))
    }
    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        self.0.compare_and_swap(expected, next).await
    }
    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.0.list_run(run_id).await
    }
}

#[tokio::test(start_paused = true)]
async fn a1_the_runner_refuses_an_invalid_record_its_ledger_returns() {
    let world = World::default();
    let ledger = LeaseOnEverything(MemoryLedger::new());
    let runner = runner(ledger, crash_free_toolbox(&world), T0);
    assert!(matches!(
        runner.call(call("p1", PAY, json!(1))).await,
        Ok(CallResponse::AwaitingApproval(_))
    ));
    let refused = runner.review(key("p1"), Review::Approve).await;
    let error = format!(
        "{:?} / {}",
        refused,
        refused
            .as_ref()
            .map_or_else(|e| e.to_string(), |_| String::new())
    );
    assert!(matches!(refused, Err(RunnerError::Ledger(_))), "{error}");
    assert!(
        error.contains("run-1:p1") && error.contains("lease"),
        "{error}"
    );
    assert_eq!(world.executions("pay", "p1"), 0);
}

#[tokio::test]
async fn a1_the_memory_ledger_lets_no_invalid_record_in() {
    let ledger = MemoryLedger::new();
    let mut tampered = prepared("c1", ToolEffect::Read);
    tampered.args = CallArgs::from_stored(json!({"other": true}), tampered.args.hash());
    let refused = ledger.insert(tampered).await;
    assert!(
        matches!(refused, Err(LedgerError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(ledger.get(key("c1")).await.unwrap(), None);

    let Insert::Inserted(first) = ledger
        .insert(prepared("c1", ToolEffect::Read))
        .await
        .unwrap()
    else {
        panic!("inserted twice")
    };
    let mut changed = first.apply(Transition::Start { lease_until: T0 }).unwrap();
    changed.args = CallArgs::new(json!({"other": true}));
    let refused = ledger.compare_and_swap(first.revision, changed).await;
    let error = refused
        .as_ref()
        .map_or_else(|e| e.to_string(), |_| String::new());
    assert!(
        error.contains("run-1:c1") && error.contains("arguments differ"),
        "{error}"
    );
    let rejected = Err(ToolFailure::new(FailureKind::Rejected, "no"));
    let mut leased = first
        .apply(Transition::Commit { outcome: rejected })
        .unwrap();
    leased.lease_until = Some(T0);
    let refused = ledger.compare_and_swap(first.revision, leased).await;
    assert!(
        matches!(refused, Err(LedgerError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(ledger.get(key("c1")).await.unwrap(), Some(first));
}
// ---------------------------------------------------------------------------------------------
// Issue item 11: losing the race to approve a call reports the winner's outcome.

/// Lets `n` readers of a call read it before any of them writes: every approver sees the call
/// awaiting approval, then they race to approve it.
struct ReadTogether {
    inner: MemoryLedger,
    barrier: tokio::sync::Barrier,
}

impl Ledger for ReadTogether {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        self.inner.insert(record).await
    }
    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        let record = self.inner.get(key).await;
        if matches!(&record, Ok(Some(r)) if r.state == CallState::AwaitingApproval) {
            self.barrier.wait().await;
        }
        record
    }
    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        self.inner.compare_and_swap(expected, next).await
    }
    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.inner.list_run(run_id).await
    }
}

#[tokio::test(start_paused = true)]
async fn a5_approvers_who_lose_the_race_get_the_winners_outcome_not_a_conflict() {
    const APPROVERS: usize = 8;
    let world = World::default();
    let ledger = ReadTogether {
        inner: MemoryLedger::new(),
        barrier: tokio::sync::Barrier::new(APPROVERS),
    };
    let runner = runner(ledger, crash_free_toolbox(&world), T0);
    assert!(matches!(
        runner.call(call("p1", PAY, json!(1))).await,
        Ok(CallResponse::AwaitingApproval(_))
    ));
    let decisions = (0..APPROVERS).map(|_| runner.review(key("p1"), Review::Approve));
    let mut outcomes = Vec::new();
    for outcome in futures_join_all(decisions).await {
        match outcome {
            Ok(CallResponse::Done(result)) => outcomes.push(result),
            other => panic!("an approver got {other:?}"),
        }
    }
    assert_eq!(world.executions("pay", "p1"), 1);
    let winners = outcomes
        .iter()
        .filter(|r| r.source == ResultSource::ThisCall)
        .count();
    assert_eq!(winners, 1);
    assert!(outcomes.iter().all(|r| r.outcome == outcomes[0].outcome));
}

/// Polls every future to completion on this task, in order (a minimal `join_all`).
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.map(Box::pin).map(Some).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(out) => {
                        *output = Some(out);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

// ---------------------------------------------------------------------------------------------
// A5: a new call is recorded with its first step, in one write.

/// Writes to memory and notes each write by its name.
#[derive(Default)]
struct Writes {
    inner: MemoryLedger,
    log: Mutex<Vec<String>>,
}

impl Writes {
    fn note(&self, what: String) {
        self.log.lock().unwrap().push(what);
    }

    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Ledger for Writes {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        self.note("insert".into());
        self.inner.insert(record).await
    }
    async fn insert_then(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Insert, LedgerError> {
        self.note(format!("insert+{}", transition.name()));
        self.inner.insert_then(record, transition).await
    }
    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.inner.get(key).await
    }
    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        self.note(next.state.name().into());
        self.inner.compare_and_swap(expected, next).await
    }
    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.inner.list_run(run_id).await
    }
}

#[tokio::test(start_paused = true)]
async fn a5_a_new_call_is_written_with_its_first_step_so_a_call_that_runs_is_two_writes() {
    let world = World::default();
    let runner = runner(Writes::default(), crash_free_toolbox(&world), T0);
    let ledger = runner.ledger();

    assert!(done(runner.call(call("s1", SEND, json!("ana"))).await).is_ok());
    assert_eq!(ledger.taken(), ["insert+start", "committed"]);
    let stored = ledger.inner.get(key("s1")).await.unwrap().unwrap();
    assert_eq!(
        stored.revision,
        Revision::from_u64(3),
        "prepared, started, committed"
    );

    assert!(matches!(
        runner.call(call("p1", PAY, json!(1))).await,
        Ok(CallResponse::AwaitingApproval(_))
    ));
    assert_eq!(ledger.taken(), ["insert+await_approval"]);

    let late = CallLimits::new().deadline(Duration::ZERO);
    let refused = done(runner.call_with(call("l1", LOOKUP, json!(1)), late).await);
    assert_eq!(failure(&refused), FailureKind::DeadlineExceeded);
    assert_eq!(ledger.taken(), ["insert+commit"]);
    assert_eq!(world.executions("lookup", "l1"), 0);

    // The same call again: the first write finds the key taken, and that is all.
    let again = runner.call(call("s1", SEND, json!("ana"))).await;
    assert!(matches!(&again, Ok(CallResponse::Done(r)) if r.source == ResultSource::Ledger));
    assert_eq!(ledger.taken(), ["insert+start"]);
    assert_eq!(world.executions("send", "s1"), 1);
}

#[tokio::test(start_paused = true)]
async fn a5_a_prepared_call_found_under_a_new_calls_key_runs_once_and_other_arguments_are_refused()
{
    let world = World::default();
    let runner = runner(Writes::default(), crash_free_toolbox(&world), T0);
    let ledger = runner.ledger();
    // What a ledger that writes the two steps apart leaves after a crash between them.
    let record = CallRecord::prepared(
        key("s1"),
        SEND.name(),
        SEND.effect(),
        json!("ana"),
        false,
        T0 + Duration::from_secs(60),
    );
    assert!(matches!(
        ledger.inner.insert(record).await,
        Ok(Insert::Inserted(_))
    ));

    let other = runner.call(call("s1", SEND, json!("bob"))).await;
    assert!(
        matches!(other, Err(RunnerError::IdempotencyConflict(_))),
        "{other:?}"
    );
    assert_eq!(world.executions("send", "s1"), 0);
    ledger.taken();

    let ran = runner.call(call("s1", SEND, json!("ana"))).await;
    assert!(matches!(&ran, Ok(CallResponse::Done(r)) if r.source == ResultSource::ThisCall));
    assert_eq!(ledger.taken(), ["insert+start", "started", "committed"]);
    assert_eq!(world.executions("send", "s1"), 1);
}

#[tokio::test]
async fn a5_insert_then_writes_nothing_when_the_state_machine_refuses_the_step() {
    let ledger = MemoryLedger::new();
    // `prepared` does not wait for an approval its tool does not require.
    let refused = ledger
        .insert_then(prepared("c1", ToolEffect::Read), Transition::AwaitApproval)
        .await;
    assert!(
        matches!(refused, Err(LedgerError::Illegal(_))),
        "{refused:?}"
    );
    assert_eq!(ledger.get(key("c1")).await.unwrap(), None);

    let Insert::Inserted(started) = ledger
        .insert_then(
            prepared("c1", ToolEffect::Read),
            Transition::Start { lease_until: T0 },
        )
        .await
        .unwrap()
    else {
        panic!("the key was free")
    };
    assert_eq!(
        (started.state.name(), started.revision),
        ("started", Revision::from_u64(2))
    );
    // Taken now: returned unchanged, nothing moved.
    let again = ledger
        .insert_then(
            prepared("c1", ToolEffect::Read),
            Transition::Commit {
                outcome: Err(ToolFailure::new(FailureKind::Rejected, "no")),
            },
        )
        .await
        .unwrap();
    assert_eq!(again, Insert::Existing(started));
}

#[tokio::test(start_paused = true)]
async fn a5_every_refusal_of_a_new_call_is_one_write_and_the_tool_never_runs() {
    let world = World::default();
    let transfers = Arc::new(AtomicU32::new(0));
    let tools = crash_free_toolbox(&world)
        .with(Bank(transfers.clone()))
        .unwrap();
    let runner = runner(Writes::default(), tools, T0).with_permission(
        |_: &CallKey, tool: &ToolSpec, _: &Value| match tool.name() {
            "send" => Err("no mail today".to_owned()),
            _ => Ok(()),
        },
    );
    let ledger = runner.ledger();

    let transfer = ToolCall::new(key("t1"), "transfer", json!({"amount": "ten"}));
    assert_eq!(
        failure(&done(runner.call(transfer).await)),
        FailureKind::InvalidInput
    );
    assert_eq!(ledger.taken(), ["insert+commit"]);

    let denied = done(runner.call(call("s1", SEND, json!("ana"))).await);
    assert_eq!(failure(&denied), FailureKind::PermissionDenied);
    assert_eq!(ledger.taken(), ["insert+commit"]);

    let cancelled = CallLimits::new().cancel_on(std::future::ready(()));
    let refused = done(
        runner
            .call_with(call("l1", LOOKUP, json!(1)), cancelled)
            .await,
    );
    assert_eq!(failure(&refused), FailureKind::Cancelled);
    assert_eq!(ledger.taken(), ["insert+commit"]);

    assert_eq!(transfers.load(Ordering::SeqCst), 0);
    assert_eq!(world.executions("send", "s1"), 0);
    assert_eq!(world.executions("lookup", "l1"), 0);
}

/// A ledger that writes a new call in two steps (the default `insert_then`) and holds the
/// writer that inserted it between the two until another runner has started the call.
#[derive(Clone)]
struct StartedBetween {
    inner: MemoryLedger,
    started: Arc<tokio::sync::Notify>,
}

impl Ledger for StartedBetween {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        let inserted = self.inner.insert(record).await?;
        if matches!(inserted, Insert::Inserted(_)) {
            self.started.notified().await;
        }
        Ok(inserted)
    }
    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.inner.get(key).await
    }
    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        let stored = self.inner.compare_and_swap(expected, next).await?;
        if stored.state == CallState::Started {
            self.started.notify_one();
        }
        Ok(stored)
    }
    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.inner.list_run(run_id).await
    }
}

#[tokio::test(start_paused = true)]
async fn a1_a_runner_beaten_between_its_two_writes_gets_the_stored_call_not_an_error() {
    let world = World::default();
    let ledger = StartedBetween {
        inner: MemoryLedger::new(),
        started: Arc::new(tokio::sync::Notify::new()),
    };
    let first = runner(ledger.clone(), crash_free_toolbox(&world), T0);
    let second = runner(ledger.clone(), crash_free_toolbox(&world), T0);
    // The first inserts and waits; the second finds the call `prepared`, starts and runs it;
    // then the first's start loses its compare-and-swap.
    let (lost, won) = tokio::join!(
        first.call(call("s1", SEND, json!("ana"))),
        second.call(call("s1", SEND, json!("ana")))
    );
    assert_eq!(world.executions("send", "s1"), 1);
    assert!(
        matches!(&won, Ok(CallResponse::Done(r)) if r.source == ResultSource::ThisCall),
        "{won:?}"
    );
    assert!(
        matches!(&lost, Ok(CallResponse::Done(r)) if r.source == ResultSource::Ledger),
        "the loser is answered from the ledger, not with a ledger error: {lost:?}"
    );
}

#[tokio::test]
async fn a5_the_default_insert_then_writes_nothing_for_a_step_the_state_machine_refuses() {
    let ledger = StartedBetween {
        inner: MemoryLedger::new(),
        started: Arc::new(tokio::sync::Notify::new()),
    };
    let refused = ledger
        .insert_then(prepared("c1", ToolEffect::Read), Transition::AwaitApproval)
        .await;
    assert!(
        matches!(refused, Err(LedgerError::Illegal(_))),
        "{refused:?}"
    );
    assert_eq!(ledger.get(key("c1")).await.unwrap(), None);
}

/// A ledger whose storage is unreachable: every method fails as a driver's connection error.
struct Unreachable;

fn unreachable_storage() -> LedgerError {
    LedgerError::backend(
        retry_toolkit::effects::BackendKind::Connection,
        std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer"),
    )
}

impl Ledger for Unreachable {
    async fn insert(&self, _: CallRecord) -> Result<Insert, LedgerError> {
        Err(unreachable_storage())
    }
    async fn get(&self, _: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        Err(unreachable_storage())
    }
    async fn compare_and_swap(
        &self,
        _: Revision,
        _: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        Err(unreachable_storage())
    }
    async fn list_run(&self, _: String) -> Result<Vec<CallRecord>, LedgerError> {
        Err(unreachable_storage())
    }
}

/// Issue 28: a storage failure reaches the runner's caller with a kind to branch on and the
/// driver's error as its source, shared (not copied) by a clone; the ledger's own refusals
/// have no kind.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_storage_failure_keeps_its_kind_and_its_cause_through_the_runner() {
    use retry_toolkit::effects::BackendKind;
    use std::error::Error as _;

    let echo = tool_fn(ToolSpec::new("echo"), |x: u32, _: ToolContext| async move {
        Ok::<_, String>(x)
    });
    let runner =
        retry_toolkit::effects::ToolRunner::new(Unreachable, Toolbox::new().with(echo).unwrap());
    let ran = runner
        .call(ToolCall::new(key("c1"), "echo", json!(1)))
        .await;
    let Err(RunnerError::Ledger(error)) = ran else {
        panic!("{ran:?}")
    };
    assert_eq!(error.kind(), Some(BackendKind::Connection));
    assert_eq!(error.to_string(), "ledger storage failed: reset by peer");
    let cause = error
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the driver's error is the source itself");
    assert_eq!(cause.kind(), std::io::ErrorKind::ConnectionReset);
    let copy = error.clone();
    match (&error, &copy) {
        (LedgerError::Backend { source: a, .. }, LedgerError::Backend { source: b, .. }) => {
            assert!(Arc::ptr_eq(a, b), "a clone shares the cause");
        }
        other => panic!("{other:?}"),
    }
    let conflict = LedgerError::Conflict {
        key: key("c1"),
        expected: Revision::FIRST,
        found: None,
    };
    assert_eq!(conflict.kind(), None);
    assert!(conflict.source().is_none());
    assert_eq!(
        conflict.to_string(),
        "call `run-1:c1` changed under us: expected revision r1, found no record"
    );
}
