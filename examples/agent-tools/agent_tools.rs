//! Agent tools through a crash: a read, an idempotent write and a side effect are running when
//! the process dies; a restarted process recovers the run and says what it did with each.
//!
//! Run with `cargo run -p retry-examples-agent-tools --example agent_tools`. Nothing sleeps: the "crash" drops the running
//! calls, and the restart pretends to happen ten minutes later, after every lease expired.
//!
//! With a database, the crash and the restart are real processes:
//!
//! ```text
//! cargo run -p retry-examples-agent-tools --example agent_tools -- --db agent.db --crash-after send_email
//! cargo run -p retry-examples-agent-tools --example agent_tools -- --db agent.db
//! ```
//!
//! The first command records every call in `agent.db` (SQLite) and kills itself with SIGKILL
//! right after the step you name; the second finds the run in the file, recovers it, says what
//! it did with each call, and finishes the run. The outside world (the mail server, the notes
//! store, the bank) keeps its log beside the database, in `agent.db.world`, so that the second
//! process sees what the first one did. Steps: `lookup_weather`, `save_note`, `send_email`,
//! `pay_invoice` (each: the tool acted, its result is not recorded yet) and `approval` (the
//! payment waits for a person's approval).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use retry_durable::SqliteStore;
use retry_toolkit::effects::{
    CallKey, CallResponse, IdempotencyKey, Ledger, MemoryLedger, Recovered, RecoveryAction,
    RecoveryPolicy, Resolution, Review, RunnerError, ToolCall, ToolEffect, ToolOutcome, ToolRunner,
    Toolbox, ToolboxError,
};
use retry_toolkit::store::Timestamp;
use retry_toolkit::tool;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// What the outside world saw, one line per event (`send_email ana@example.com`): kept in
/// memory, and with `--db` also in a file, so that a restarted process sees it too.
struct World {
    events: Mutex<Vec<String>>,
    file: Mutex<Option<PathBuf>>,
}

static WORLD: World = World {
    events: Mutex::new(Vec::new()),
    file: Mutex::new(None),
};

impl World {
    /// Keeps the world's log in `path` from now on, starting from what it holds.
    fn open(&self, path: PathBuf) -> std::io::Result<()> {
        let earlier = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        *self.events.lock().unwrap_or_else(PoisonError::into_inner) = earlier;
        *self.file.lock().unwrap_or_else(PoisonError::into_inner) = Some(path);
        Ok(())
    }

    fn record(&self, event: String) -> Result<(), String> {
        if let Some(path) = &*self.file.lock().unwrap_or_else(PoisonError::into_inner) {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(format!("{event}\n").as_bytes()))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
        Ok(())
    }

    fn saw(&self, event: &str) -> bool {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.iter().any(|e| e == event)
    }

    /// How many events begin with `prefix`.
    fn count(&self, prefix: &str) -> usize {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.iter().filter(|e| e.starts_with(prefix)).count()
    }
}

/// Where the process will die. Without a database: while set, a write reports here when its
/// effect is done, and then hangs. With one: the step after which it kills itself.
static CRASH: Mutex<Option<mpsc::UnboundedSender<&'static str>>> = Mutex::new(None);
static CRASH_AFTER: Mutex<Option<String>> = Mutex::new(None);

/// Dies like `kill -9` would have it: no destructor runs, nothing is flushed or closed.
fn die(what: &str) -> ! {
    println!("  *** killing this process (SIGKILL) {what} ***");
    let _ = std::io::stdout().flush();
    #[cfg(unix)]
    let _ = std::process::Command::new("kill")
        .args(["-9", &std::process::id().to_string()])
        .status();
    std::process::abort()
}

fn crash_after(step: &str) -> bool {
    CRASH_AFTER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_deref()
        == Some(step)
}

async fn after_effect(tool: &'static str) {
    if crash_after(tool) {
        die(&format!(
            "right after {tool} acted, before its result is recorded"
        ));
    }
    let crash = CRASH.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(tx) = crash {
        let _ = tx.send(tool);
        std::future::pending::<()>().await;
    }
}

