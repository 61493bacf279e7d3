//! A1/A5 with real crashes: a child process runs a side-effect tool call through the
//! `ToolRunner` on a SQLite ledger, and is killed with SIGKILL just before the tool acts, just
//! after it acted (before the result is committed), and just after the commit. The tool
//! records its effect with an outside witness — a file standing for the mail server. A fresh
//! runner on the same file then recovers, and for every crash point: the side effect ran at
//! most once (per the witness), a committed result is handed back without running the tool,
//! an effect that may have happened goes to reconciliation, and nothing is lost.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use retry_core::TokioClock;
use retry_core::effects::{
    CallKey, CallResponse, CallState, Ledger, RecoveryPolicy, Timestamp, ToolCall, ToolContext,
    ToolEffect, ToolRunner, ToolSpec, Toolbox, tool_fn,
};
use retry_durable::SqliteStore;
use serde_json::{Value, json};

const CHILD: &str = "RETRY_DURABLE_LEDGER_CRASH";
const SEND: ToolSpec = ToolSpec::new("send_mail").with_effect(ToolEffect::SideEffect);

fn key() -> CallKey {
    CallKey::new("run-1", "mail-1").unwrap()
}

fn witness_count(witness: &Path) -> usize {
    std::fs::read_to_string(witness)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The mail server: the tool appends a line to the witness file for every mail it sends.
/// `hang` is where the child stops to be killed: `before` the effect, `after` it (before the
/// runner can commit), or never (`commit`: the child hangs once the call is done).
fn toolbox(witness: PathBuf, hang: String) -> Toolbox {
    Toolbox::new()
        .with(tool_fn(SEND, move |args: Value, ctx: ToolContext| {
            let (witness, hang) = (witness.clone(), hang.clone());
            async move {
                if hang == "before" {
                    println!("CRASH POINT");
                    std::future::pending::<()>().await;
                }
                let line = format!("{} {}\n", ctx.call(), args);
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&witness)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()))
                    .map_err(|e| e.to_string())?;
                if hang == "after" {
                    println!("CRASH POINT");
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(json!({ "sent": true }))
            }
        }))
        .unwrap()
}

/// In the child: run the call, stop at the crash point.
#[tokio::test]
async fn child_runs_a_side_effect() {
    let Ok(spec) = std::env::var(CHILD) else {
        return; // Not a child.
    };
    let mut parts = spec.splitn(3, '|');
    let (db, witness, hang) = (
        parts.next().unwrap().to_owned(),
        PathBuf::from(parts.next().unwrap()),
        parts.next().unwrap().to_owned(),
    );
    let runner = ToolRunner::new(SqliteStore::open(&db).unwrap(), toolbox(witness, hang));
    let outcome = runner
        .call(ToolCall::new(key(), SEND.name(), json!({"to": "ana"})))
        .await
        .unwrap();
    assert!(matches!(outcome, CallResponse::Done(_)));
    println!("CRASH POINT");
    std::future::pending::<()>().await;
}

/// Runs the child until it reports its crash point, then kills it.
fn crash(db: &Path, witness: &Path, hang: &str) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_runs_a_side_effect",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            CHILD,
            format!("{}|{}|{hang}", db.display(), witness.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reached = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("CRASH POINT"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(reached, "the child did not reach crash point `{hang}`");
}

/// Kills a child at `hang`, recovers in this process, and checks the promises; returns the
/// call's state after recovery.
async fn crash_and_recover(hang: &str) -> CallState {
    let dir = tempfile::tempdir().unwrap();
    let (db, witness) = (
        dir.path().join("agent.db"),
        dir.path().join("mail-server.log"),
    );
    crash(&db, &witness, hang);
    let sent_before_recovery = witness_count(&witness);

    // A new process, long after every lease: recovery reads the call back from the file.
    let store = SqliteStore::open(&db).unwrap();
    let later = Timestamp::system_now() + Duration::from_secs(3600);
    let runner = ToolRunner::new(store.clone(), toolbox(witness.clone(), "never".to_owned()))
        .with_clock(TokioClock)
        .with_epoch(later);
    let report = runner
        .recover("run-1", &RecoveryPolicy::new(), |_| false)
        .await
        .unwrap();
    let recovered = report
        .calls
        .iter()
        .find(|c| c.key == key())
        .expect("the call was lost");

    // The agent goes on: it asks for the call again.
    let again = runner
        .call(ToolCall::new(key(), SEND.name(), json!({"to": "ana"})))
        .await;
    let record = store.get(key()).await.unwrap().expect("the call was lost");

    let sent = witness_count(&witness);
    assert!(sent <= 1, "crash `{hang}`: the mail was sent {sent} times");
    assert_eq!(
        sent, sent_before_recovery,
        "crash `{hang}`: recovery re-sent a side effect"
    );
    match hang {
        "commit" => {
            assert!(matches!(record.state, CallState::Committed { .. }));
            assert!(
                recovered.action.transcript_entry().is_some(),
                "the committed result is handed back"
            );
            assert!(matches!(again, Ok(CallResponse::Done(_))));
        }
        _ => {
            // Started, outcome unknown: a person (or a reconciler) decides; never a replay.
            assert!(
                matches!(record.state, CallState::NeedsReconciliation { .. }),
                "{:?}",
                record.state
            );
            assert!(recovered.action.needs_attention());
            assert!(
                again.is_err(),
                "a call in reconciliation must not run: {again:?}"
            );
        }
    }
    record.state
}

#[tokio::test]
async fn a5_sigkill_before_the_effect_after_it_and_after_the_commit() {
    let mut covered = Vec::new();
    for hang in ["before", "after", "commit"] {
        let state = crash_and_recover(hang).await;
        covered.push((hang, state.kind().name()));
    }
    assert_eq!(
        covered,
        [
            ("before", "needs_reconciliation"),
            ("after", "needs_reconciliation"),
            ("commit", "committed")
        ]
    );
}
