//! Recovery after a crash (SPEC A5), and the crash-point test: a scripted run killed at every
//! step of every call, then recovered.

use crate::effects_support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use effects_support::{
    Crash, CrashLedger, LOOKUP, PAY, RUN, SEND, T0, Transcript, UPSERT, World, after_leases, call,
    key, runner, toolbox,
};
use retry_toolkit::TokioClock;
use retry_toolkit::effects::{
    CallResponse, CallState, FailureKind, Ledger, MemoryLedger, NotRerun, ReconcileReason,
    RecoveryAction, RecoveryPolicy, RefuseReason, Resolution, Review, RunnerError, ToolCall,
    ToolContext, ToolEffect, ToolRunner, ToolSpec, Toolbox, tool_fn,
};
use serde_json::json;

/// Runs `calls` as an agent loop would — call, review approvals, append each result to the
/// transcript — with crash points at every ledger write, around every tool's effect and
/// around every append.
async fn agent_loop<L: Ledger>(
    runner: &ToolRunner<L, TokioClock>,
    calls: &[ToolCall],
    transcript: &Transcript,
    crash: &Crash,
) {
    for call in calls {
        let mut outcome = runner.call(call.clone()).await.unwrap();
        if let CallResponse::AwaitingApproval(key) = outcome {
            outcome = runner.review(key, Review::Approve).await.unwrap();
        }
        let CallResponse::Done(result) = outcome else {
            panic!("{outcome:?}")
        };
        let id = call.key.call_id();
        crash.point(format!("append {id} before")).await;
        transcript.append(&call.key, &result.outcome);
        crash.point(format!("append {id} after")).await;
    }
}

/// The state a crash leaves behind: durable ledger, world and transcript.
struct Crashed {
    ledger: MemoryLedger,
    world: World,
    transcript: Transcript,
    crash: Arc<Crash>,
}

/// Runs `calls` and kills the process at crash point number `crash_at` (never if `None`).
async fn run_and_crash(crash_at: Option<usize>, calls: &[ToolCall]) -> Crashed {
    let (ledger, world, transcript) =
        (MemoryLedger::new(), World::default(), Transcript::default());
    let crash = Crash::at(crash_at);
    let first = runner(
        CrashLedger::new(ledger.clone(), crash.clone()),
        toolbox(&world, &crash),
        T0,
    );
    tokio::select! {
        () = agent_loop(&first, calls, &transcript, &crash) => {}
        () = crash.died() => {}
    }
    Crashed {
        ledger,
        world,
        transcript,
        crash,
    }
}

/// Runs `calls` and kills the process at the crash point called `label`.
async fn crash_at(label: &str, calls: &[ToolCall]) -> Crashed {
    let labels = run_and_crash(None, calls).await.crash.labels();
    let index = labels.iter().position(|l| l == label);
    assert!(index.is_some(), "no crash point `{label}` in {labels:?}");
    let crashed = run_and_crash(index, calls).await;
    assert!(crashed.crash.is_dead());
    crashed
}

/// The runner of the restarted process, long after every lease expired.
fn restarted(crashed: &Crashed) -> ToolRunner<MemoryLedger, TokioClock> {
    runner(
        crashed.ledger.clone(),
        toolbox(&crashed.world, &Crash::never()),
        after_leases(),
    )
}

async fn state(ledger: &MemoryLedger, id: &str) -> CallState {
    ledger.get(key(id)).await.unwrap().unwrap().state
}

/// What recovery under `policy` did with call `id` of a crashed run.
async fn recovered_action(crashed: &Crashed, policy: &RecoveryPolicy, id: &str) -> RecoveryAction {
    let report = restarted(crashed)
        .recover(RUN, policy, |_| false)
        .await
        .unwrap();
    report
        .calls
        .into_iter()
        .find(|c| c.key == key(id))
        .unwrap()
        .action
}