/// Looks up the forecast; changes nothing.
#[tool(effect = "read")]
async fn lookup_weather(city: String) -> Result<Value, String> {
    WORLD.record(format!("lookup_weather {city}"))?;
    after_effect("lookup_weather").await;
    Ok(json!({ "city": city, "forecast": "sunny, 24 °C" }))
}

/// Saves a note under the call's idempotency key, which the store deduplicates on.
#[tool(effect = "idempotent-write")]
async fn save_note(title: String, body: String, key: IdempotencyKey) -> Result<Value, String> {
    let key = key.to_string();
    if WORLD.count(&format!("save_note {key} saved")) > 0 {
        println!("    notes store: key {key} seen before, nothing changed");
        WORLD.record(format!("save_note {key} repeated"))?;
    } else {
        println!("    notes store: saved under key {key}");
        WORLD.record(format!(
            "save_note {key} saved: {title}, {} bytes",
            body.len()
        ))?;
    }
    after_effect("save_note").await;
    Ok(json!({ "saved": key }))
}

/// Sends an e-mail. No effect declared: a side effect.
#[tool]
async fn send_email(to: String) -> Result<Value, String> {
    WORLD.record(format!("send_email {to}"))?;
    println!("    mail server: e-mail sent to {to}");
    after_effect("send_email").await;
    Ok(json!({ "sent_to": to }))
}

/// Pays an invoice: a side effect that a person approves first.
#[tool(requires_approval = true)]
async fn pay_invoice(invoice: String, amount_eur: u32) -> Result<Value, String> {
    WORLD.record(format!("pay_invoice {invoice}"))?;
    println!("    bank: paid invoice {invoice}, {amount_eur} EUR");
    after_effect("pay_invoice").await;
    Ok(json!({ "paid": invoice }))
}

fn tools() -> Result<Toolbox, ToolboxError> {
    Toolbox::new()
        .with(lookup_weather {})?
        .with(save_note {})?
        .with(send_email {})?
        .with(pay_invoice {})
}

/// A result as the transcript shows it.
fn show(outcome: &ToolOutcome) -> String {
    match outcome {
        Ok(value) => value.to_string(),
        Err(failure) => format!("error: {failure}"),
    }
}

const USAGE: &str = "usage: agent_tools [--db <path> [--crash-after <step>]]
  --db <path>           record the run in a SQLite file: run, kill, run again
  --crash-after <step>  kill this process with SIGKILL right after <step>, one of:
                        lookup_weather, save_note, send_email, pay_invoice (the tool acted,
                        its result is not recorded yet), approval (the payment waits for it)";

const STEPS: [&str; 5] = [
    "lookup_weather",
    "save_note",
    "send_email",
    "pay_invoice",
    "approval",
];

/// What the command line asks for.
struct Args {
    db: Option<PathBuf>,
    crash_after: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        db: None,
        crash_after: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--db" => {
                let path = args.next().ok_or("`--db` needs a path")?;
                parsed.db = Some(PathBuf::from(path));
            }
            "--crash-after" => {
                let step = args.next().ok_or("`--crash-after` needs a step")?;
                if !STEPS.contains(&step.as_str()) {
                    return Err(format!(
                        "`{step}` is not a step; use one of {}",
                        STEPS.join(", ")
                    ));
                }
                parsed.crash_after = Some(step);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if parsed.crash_after.is_some() && parsed.db.is_none() {
        return Err(
            "`--crash-after` needs `--db`: without a database a crash loses the run".into(),
        );
    }
    Ok(parsed)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("error: {why}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    match args.db {
        None => in_memory().await,
        Some(db) => {
            *CRASH_AFTER.lock().unwrap_or_else(PoisonError::into_inner) = args.crash_after;
            durable(&db).await
        }
    }
}

