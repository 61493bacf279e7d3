//! Agent tools through a crash: a read, an idempotent write and a side effect are running when
//! the process dies; a restarted process recovers the run and says what it did with each.
//!
//! Run with `cargo run --example agent_tools`. Nothing sleeps: the "crash" drops the running
//! calls, and the restart pretends to happen ten minutes later, after every lease expired.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use retry_core::effects::{
    CallKey, CallOutcome, MemoryLedger, RecoveryPolicy, Resolution, Timestamp, ToolCall,
    ToolContext, ToolEffect, ToolOutcome, ToolRunner, ToolSpec, Toolbox, ToolboxError, tool_fn,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// What the outside world saw: how often each tool ran, and the notes store, which (like a
/// good downstream API) deduplicates writes on the idempotency key.
#[derive(Default)]
struct World {
    lookups: AtomicU32,
    note_writes: AtomicU32,
    emails: AtomicU32,
    notes: Mutex<Vec<(String, Value)>>,
}

/// The three tools, acting on `world`. With `hang`, the writes report on it when their effect
/// is done and then hang: that is where the process will die.
fn tools(
    world: &Arc<World>,
    hang: Option<mpsc::UnboundedSender<&'static str>>,
) -> Result<Toolbox, ToolboxError> {
    let after_effect = move |name: &'static str| {
        let hang = hang.clone();
        async move {
            if let Some(tx) = hang {
                let _ = tx.send(name);
                std::future::pending::<()>().await;
            }
        }
    };

    let w = world.clone();
    let lookup_weather = tool_fn(
        ToolSpec::new("lookup_weather").with_effect(ToolEffect::Read),
        move |city: String, _: ToolContext| {
            w.lookups.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, String>(json!({ "city": city, "forecast": "sunny, 24 °C" })) }
        },
    );

    let (w, after) = (world.clone(), after_effect.clone());
    let save_note = tool_fn(
        ToolSpec::new("save_note").with_effect(ToolEffect::IdempotentWrite),
        move |note: Value, ctx: ToolContext| {
            let (w, after) = (w.clone(), after.clone());
            async move {
                w.note_writes.fetch_add(1, Ordering::SeqCst);
                let key = ctx.idempotency_key().to_string();
                {
                    let mut notes = w.notes.lock().unwrap_or_else(PoisonError::into_inner);
                    if notes.iter().any(|(k, _)| *k == key) {
                        println!("    notes store: key {key} seen before, nothing changed");
                    } else {
                        println!("    notes store: saved under key {key}");
                        notes.push((key.clone(), note));
                    }
                }
                after("save_note").await;
                Ok::<_, String>(json!({ "saved": key }))
            }
        },
    );

    let (w, after) = (world.clone(), after_effect);
    let send_email = tool_fn(
        ToolSpec::new("send_email"), // no effect declared: a side effect
        move |to: String, _: ToolContext| {
            let (w, after) = (w.clone(), after.clone());
            async move {
                w.emails.fetch_add(1, Ordering::SeqCst);
                println!("    mail server: e-mail sent to {to}");
                after("send_email").await;
                Ok::<_, String>(json!({ "sent_to": to }))
            }
        },
    );

    Toolbox::new()
        .with(lookup_weather)?
        .with(save_note)?
        .with(send_email)
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
    let world = Arc::new(World::default());
    let mut transcript: Vec<(CallKey, ToolOutcome)> = Vec::new();
    let key = |call: &str| CallKey::new("run-7", call);
    let calls = [
        ToolCall::new(key("call-1")?, "lookup_weather", json!("Lisbon")),
        ToolCall::new(
            key("call-2")?,
            "save_note",
            json!({ "title": "trip", "body": "pack sunscreen" }),
        ),
        ToolCall::new(key("call-3")?, "send_email", json!("ana@example.com")),
    ];

    println!("process 1: the agent calls three tools");
    let (tx, mut effects_done) = mpsc::unbounded_channel();
    let first = ToolRunner::new(ledger.clone(), tools(&world, Some(tx))?);
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
    println!("  *** the process crashes ***\n");

    println!("process 2: restarted 10 minutes later; recovering run-7");
    let later = Timestamp::system_now() + Duration::from_secs(600);
    let second = ToolRunner::new(ledger.clone(), tools(&world, None)?).with_epoch(later);
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
        if let CallOutcome::Done(result) = second
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
    let notes = world
        .notes
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len();
    println!(
        "\nthe world saw: lookup_weather ran {}x; save_note ran {}x, the store holds {notes} note; \
         send_email ran {}x",
        world.lookups.load(Ordering::SeqCst),
        world.note_writes.load(Ordering::SeqCst),
        world.emails.load(Ordering::SeqCst),
    );
    Ok(())
}
