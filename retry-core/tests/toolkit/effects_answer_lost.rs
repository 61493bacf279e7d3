//! A tool that says its answer was lost (`Tool::answer_lost`): its request went out and the
//! connection failed before the answer came back (SPEC A7, C2). A read ends with the failure as
//! its result; a write goes to reconciliation and is never run again on its own (A1, A5).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use retry_toolkit::effects::{
    CallKey, CallResponse, CallState, FailureKind, Ledger, MemoryLedger, ReconcileReason,
    RecoveryAction, RecoveryPolicy, Resolution, RunnerError, Tool, ToolCall, ToolContext,
    ToolEffect, ToolRunner, ToolSpec, Toolbox,
};
use serde_json::{Value, json};

/// How the remote end answered, in the tool's own error type.
#[derive(Debug)]
enum Wire {
    /// The connection broke after the request was written.
    Lost,
    /// The server answered with an error.
    Refused,
}

impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Wire::Lost => "connection reset after the request was sent",
            Wire::Refused => "the server refused the request",
        })
    }
}

/// A tool over a fake wire: counts its calls, and fails the way it is told.
struct Wired {
    spec: ToolSpec,
    fail: fn(u32) -> Option<Wire>,
    calls: Arc<AtomicU32>,
}

impl Tool for Wired {
    type Args = Value;
    type Output = Value;
    type Error = Wire;

    fn spec(&self) -> ToolSpec {
        self.spec
    }

    fn retryable(&self, error: &Wire) -> bool {
        matches!(error, Wire::Lost)
    }

    fn answer_lost(&self, error: &Wire) -> bool {
        matches!(error, Wire::Lost)
    }

    async fn call(&self, args: Value, _ctx: ToolContext) -> Result<Value, Wire> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        match (self.fail)(n) {
            Some(error) => Err(error),
            None => Ok(json!({ "echo": args })),
        }
    }
}

fn runner(
    effect: ToolEffect,
    fail: fn(u32) -> Option<Wire>,
) -> (ToolRunner<MemoryLedger>, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let tool = Wired {
        spec: ToolSpec::new("remote").with_effect(effect),
        fail,
        calls: calls.clone(),
    };
    let tools = Toolbox::new().with(tool).unwrap();
    (ToolRunner::new(MemoryLedger::new(), tools), calls)
}

fn call(id: &str) -> ToolCall {
    ToolCall::new(
        CallKey::new("run-1", id).unwrap(),
        "remote",
        json!({ "to": "ana" }),
    )
}

fn always_lost(_: u32) -> Option<Wire> {
    Some(Wire::Lost)
}

#[tokio::test(start_paused = true)]
async fn a7_a_side_effect_whose_answer_was_lost_goes_to_reconciliation_and_is_not_run_again() {
    let (runner, calls) = runner(ToolEffect::SideEffect, always_lost);
    let error = runner.call(call("c1")).await.unwrap_err();
    let RunnerError::NeedsReconciliation { key, reason } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        (key.call_id(), *reason),
        ("c1", ReconcileReason::AnswerLost)
    );
    assert!(
        error.to_string().contains("whether it acted is unknown"),
        "{error}"
    );

    // Submitting it again, and recovering the run with a policy that re-runs what it may, do
    // not call the tool a second time.
    let again = runner.call(call("c1")).await.unwrap_err();
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
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A person finds out that it did happen.
    let record = runner
        .resolve(
            CallKey::new("run-1", "c1").unwrap(),
            Resolution::Happened(Ok(json!("sent"))),
        )
        .await
        .unwrap();
    assert_eq!(
        record.result().map(|r| &r.outcome),
        Some(&Ok(json!("sent")))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a7_an_idempotent_write_whose_answer_was_lost_goes_to_reconciliation_too() {
    let (runner, calls) = runner(ToolEffect::IdempotentWrite, always_lost);
    let error = runner.call(call("c1")).await.unwrap_err();
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
    let record = runner
        .ledger()
        .get(CallKey::new("run-1", "c1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.state,
        CallState::NeedsReconciliation {
            reason: ReconcileReason::AnswerLost
        }
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a7_a_read_whose_answer_was_lost_ends_with_the_failure_as_its_result() {
    let (runner, calls) = runner(ToolEffect::Read, always_lost);
    let response = runner.call(call("c1")).await.unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Tool);
    assert_eq!(
        failure.message,
        "connection reset after the request was sent"
    );
    assert!(failure.retryable, "the diagnosis is kept");
    // Committed: asking again answers from the ledger.
    let again = runner.call(call("c1")).await.unwrap();
    assert!(matches!(again, CallResponse::Done(_)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a3_an_error_that_is_an_answer_is_the_result_even_for_a_side_effect() {
    let (runner, _) = runner(ToolEffect::SideEffect, |_| Some(Wire::Refused));
    let response = runner.call(call("c1")).await.unwrap();
    let failure = response.result().unwrap().outcome.clone().unwrap_err();
    assert_eq!(failure.message, "the server refused the request");
    assert!(!failure.retryable);
}

#[tokio::test(start_paused = true)]
async fn a7_a_new_call_after_a_lost_answer_is_a_new_decision() {
    let (runner, calls) = runner(ToolEffect::SideEffect, |n| (n == 1).then_some(Wire::Lost));
    assert!(runner.call(call("c1")).await.is_err());
    let second = runner.call(call("c2")).await.unwrap();
    assert_eq!(
        second.result().unwrap().outcome,
        Ok(json!({ "echo": { "to": "ana" } }))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
fn answer_lost_is_stored_by_name() {
    let reason = ReconcileReason::AnswerLost;
    let text = serde_json::to_string(&reason).unwrap();
    assert_eq!(text, "\"answer_lost\"");
    assert_eq!(
        serde_json::from_str::<ReconcileReason>(&text).unwrap(),
        reason
    );
}