/// The run without a database: one process, a simulated crash, a simulated restart.
async fn in_memory() -> Result<(), Box<dyn std::error::Error>> {
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
    let first = ToolRunner::new(ledger.clone(), tools()?);
    // The read completes and commits, but the process dies before its result reaches the
    // transcript. The two writes do their work and the process dies while they run.
    let read = first.call(calls[0].clone()).await?;
    if let Some(result) = read.result() {
        println!("  {} committed {}", result.tool, show(&result.outcome));
    }
    let (tx, mut effects_done) = mpsc::unbounded_channel();
    *CRASH.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
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
    println!("  recovery runs:");
    let report = second
        .recover("run-7", &policy()?, |k| {
            transcript.iter().any(|(t, _)| t == k)
        })
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

    print_transcript(&transcript);
    println!(
        "\nthe world saw: lookup_weather ran {}x; save_note ran {}x, the store holds {} note; \
         send_email ran {}x",
        WORLD.count("lookup_weather "),
        WORLD.count("save_note "),
        WORLD.count("save_note run-7:call-2 saved"),
        WORLD.count("send_email "),
    );
    Ok(())
}

/// Re-runs are opt-in, per effect: reads and idempotent writes (with their key); a side
/// effect cannot be opted in at all.
fn policy() -> Result<RecoveryPolicy, Box<dyn std::error::Error>> {
    Ok(RecoveryPolicy::new()
        .rerun(ToolEffect::Read)?
        .rerun(ToolEffect::IdempotentWrite)?)
}

fn print_transcript(transcript: &[(CallKey, ToolOutcome)]) {
    println!("\ntranscript:");
    for (key, entry) in transcript {
        println!("  {key}: {}", show(entry));
    }
}

/// The run of this example, in order.
fn script() -> Result<Vec<ToolCall>, Box<dyn std::error::Error>> {
    let key = |call: &str| CallKey::new("run-7", call);
    Ok(vec![
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
        ToolCall::new(
            key("call-4")?,
            "pay_invoice",
            json!({ "invoice": "INV-42", "amount_eur": 120 }),
        ),
    ])
}

/// The run on a SQLite file: a new run, or the recovery of one a killed process left.
async fn durable(db: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let store = SqliteStore::open(db)?;
    let mut world = db.as_os_str().to_owned();
    world.push(".world");
    WORLD.open(PathBuf::from(world))?;
    let recorded = store.list_run("run-7".to_owned()).await?;
    let mut transcript: Vec<(CallKey, ToolOutcome)> = Vec::new();

    let runner = if recorded.is_empty() {
        println!(
            "run-7 is not in {}: a new run; the agent calls four tools",
            db.display()
        );
        ToolRunner::new(store.clone(), tools()?)
    } else {
        let calls = match recorded.len() {
            1 => "1 call".to_owned(),
            n => format!("{n} calls"),
        };
        println!(
            "run-7 is in {}: {calls} recorded by an earlier process; recovering",
            db.display()
        );
        // This example is run-7's only runner, so the process before this one is dead and
        // whatever it held is free: its leases are taken over. Runners on several machines
        // would leave them to run out instead.
        let runner = ToolRunner::new(store.clone(), tools()?);
        let policy = policy()?.take_over_leases(true);
        // The transcript died with the process: every committed result is handed back.
        let report = runner.recover("run-7", &policy, |_| false).await?;
        for call in &report.calls {
            println!("  {}", explain(call));
            if let Some(outcome) = call.action.transcript_entry() {
                transcript.push((call.key.clone(), outcome.clone()));
            }
        }
        runner
    };

    // The agent goes on with every call the transcript lacks.
    let mut said = false;
    for call in script()? {
        if transcript.iter().any(|(k, _)| *k == call.key) {
            continue;
        }
        if !recorded.is_empty() && !said {
            println!("the agent goes on:");
            said = true;
        }
        let (key, tool) = (call.key.clone(), call.tool.clone());
        let response = runner.call(call).await;
        let outcome = settle(&runner, &key, &tool, response).await?;
        println!("  {tool}: {}", show(&outcome));
        transcript.push((key, outcome));
    }
    if let Some(step) = CRASH_AFTER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_deref()
    {
        println!("(--crash-after {step}: that step did not run in this process)");
    }

    print_transcript(&transcript);
    println!(
        "\nthe world saw, over every process: lookup_weather ran {}x; save_note ran {}x, the \
         store holds {} note; send_email ran {}x; pay_invoice ran {}x",
        WORLD.count("lookup_weather "),
        WORLD.count("save_note "),
        WORLD.count("save_note run-7:call-2 saved"),
        WORLD.count("send_email "),
        WORLD.count("pay_invoice "),
    );
    Ok(())
}