fn reruns() -> RecoveryPolicy {
    RecoveryPolicy::new()
        .rerun(ToolEffect::Read)
        .unwrap()
        .rerun(ToolEffect::IdempotentWrite)
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a5_committed_result_completes_the_transcript_without_calling_the_tool() {
    let crashed = crash_at("append s1 before", &[call("s1", SEND, json!("ana"))]).await;
    let runner = restarted(&crashed);
    let report = runner
        .recover(RUN, &RecoveryPolicy::new(), |k| crashed.transcript.has(k))
        .await
        .unwrap();
    let RecoveryAction::Completed(Ok(value)) = &report.calls[0].action else {
        panic!("{report:?}")
    };
    assert_eq!(value["call"], "s1");
    assert_eq!(
        crashed.world.executions("send", "s1"),
        1,
        "the tool is not called again"
    );

    // Once the transcript has it, a second recovery appends nothing.
    crashed.transcript.append(&key("s1"), &Ok(value.clone()));
    let again = runner
        .recover(RUN, &RecoveryPolicy::new(), |k| crashed.transcript.has(k))
        .await
        .unwrap();
    assert!(matches!(
        again.calls[0].action,
        RecoveryAction::AlreadyInTranscript
    ));
    assert_eq!(again.to_append().count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a5_started_side_effect_goes_to_reconciliation_and_is_never_replayed() {
    let crashed = crash_at("tool s1 after effect", &[call("s1", SEND, json!("ana"))]).await;
    let runner = restarted(&crashed);
    // Even the most permissive policy cannot re-run a side effect.
    let report = runner
        .recover(RUN, &reruns(), |k| crashed.transcript.has(k))
        .await
        .unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::NeedsReconciliation {
            reason: ReconcileReason::LeaseExpired,
            not_rerun: Some(NotRerun::Refused(RefuseReason::UnknownSideEffect)),
        }
    ));
    assert_eq!(report.needs_attention().count(), 1);
    assert!(matches!(
        state(&crashed.ledger, "s1").await,
        CallState::NeedsReconciliation { .. }
    ));

    // Submitting the call again, or recovering again, does not run it either.
    let again = runner.call(call("s1", SEND, json!("ana"))).await;
    assert!(matches!(
        again,
        Err(RunnerError::NeedsReconciliation {
            reason: ReconcileReason::LeaseExpired,
            ..
        })
    ));
    let report = runner.recover(RUN, &reruns(), |_| false).await.unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::NeedsReconciliation {
            not_rerun: None,
            ..
        }
    ));
    assert_eq!(crashed.world.executions("send", "s1"), 1);

    // A person checks the mail server and records what happened.
    let found = Ok(json!({"delivered": true}));
    let outcome = runner
        .resolve(key("s1"), Resolution::Happened(found.clone()))
        .await
        .unwrap();
    assert_eq!(outcome.result().map(|r| &r.outcome), Some(&found));
    assert_eq!(crashed.world.executions("send", "s1"), 1);
    let report = runner.recover(RUN, &reruns(), |_| false).await.unwrap();
    assert!(matches!(&report.calls[0].action, RecoveryAction::Completed(o) if *o == found));
}

