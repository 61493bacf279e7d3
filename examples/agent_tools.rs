//! Agent tools through a crash: a read, an idempotent write and a side effect are running when
//! the process dies; a restarted process recovers the run and says what it did with each.
//!
//! Run with `cargo run --example agent_tools`. Nothing sleeps: the "crash" drops the running
//! calls, and the restart pretends to happen ten minutes later, after every lease expired.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use retry_core::effects::{
    CallKey, CallResponse, IdempotencyKey, MemoryLedger, RecoveryPolicy, Resolution, Timestamp,
    ToolCall, ToolEffect, ToolOutcome, ToolRunner, Toolbox, ToolboxError,
};
use retry_core::tool;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// What the outside world saw: how often each tool ran, and the notes store, which (like a
/// good downstream API) deduplicates writes on the idempotency key.
struct World {
    lookups: AtomicU32,
    note_writes: AtomicU32,
    emails: AtomicU32,
    notes: Mutex<Vec<(String, Value)>>,
}

static WORLD: World = World {
    lookups: AtomicU32::new(0),
    note_writes: AtomicU32::new(0),
    emails: AtomicU32::new(0),
    notes: Mutex::new(Vec::new()),
};

/// Where the process will die: while set, a write reports here when its effect is done, and
/// then hangs.
static CRASH: Mutex<Option<mpsc::UnboundedSender<&'static str>>> = Mutex::new(None);

async fn after_effect(tool: &'static str) {
    let crash = CRASH.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(tx) = crash {
        let _ = tx.send(tool);
        std::future::pending::<()>().await;
    }
}

/// Looks up the forecast; changes nothing.
#[tool(effect = "read")]
async fn lookup_weather(city: String) -> Result<Value, String> {
    WORLD.lookups.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "city": city, "forecast": "sunny, 24 °C" }))
}

/// Saves a note under the call's idempotency key, which the store deduplicates on.
#[tool(effect = "idempotent-write")]
async fn save_note(title: String, body: String, key: IdempotencyKey) -> Result<Value, String> {
    WORLD.note_writes.fetch_add(1, Ordering::SeqCst);
    let key = key.to_string();
    {
        let mut notes = WORLD.notes.lock().unwrap_or_else(PoisonError::into_inner);
        if notes.iter().any(|(k, _)| *k == key) {
            println!("    notes store: key {key} seen before, nothing changed");
        } else {
            println!("    notes store: saved under key {key}");
            notes.push((key.clone(), json!({ "title": title, "body": body })));
        }
    }
    after_effect("save_note").await;
    Ok(json!({ "saved": key }))
}

/// Sends an e-mail. No effect declared: a side effect.
#[tool]
async fn send_email(to: String) -> Result<Value, String> {
    WORLD.emails.fetch_add(1, Ordering::SeqCst);
    println!("    mail server: e-mail sent to {to}");
    after_effect("send_email").await;
    Ok(json!({ "sent_to": to }))
}

fn tools() -> Result<Toolbox, ToolboxError> {
    Toolbox::new()
        .with(lookup_weather {})?
        .with(save_note {})?
        .with(send_email {})
}

/// A result as the transcript shows it.
fn show(outcome: &ToolOutcome) -> String {
    match outcome {
        Ok(value) => value.to_string(),
        Err(failure) => format!("error: {failure}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ledger = MemoryLedger::new(); // stands in for a durable ledger that survives the crash
    let mut transcript: Vec<(CallKey, ToolOutcome)> = Vec::new();
    let key = |call: &str| CallKey::new("run-7", call);
    let calls = [
        ToolCall::new(
            key("call-1")?,
            "lookup_weather",
            json!({ "city": "Lisbon" }),
        ),
        ToolCall::new(
            key("call-2")?,
            "save_note",
            json!({ "title": "trip", "body": "pack sunscreen" }),
        ),
        ToolCall::new(
            key("call-3")?,
            "send_email",
            json!({ "to": "ana@example.com" }),
        ),
    ];

    println!("process 1: the agent calls three tools");
    let (tx, mut effects_done) = mpsc::unbounded_channel();
    *CRASH.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
    let first = ToolRunner::new(ledger.clone(), tools()?);
    // The read completes and commits, but the process dies before its result reaches the
    // transcript. The two writes do their work and the process dies while they run.
    let read = first.call(calls[0].clone()).await?;
    if let Some(result) = read.result() {
        println!("  {} committed {}", result.tool, show(&result.outcome));
    }
    tokio::select! {
        _ = async { tokio::join!(first.call(calls[1].clone()), first.call(calls[2].clone())) } => {
            return Err("the writes were meant to hang until the crash".into());
        }
        // Both writes have done their work: the process dies now.
        _ = async { for _ in 0..2 { effects_done.recv().await; } } => {}
    }
    drop(first);
    *CRASH.lock().unwrap_or_else(PoisonError::into_inner) = None;
    println!("  *** the process crashes ***\n");

    println!("process 2: restarted 10 minutes later; recovering run-7");
    let later = Timestamp::system_now() + Duration::from_secs(600);
    let second = ToolRunner::new(ledger.clone(), tools()?).with_epoch(later);
    // Re-runs are opt-in, per effect; a side effect cannot be opted in at all.
    if let Err(refused) = RecoveryPolicy::new().rerun(ToolEffect::SideEffect) {
        println!("  (asking to re-run side effects is refused: {refused})");
    }
    let policy = RecoveryPolicy::new()
        .rerun(ToolEffect::Read)?
        .rerun(ToolEffect::IdempotentWrite)?;
    println!("  recovery runs:");
    let report = second
        .recover("run-7", &policy, |k| transcript.iter().any(|(t, _)| t == k))
        .await?;
    println!("  recovery report:");
    for call in &report.calls {
        println!("    {call}");
        if let Some(outcome) = call.action.transcript_entry() {
            transcript.push((call.key.clone(), outcome.clone()));
        }
    }

    println!("\nan operator checks the mail server: the e-mail was delivered");
    for call in report.needs_attention() {
        let found = Ok(json!({ "sent_to": "ana@example.com", "confirmed_by": "operator" }));
        if let CallResponse::Done(result) = second
            .resolve(call.key.clone(), Resolution::Happened(found))
            .await?
        {
            println!("  {} resolved: {}", result.key, show(&result.outcome));
            transcript.push((result.key, result.outcome));
        }
    }

    println!("\ntranscript:");
    for (key, entry) in &transcript {
        println!("  {key}: {}", show(entry));
    }
    let notes = WORLD
        .notes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len();
    println!(
        "\nthe world saw: lookup_weather ran {}x; save_note ran {}x, the store holds {notes} note; \
         send_email ran {}x",
        WORLD.lookups.load(Ordering::SeqCst),
        WORLD.note_writes.load(Ordering::SeqCst),
        WORLD.emails.load(Ordering::SeqCst),
    );
    Ok(())
}