/// Brings a call to a committed result: an operator approves what waits for approval, and
/// checks the outside world for what may have happened.
async fn settle<L: Ledger>(
    runner: &ToolRunner<L>,
    key: &CallKey,
    tool: &str,
    mut response: Result<CallResponse, RunnerError>,
) -> Result<ToolOutcome, RunnerError> {
    loop {
        response = match response {
            Ok(CallResponse::Done(result)) => return Ok(result.outcome),
            Ok(CallResponse::AwaitingApproval(key)) => {
                println!("  {tool} waits for approval");
                if crash_after("approval") {
                    die("while pay_invoice waits for approval");
                }
                println!("  an operator approves {key}");
                runner.review(key, Review::Approve).await
            }
            Err(RunnerError::NeedsReconciliation { key, .. }) => {
                let finding = operator_checks(tool);
                match &finding {
                    Resolution::Happened(_) => println!(
                        "  an operator checks the outside world for {key}: it happened; \
                         recording that"
                    ),
                    Resolution::DidNotHappen => println!(
                        "  an operator checks the outside world for {key}: it did not \
                         happen; running it"
                    ),
                }
                runner.resolve(key, finding).await
            }
            Err(e) => {
                println!("  {key}: {e}");
                return Err(e);
            }
        };
    }
}

/// What an operator finds in the outside world's log about a call of `tool`.
fn operator_checks(tool: &str) -> Resolution {
    let found = match tool {
        "send_email" => WORLD
            .saw("send_email ana@example.com")
            .then(|| json!({ "sent_to": "ana@example.com", "confirmed_by": "operator" })),
        "pay_invoice" => WORLD
            .saw("pay_invoice INV-42")
            .then(|| json!({ "paid": "INV-42", "confirmed_by": "operator" })),
        _ => None,
    };
    match found {
        Some(value) => Resolution::Happened(Ok(value)),
        None => Resolution::DidNotHappen,
    }
}

/// What recovery did with a call, in plain words.
fn explain(call: &Recovered) -> String {
    let what = match &call.action {
        RecoveryAction::Completed(outcome) => format!(
            "committed by the earlier process: replayed the recorded result, the tool was not \
             called again: {}",
            show(outcome)
        ),
        RecoveryAction::AlreadyInTranscript => {
            "committed, and the transcript has it already: nothing to do".to_owned()
        }
        RecoveryAction::Executed(outcome) => {
            format!("recorded, never started: ran it now: {}", show(outcome))
        }
        RecoveryAction::Rerun(outcome) if call.effect == ToolEffect::Read => format!(
            "started, no result recorded: re-ran the read-only call (reading twice is \
             harmless): {}",
            show(outcome)
        ),
        RecoveryAction::Rerun(outcome) => format!(
            "started, no result recorded: re-ran the idempotent write with the same key {}, \
             which the notes store recognises: {}",
            call.key.idempotency_key(),
            show(outcome)
        ),
        RecoveryAction::AwaitingApproval => {
            "waiting for approval: nothing runs until a person decides".to_owned()
        }
        RecoveryAction::NeedsReconciliation { reason, .. } => format!(
            "sent the side effect to reconciliation: {reason}, so it may have happened; it is \
             never run again on its own, a person decides"
        ),
        RecoveryAction::Leased { until } => {
            format!("still leased by a live runner until {until}: left alone")
        }
        RecoveryAction::NotStarted => "had not started: left for the agent".to_owned(),
        RecoveryAction::Failed(error) => format!("recovery could not handle it: {error}"),
    };
    format!("{} {} ({}): {what}", call.key, call.tool, call.effect)
}