#[tokio::test(start_paused = true)]
async fn a5_reconciliation_that_finds_nothing_happened_runs_the_call_once() {
    let crashed = crash_at("tool s1 before effect", &[call("s1", SEND, json!("ana"))]).await;
    let runner = restarted(&crashed);
    runner
        .recover(RUN, &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    assert_eq!(crashed.world.executions("send", "s1"), 0);
    let outcome = runner
        .resolve(key("s1"), Resolution::DidNotHappen)
        .await
        .unwrap();
    assert!(matches!(outcome, CallResponse::Done(ref r) if r.outcome.is_ok()));
    assert_eq!(crashed.world.executions("send", "s1"), 1);
    // Resolving twice is refused: the call is committed now.
    let twice = runner.resolve(key("s1"), Resolution::DidNotHappen).await;
    assert!(matches!(
        twice,
        Err(RunnerError::WrongState {
            state: "committed",
            ..
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn a5_a_live_lease_is_left_alone() {
    let crashed = crash_at("tool s1 after effect", &[call("s1", SEND, json!("ana"))]).await;
    // A second process one second later: the first one's lease (5 min) still holds.
    let soon = runner(
        crashed.ledger.clone(),
        toolbox(&crashed.world, &Crash::never()),
        T0 + Duration::from_secs(1),
    );
    let report = soon
        .recover(RUN, &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::Leased { .. }
    ));
    assert_eq!(state(&crashed.ledger, "s1").await, CallState::Started);
    assert!(matches!(
        soon.call(call("s1", SEND, json!("ana"))).await,
        Err(RunnerError::InProgress {
            state: "started",
            ..
        })
    ));

    // Nothing stays in progress forever: once the lease ran out, recovery takes it over.
    let later = restarted(&crashed);
    let report = later
        .recover(RUN, &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::NeedsReconciliation { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a5_a_restarted_sole_runner_takes_over_its_dead_predecessors_leases_when_told() {
    let calls = [call("r1", LOOKUP, json!(1)), call("s1", SEND, json!("ana"))];
    // Killed while the side effect acted; the read before it committed.
    let crashed = crash_at("tool s1 after effect", &calls).await;
    // Restarted at once: the dead process's lease on s1 still holds.
    let restarted_now = runner(
        crashed.ledger.clone(),
        toolbox(&crashed.world, &Crash::never()),
        T0 + Duration::from_secs(1),
    );
    let waits = restarted_now
        .recover(RUN, &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    let s1 = |report: &retry_toolkit::effects::RecoveryReport| {
        report
            .calls
            .iter()
            .find(|c| c.key == key("s1"))
            .map(|c| format!("{:?}", c.action))
            .unwrap()
    };
    assert!(s1(&waits).starts_with("Leased"), "{}", s1(&waits));

    let policy = RecoveryPolicy::new().take_over_leases(true);
    let taken = restarted_now
        .recover(RUN, &policy, |_| false)
        .await
        .unwrap();
    // Taken over now, and as a started side effect: to a person, never run again.
    assert!(
        s1(&taken).starts_with("NeedsReconciliation"),
        "{}",
        s1(&taken)
    );
    assert_eq!(crashed.world.executions("send", "s1"), 1);
    assert!(matches!(
        state(&crashed.ledger, "s1").await,
        CallState::NeedsReconciliation { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a5_a_taken_over_read_is_rerun_at_once_under_a_rerun_policy() {
    let crashed = crash_at("tool r1 after effect", &[call("r1", LOOKUP, json!(1))]).await;
    let restarted_now = runner(
        crashed.ledger.clone(),
        toolbox(&crashed.world, &Crash::never()),
        T0 + Duration::from_secs(1),
    );
    let policy = reruns().take_over_leases(true);
    let report = restarted_now
        .recover(RUN, &policy, |_| false)
        .await
        .unwrap();
    assert!(
        matches!(report.calls[0].action, RecoveryAction::Rerun(Ok(_))),
        "{:?}",
        report.calls[0].action
    );
    assert_eq!(
        crashed.world.executions("lookup", "r1"),
        2,
        "once before the crash, once now"
    );
    assert!(matches!(
        state(&crashed.ledger, "r1").await,
        CallState::Committed { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a5_awaiting_approval_waits_for_a_decision() {
    let calls = [call("p1", PAY, json!(10)), call("p2", PAY, json!(20))];
    let crashed = crash_at("after write p1 awaiting_approval", &calls).await;
    let runner = restarted(&crashed);
    for _ in 0..2 {
        let report = runner.recover(RUN, &reruns(), |_| false).await.unwrap();
        assert!(matches!(
            report.calls[0].action,
            RecoveryAction::AwaitingApproval
        ));
    }
    assert_eq!(
        crashed.world.executions("pay", "p1"),
        0,
        "no decision, no execution"
    );

    // Reject: an error result, the tool never runs.
    let rejected = runner
        .review(
            key("p1"),
            Review::Reject {
                reason: "over budget".into(),
            },
        )
        .await
        .unwrap();
    let Some(Err(failure)) = rejected.result().map(|r| &r.outcome) else {
        panic!("{rejected:?}")
    };
    assert_eq!(
        (failure.kind, failure.message.as_str()),
        (FailureKind::Rejected, "over budget")
    );
    assert_eq!(crashed.world.executions("pay", "p1"), 0);

    // Approve: runs, once; a second decision is refused.
    assert!(matches!(
        runner.call(calls[1].clone()).await,
        Ok(CallResponse::AwaitingApproval(_))
    ));
    let approved = runner.review(key("p2"), Review::Approve).await.unwrap();
    assert!(approved.result().is_some_and(|r| r.outcome.is_ok()));
    assert!(matches!(
        runner.review(key("p2"), Review::Approve).await,
        Err(RunnerError::WrongState { .. })
    ));
    assert_eq!(crashed.world.executions("pay", "p2"), 1);
}

#[tokio::test(start_paused = true)]
async fn a5_read_and_idempotent_write_rerun_only_under_an_explicit_policy() {
    let calls = [
        call("r1", LOOKUP, json!("q")),
        call("i1", UPSERT, json!({"note": 1})),
    ];
    for (crash_point, id, tool) in [
        ("tool r1 after effect", "r1", "lookup"),
        ("tool i1 after effect", "i1", "upsert"),
    ] {
        // Without a policy: surfaced, not replayed.
        let crashed = crash_at(crash_point, &calls).await;
        let action = recovered_action(&crashed, &RecoveryPolicy::new(), id).await;
        assert!(
            matches!(
                action,
                RecoveryAction::NeedsReconciliation {
                    not_rerun: Some(NotRerun::NoPolicy),
                    ..
                }
            ),
            "{action:?}"
        );
        assert_eq!(crashed.world.executions(tool, id), 1);

        // With the policy: re-run once more, with the same idempotency key (A4).
        let crashed = crash_at(crash_point, &calls).await;
        let action = recovered_action(&crashed, &reruns(), id).await;
        assert!(matches!(action, RecoveryAction::Rerun(Ok(_))), "{action:?}");
        assert_eq!(crashed.world.executions(tool, id), 2);
        let record = crashed.ledger.get(key(id)).await.unwrap().unwrap();
        assert_eq!(record.attempts, 2);
        if tool == "upsert" {
            let keys: Vec<_> = crashed
                .world
                .keys_seen()
                .into_iter()
                .filter(|k| k.ends_with(":i1"))
                .collect();
            assert_eq!(keys, ["run-1:i1", "run-1:i1"]);
            assert_eq!(
                crashed.world.distinct_writes("i1"),
                1,
                "the store saw one key"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a5_a_rerun_refused_by_a_check_does_not_hide_an_earlier_write() {
    let calls = [
        call("r1", LOOKUP, json!("q")),
        call("i1", UPSERT, json!({"note": 1})),
    ];
    let crashed = crash_at("tool i1 after effect", &calls).await;
    // After the restart, writes are no longer permitted.
    let deny =
        |_: &retry_toolkit::effects::CallKey, tool: &ToolSpec, _: &serde_json::Value| match tool
            .effect()
        {
            ToolEffect::Read => Ok(()),
            _ => Err("writes are frozen".to_owned()),
        };
    let runner = restarted(&crashed).with_permission(deny);
    let report = runner
        .recover(RUN, &reruns(), |k| crashed.transcript.has(k))
        .await
        .unwrap();
    // The first start of `i1` may have written: committing "permission denied" would hide it.
    let action = &report.calls[1].action;
    assert!(
        matches!(
            action,
            RecoveryAction::NeedsReconciliation {
                not_rerun: None,
                ..
            }
        ),
        "{action:?}"
    );
    assert_eq!(crashed.world.executions("upsert", "i1"), 1);
}

#[tokio::test(start_paused = true)]
async fn a5_reruns_stop_at_the_attempt_budget() {
    let crashed = crash_at("tool i1 after effect", &[call("i1", UPSERT, json!(1))]).await;
    let policy = reruns().max_attempts(1);
    let report = restarted(&crashed)
        .recover(RUN, &policy, |_| false)
        .await
        .unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::NeedsReconciliation {
            not_rerun: Some(NotRerun::Refused(RefuseReason::AttemptsExhausted {
                made: 1,
                max: 1
            })),
            ..
        }
    ));
    assert_eq!(crashed.world.executions("upsert", "i1"), 1);
}

#[tokio::test(start_paused = true)]
async fn a5_a_call_that_never_started_runs_once_on_recovery_unless_told_not_to() {
    let calls = [call("s1", SEND, json!("ana"))];
    let crashed = crash_at("after insert s1", &calls).await;
    let report = restarted(&crashed)
        .recover(RUN, &RecoveryPolicy::new().resume_prepared(false), |_| {
            false
        })
        .await
        .unwrap();
    assert!(matches!(report.calls[0].action, RecoveryAction::NotStarted));
    assert_eq!(crashed.world.executions("send", "s1"), 0);

    let report = restarted(&crashed)
        .recover(RUN, &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::Executed(Ok(_))
    ));
    assert_eq!(crashed.world.executions("send", "s1"), 1);
}

#[tokio::test(start_paused = true)]
async fn a5_recovery_trusts_the_stricter_of_the_recorded_and_declared_effect() {
    let crashed = crash_at("tool r1 after effect", &[call("r1", LOOKUP, json!("q"))]).await;
    // After a deploy, `lookup` is (correctly) declared a side effect.
    let lookup = tool_fn(
        ToolSpec::new("lookup"),
        |_: serde_json::Value, _: ToolContext| async { Ok::<_, String>(0) },
    );
    let runner = runner(
        crashed.ledger.clone(),
        Toolbox::new().with(lookup).unwrap(),
        after_leases(),
    );
    let report = runner.recover(RUN, &reruns(), |_| false).await.unwrap();
    assert_eq!(report.calls[0].effect, ToolEffect::SideEffect);
    assert!(matches!(
        report.calls[0].action,
        RecoveryAction::NeedsReconciliation { .. }
    ));
}

/// Two reads, two idempotent writes, two side effects, and a side effect that needs approval.
fn script() -> Vec<ToolCall> {
    vec![
        call("r1", LOOKUP, json!({"q": "weather"})),
        call("i1", UPSERT, json!({"note": "a"})),
        call("s1", SEND, json!({"to": "ana"})),
        call("r2", LOOKUP, json!({"q": "news"})),
        call("i2", UPSERT, json!({"note": "b"})),
        call("s2", SEND, json!({"to": "bo"})),
        call("p1", PAY, json!({"amount": 10})),
    ]
}

/// Crash points of one uninterrupted run of [`script`]: per call, before and after each ledger
/// write (insert, start, commit; plus await-approval and approve for `p1`), before and after
/// the tool's effect, before and after the transcript append.
const CRASH_POINTS_PER_RUN: usize = 6 * 10 + 14;

/// Recovers after a crash at point `crash_at`, resumes the agent loop, and checks the promises.
async fn crash_recover_check(crash_at: usize, policy: &RecoveryPolicy) -> &'static str {
    let calls = script();
    let crashed = run_and_crash(Some(crash_at), &calls).await;
    let point = crashed.crash.labels().pop().unwrap_or_default();
    let ctx = format!("crash point {crash_at} ({point}), policy {policy:?}");
    assert!(crashed.crash.is_dead(), "{ctx}: did not crash");
    let Crashed {
        ledger,
        world,
        transcript,
        ..
    } = crashed;

    // Restart: recover, append what recovery hands over, note what it surfaces.
    let runner = runner(
        ledger.clone(),
        toolbox(&world, &Crash::never()),
        after_leases(),
    );
    let report = runner
        .recover(RUN, policy, |k| transcript.has(k))
        .await
        .unwrap();
    let mut surfaced = HashSet::new();
    for recovered in &report.calls {
        match recovered.action.transcript_entry() {
            Some(outcome) => transcript.append(&recovered.key, outcome),
            None if recovered.action.needs_attention() => {
                surfaced.insert(recovered.key.clone());
            }
            None => {}
        }
    }
    // The agent loop goes on with every call the transcript still lacks.
    for call in &calls {
        if transcript.has(&call.key) {
            continue;
        }
        let outcome = match runner.call(call.clone()).await {
            Ok(CallResponse::AwaitingApproval(key)) => runner.review(key, Review::Approve).await,
            other => other,
        };
        match outcome {
            Ok(CallResponse::Done(result)) => transcript.append(&call.key, &result.outcome),
            Err(RunnerError::NeedsReconciliation { key, .. }) => {
                surfaced.insert(key);
            }
            other => panic!("{ctx}: {} ended with {other:?}", call.key),
        }
    }

    // No committed result appended twice.
    assert_eq!(transcript.duplicates(), [], "{ctx}: appended twice");
    for record in ledger.list_run(RUN.to_owned()).await.unwrap() {
        let id = record.key.call_id();
        let executions = world.executions(&record.tool, id);
        // Started is persisted before the tool runs: never more executions than starts.
        assert!(
            executions <= record.attempts,
            "{ctx}: {id} ran {executions}x, started {}x",
            record.attempts
        );
        if record.effect == ToolEffect::SideEffect {
            // No side-effect tool executed twice.
            assert!(
                executions <= 1,
                "{ctx}: side effect {id} ran {executions} times"
            );
            // Every started side effect is committed or in reconciliation.
            if record.attempts > 0 {
                assert!(
                    matches!(
                        record.state,
                        CallState::Committed { .. } | CallState::NeedsReconciliation { .. }
                    ),
                    "{ctx}: started side effect {id} left {:?}",
                    record.state
                );
            }
        }
        if record.effect == ToolEffect::IdempotentWrite {
            assert!(
                world.distinct_writes(id) <= 1,
                "{ctx}: {id} wrote under two keys"
            );
        }
    }
    // Nothing silently lost: every call is in the transcript, with the committed result, or
    // was surfaced and sits in reconciliation.
    let mut ended_in = "transcript";
    for call in &calls {
        let record = ledger
            .get(call.key.clone())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{ctx}: {} lost", call.key));
        match record.state {
            CallState::Committed { outcome } => {
                let entries = transcript.entries();
                let entry = entries.iter().find(|(k, _)| *k == call.key);
                assert_eq!(
                    entry.map(|(_, o)| o),
                    Some(&outcome),
                    "{ctx}: {} not in the transcript",
                    call.key
                );
            }
            CallState::NeedsReconciliation { .. } => {
                assert!(
                    surfaced.contains(&call.key),
                    "{ctx}: {} in reconciliation, not surfaced",
                    call.key
                );
                assert!(!transcript.has(&call.key), "{ctx}: {}", call.key);
                if policy.reruns(record.effect) {
                    panic!(
                        "{ctx}: {} ({}) should have been re-run",
                        call.key, record.effect
                    );
                }
                ended_in = "reconciliation";
            }
            other => panic!("{ctx}: {} left {other:?}", call.key),
        }
    }
    ended_in
}

#[tokio::test(start_paused = true)]
async fn a5_crash_at_every_step_of_every_call_then_recover() {
    let policies = [
        ("no re-runs", RecoveryPolicy::new()),
        ("re-run reads and idempotent writes", reruns()),
    ];
    let points = run_and_crash(None, &script()).await.crash.labels();
    assert_eq!(points.len(), CRASH_POINTS_PER_RUN, "{points:#?}");

    let mut covered = 0;
    for (name, policy) in &policies {
        let mut reconciliations = 0;
        for crash_at in 0..points.len() {
            if crash_recover_check(crash_at, policy).await == "reconciliation" {
                reconciliations += 1;
            }
            covered += 1;
        }
        println!(
            "policy `{name}`: {} crash points, {reconciliations} left a call in reconciliation",
            points.len()
        );
    }
    println!("crash points covered: {covered}");
    assert_eq!(covered, 2 * CRASH_POINTS_PER_RUN);
}
