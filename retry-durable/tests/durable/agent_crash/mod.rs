//! The scripted agent run of the crash tests, written once and run on every durable ledger:
//! the tools and their outside witness, the agent and the person it asks, the crash points, and
//! what must hold after a crash, a recovery and the rest of the run.
//!
//! # The run
//!
//! Nine calls, in order, through `ToolRunner`: two reads, two idempotent writes, two plain side
//! effects, one side effect that waits for a person's approval, and two side effects whose
//! caller cancels them while the tool runs — one after the tool acted, one before — so that
//! reconciliation (`reconcile`, then a person's `commit` or `reopen`) happens in the run too.
//! Together they make every kind of ledger write the runner makes: a new call recorded with its
//! first step (`insert_then`: `start` or `await_approval`), and `compare_and_swap` to
//! `approve`, `start`, `commit`, `reconcile` and `reopen`.
//!
//! # Crash points
//!
//! Numbered in the order the run passes them: just before and just after each ledger write
//! (a wrapping [`CrashLedger`]), and just before and just after each tool acts. A child process
//! told to die at point N kills itself with SIGKILL when it reaches it; the parent tries
//! N = 0, 1, 2, … until a child finishes the run without reaching its point.
//!
//! # The witness
//!
//! Every tool appends a line to a file of its run when it acts (`<call> <tool> <idempotency
//! key>`): the mail server, the notes store, the invoice system — what the world saw, whatever
//! the ledger says.

#![allow(dead_code, unreachable_pub)]

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_toolkit::Clock;
use retry_toolkit::TokioClock;
use retry_toolkit::effects::{
    CallKey, CallLimits, CallRecord, CallResponse, CallState, Insert, Ledger, LedgerError,
    RecoveryAction, RecoveryPolicy, Resolution, Review, RunnerError, ToolCall, ToolContext,
    ToolEffect, ToolOutcome, ToolRunner, ToolSpec, Toolbox, Transition, tool_fn,
};
use retry_toolkit::store::{Revision, Timestamp};
use serde_json::{Value, json};
use tokio::sync::Notify;

const LOOKUP: ToolSpec = ToolSpec::new("lookup").with_effect(ToolEffect::Read);
const SAVE_NOTE: ToolSpec = ToolSpec::new("save_note").with_effect(ToolEffect::IdempotentWrite);
const SEND_MAIL: ToolSpec = ToolSpec::new("send_mail").with_effect(ToolEffect::SideEffect);
const PAY_INVOICE: ToolSpec = ToolSpec::new("pay_invoice")
    .with_effect(ToolEffect::SideEffect)
    .with_approval();

/// How the agent stops a call while its tool runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// The tool has acted; the caller cancels before its result is recorded.
    AfterAct,
    /// The tool has not acted yet; the caller cancels it.
    BeforeAct,
}

/// One call of the run.
pub struct Step {
    pub call: &'static str,
    pub spec: ToolSpec,
    pub interrupt: Option<Interrupt>,
}

const fn step(call: &'static str, spec: ToolSpec) -> Step {
    Step {
        call,
        spec,
        interrupt: None,
    }
}

/// The run, in order.
pub const SCRIPT: [Step; 9] = [
    step("read-1", LOOKUP),
    step("note-1", SAVE_NOTE),
    step("mail-1", SEND_MAIL),
    step("read-2", LOOKUP),
    step("note-2", SAVE_NOTE),
    step("mail-2", SEND_MAIL),
    step("invoice-1", PAY_INVOICE),
    Step {
        call: "mail-3",
        spec: SEND_MAIL,
        interrupt: Some(Interrupt::AfterAct),
    },
    Step {
        call: "mail-4",
        spec: SEND_MAIL,
        interrupt: Some(Interrupt::BeforeAct),
    },
];

fn spec_of(call: &str) -> ToolSpec {
    SCRIPT
        .iter()
        .find(|s| s.call == call)
        .map(|s| s.spec)
        .unwrap_or_else(|| panic!("no call {call} in the script"))
}

/// What a crash point's call is, for the matrix: its effect, and whether it needs approval.
pub fn class_of(call: &str) -> &'static str {
    let spec = spec_of(call);
    match spec.effect() {
        ToolEffect::Read => "read",
        ToolEffect::IdempotentWrite => "idempotent write",
        ToolEffect::SideEffect if spec.requires_approval() => "side effect, approval",
        ToolEffect::SideEffect => "side effect",
    }
}

// ---------------------------------------------------------------------------------------------
// Crash points

/// The crash points a process passes, and the one it dies at.
pub struct Points {
    passed: AtomicU32,
    die_at: Option<u32>,
}

impl Points {
    /// Passes every point.
    pub fn never() -> Arc<Self> {
        Arc::new(Points {
            passed: AtomicU32::new(0),
            die_at: None,
        })
    }

    /// Dies at point `n`.
    pub fn die_at(n: u32) -> Arc<Self> {
        Arc::new(Points {
            passed: AtomicU32::new(0),
            die_at: Some(n),
        })
    }

    /// Passes the point `label` (`when|what|call`); kills this process with SIGKILL if it is
    /// the one to die at: no destructor runs, nothing is flushed, no connection is closed.
    pub fn pass(&self, label: &str) {
        let n = self.passed.fetch_add(1, Ordering::SeqCst);
        if self.die_at == Some(n) {
            println!("CRASH {n} {label}");
            let _ = Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            loop {
                std::thread::park(); // until the signal lands
            }
        }
    }

    /// How many points were passed.
    pub fn passed(&self) -> u32 {
        self.passed.load(Ordering::SeqCst)
    }
}

/// The name of the write that stores `next`: the transition that leads to its state.
pub fn write_name(next: &CallRecord) -> &'static str {
    match next.state {
        CallState::Prepared if next.approved && next.attempts == 0 => "approve",
        CallState::Prepared => "reopen",
        CallState::AwaitingApproval => "await_approval",
        CallState::Started => "start",
        CallState::Committed { .. } => "commit",
        CallState::NeedsReconciliation { .. } => "reconcile",
    }
}

/// A [`Ledger`] that passes a crash point just before and just after each write to `inner`.
pub struct CrashLedger<L> {
    pub inner: L,
    pub points: Arc<Points>,
}

impl<L: Ledger> Ledger for CrashLedger<L> {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        let call = record.key.call_id().to_owned();
        self.points.pass(&format!("before|insert|{call}"));
        let inserted = self.inner.insert(record).await;
        self.points.pass(&format!("after|insert|{call}"));
        inserted
    }

    /// The runner's write of a new call, passed on whole: one write, so one point before it
    /// and one after (`insert+start`, `insert+await_approval`).
    async fn insert_then(
        &self,
        record: CallRecord,
        transition: Transition,
    ) -> Result<Insert, LedgerError> {
        let what = format!("insert+{}|{}", transition.name(), record.key.call_id());
        self.points.pass(&format!("before|{what}"));
        let inserted = self.inner.insert_then(record, transition).await;
        self.points.pass(&format!("after|{what}"));
        inserted
    }

    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.inner.get(key).await
    }

    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        let what = format!("{}|{}", write_name(&next), next.key.call_id());
        self.points.pass(&format!("before|{what}"));
        let written = self.inner.compare_and_swap(expected, next).await;
        self.points.pass(&format!("after|{what}"));
        written
    }

    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.inner.list_run(run_id).await
    }
}

// ---------------------------------------------------------------------------------------------
// One run's files: the witness and the agent's transcript

/// One agent run of a crash test: its id and where its witness and transcript are.
#[derive(Clone, Debug)]
pub struct Run {
    pub id: String,
    pub dir: PathBuf,
}

/// One line of the witness: a tool acted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub call: String,
    pub tool: String,
    pub key: String,
}

impl Run {
    pub fn new(id: impl Into<String>, dir: &Path) -> Self {
        Run {
            id: id.into(),
            dir: dir.to_owned(),
        }
    }

    fn witness_path(&self) -> PathBuf {
        self.dir.join(format!("{}.witness", self.id))
    }

    fn transcript_path(&self) -> PathBuf {
        self.dir.join(format!("{}.transcript", self.id))
    }

    pub fn key(&self, call: &str) -> CallKey {
        CallKey::new(self.id.clone(), call).unwrap()
    }

    /// What the world saw, in order.
    pub fn witness(&self) -> Vec<Seen> {
        read_lines(&self.witness_path())
            .iter()
            .map(|line| {
                let mut parts = line.splitn(3, ' ');
                let mut next = || parts.next().unwrap_or_default().to_owned();
                Seen {
                    call: next(),
                    tool: next(),
                    key: next(),
                }
            })
            .collect()
    }

    /// How often the tool of `call` acted.
    pub fn acted(&self, call: &str) -> usize {
        self.witness().iter().filter(|s| s.call == call).count()
    }

    /// The transcript: each result the agent has taken in, in order.
    pub fn transcript(&self) -> Vec<(String, ToolOutcome)> {
        read_lines(&self.transcript_path())
            .iter()
            .map(|line| {
                let entry: Value = serde_json::from_str(line).unwrap();
                let call = entry["call"].as_str().unwrap().to_owned();
                (
                    call,
                    serde_json::from_value(entry["outcome"].clone()).unwrap(),
                )
            })
            .collect()
    }

    pub fn in_transcript(&self, call: &str) -> bool {
        self.transcript().iter().any(|(c, _)| c == call)
    }

    fn append_transcript(&self, call: &str, outcome: &ToolOutcome) {
        let line = json!({ "call": call, "outcome": outcome });
        append(&self.transcript_path(), &format!("{line}\n"));
    }
}

fn read_lines(path: &Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// One `write` of a whole line on a file opened for appending: a SIGKILL leaves the line in
/// or out, never half of it.
fn append(path: &Path, line: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

// ---------------------------------------------------------------------------------------------
// The tools

/// Calls the agent is about to interrupt, and the signal each one's tool gives when the
/// moment has come.
#[derive(Default)]
pub struct Interrupts(Mutex<HashMap<String, (Interrupt, Arc<Notify>)>>);

impl Interrupts {
    fn arm(&self, call: &str, interrupt: Interrupt) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        self.0
            .lock()
            .unwrap()
            .insert(call.to_owned(), (interrupt, Arc::clone(&notify)));
        notify
    }

    fn disarm(&self, call: &str) {
        self.0.lock().unwrap().remove(call);
    }

    fn armed(&self, call: &str) -> Option<(Interrupt, Arc<Notify>)> {
        self.0.lock().unwrap().get(call).cloned()
    }
}

/// What the tools of one process share.
pub struct World {
    pub run: Run,
    pub points: Arc<Points>,
    pub interrupts: Interrupts,
}

impl World {
    pub fn new(run: Run, points: Arc<Points>) -> Arc<Self> {
        Arc::new(World {
            run,
            points,
            interrupts: Interrupts::default(),
        })
    }
}

/// The one thing every tool does: act on the world, which the witness records, between two
/// crash points; or hang where the agent is about to interrupt it.
async fn act(world: Arc<World>, ctx: ToolContext, args: Value) -> Result<Value, String> {
    let call = ctx.call().call_id().to_owned();
    let tool = spec_of(&call).name();
    let interrupt = world.interrupts.armed(&call);
    if let Some((Interrupt::BeforeAct, notify)) = &interrupt {
        notify.notify_one();
        std::future::pending::<()>().await;
    }
    world.points.pass(&format!("before|act|{call}"));
    append(
        &world.run.witness_path(),
        &format!("{call} {tool} {}\n", ctx.idempotency_key()),
    );
    world.points.pass(&format!("after|act|{call}"));
    if let Some((Interrupt::AfterAct, notify)) = &interrupt {
        notify.notify_one();
        std::future::pending::<()>().await;
    }
    Ok(json!({ "tool": tool, "call": call, "args": args }))
}

pub fn toolbox(world: &Arc<World>) -> Toolbox {
    let mut tools = Toolbox::new();
    for spec in [LOOKUP, SAVE_NOTE, SEND_MAIL, PAY_INVOICE] {
        let world = Arc::clone(world);
        tools
            .register(tool_fn(spec, move |args: Value, ctx: ToolContext| {
                act(Arc::clone(&world), ctx, args)
            }))
            .unwrap();
    }
    tools
}

// ---------------------------------------------------------------------------------------------
// The agent, and the person it asks

/// Runs the script from wherever the transcript says it stands: every call the transcript
/// lacks is submitted (a committed one is answered from the ledger), approvals are given, and
/// unknown outcomes go to a person who checks the witness.
pub async fn agent<L: Ledger, C: Clock>(
    runner: &ToolRunner<L, C>,
    world: &World,
) -> Result<(), RunnerError> {
    let run = &world.run;
    for (n, step) in SCRIPT.iter().enumerate() {
        if run.in_transcript(step.call) {
            continue;
        }
        let call = ToolCall::new(run.key(step.call), step.spec.name(), json!({ "n": n }));
        let response = match step.interrupt {
            None => runner.call(call).await,
            Some(interrupt) => {
                let notify = world.interrupts.arm(step.call, interrupt);
                let signal = async move { notify.notified().await };
                let response = runner
                    .call_with(call, CallLimits::new().cancel_on(signal))
                    .await;
                world.interrupts.disarm(step.call);
                response
            }
        };
        settle(runner, run, response).await?;
    }
    Ok(())
}

/// Takes a call's response to a committed result in the transcript: a person approves what
/// waits for approval and reports what the witness says of an unknown outcome.
pub async fn settle<L: Ledger, C: Clock>(
    runner: &ToolRunner<L, C>,
    run: &Run,
    mut response: Result<CallResponse, RunnerError>,
) -> Result<(), RunnerError> {
    loop {
        response = match response {
            Ok(CallResponse::Done(result)) => {
                run.append_transcript(result.key.call_id(), &result.outcome);
                return Ok(());
            }
            Ok(CallResponse::AwaitingApproval(key)) => runner.review(key, Review::Approve).await,
            Err(RunnerError::NeedsReconciliation { key, .. }) => {
                let finding = person_checks(run, key.call_id());
                runner.resolve(key, finding).await
            }
            Err(e) => return Err(e),
        };
    }
}

/// A person looks the call up in the world: it happened, or it verifiably did not.
fn person_checks(run: &Run, call: &str) -> Resolution {
    if run.acted(call) > 0 {
        Resolution::Happened(Ok(json!({ "call": call, "confirmed_by": "a person" })))
    } else {
        Resolution::DidNotHappen
    }
}

// ---------------------------------------------------------------------------------------------
// The child

const CHILD_URL: &str = "RETRY_DURABLE_AGENT_CRASH_URL";
const CHILD_DIR: &str = "RETRY_DURABLE_AGENT_CRASH_DIR";
const CHILD_RUN: &str = "RETRY_DURABLE_AGENT_CRASH_RUN";
const CHILD_DIE_AT: &str = "RETRY_DURABLE_AGENT_CRASH_AT";

/// What a child is told: the database, and the run and crash point that are its own.
pub struct Child {
    pub url: String,
    pub run: Run,
    pub die_at: u32,
}

impl Child {
    /// The child's orders, or `None` in the ordinary test run.
    pub fn from_env() -> Option<Child> {
        let url = std::env::var(CHILD_URL).ok()?;
        let dir = PathBuf::from(std::env::var(CHILD_DIR).unwrap());
        let run = Run::new(std::env::var(CHILD_RUN).unwrap(), &dir);
        let die_at = std::env::var(CHILD_DIE_AT).unwrap().parse().unwrap();
        Some(Child { url, run, die_at })
    }

    /// Runs the script on `ledger` until the crash point; says so if it never came.
    pub async fn run(self, ledger: impl Ledger) {
        let points = Points::die_at(self.die_at);
        let world = World::new(self.run, Arc::clone(&points));
        let ledger = CrashLedger {
            inner: ledger,
            points: Arc::clone(&points),
        };
        let runner = ToolRunner::new(ledger, toolbox(&world));
        agent(&runner, &world).await.unwrap();
        println!("RUN COMPLETE {}", points.passed());
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: every crash point, then recovery and the rest of the run

/// A durable ledger under test.
pub trait Backend {
    type Store: Ledger + Clone + 'static;
    /// For the matrix.
    const NAME: &'static str;
    /// Opens the store at `url`, as a restarted process would.
    fn open(url: &str) -> impl std::future::Future<Output = Self::Store>;
    /// How many history rows record each call of `run` as committed.
    fn commits_in_history(
        url: &str,
        run: &str,
    ) -> impl std::future::Future<Output = BTreeMap<String, i64>>;
}

/// One crash point, killed and recovered.
#[derive(Clone, Debug)]
pub struct Covered {
    pub n: u32,
    /// `before` or `after`.
    pub when: String,
    /// The write (`insert`, `start`, …) or `act`.
    pub what: String,
    pub call: String,
    /// The call's state when the child died, or `-` if it was not recorded.
    pub left: String,
    /// What recovery did with it.
    pub recovery: String,
}

/// The recovery policy of the run: reads and idempotent writes whose runner died are re-run
/// (with the same key); side effects never are.
pub fn policy() -> RecoveryPolicy {
    RecoveryPolicy::new()
        .rerun(ToolEffect::Read)
        .unwrap()
        .rerun(ToolEffect::IdempotentWrite)
        .unwrap()
}

/// Crashes a child at every crash point of the script on `url`, in turn, and recovers each in
/// this process; returns the points, in order. `child_test` is the test function that calls
/// [`Child::run`].
pub async fn every_crash_point<B: Backend>(url: &str, child_test: &str) -> Vec<Covered> {
    let dir = tempfile::tempdir().unwrap();
    let mut covered = Vec::new();
    for n in 0.. {
        assert!(n < 1_000, "the run never completes");
        let run = Run::new(format!("point-{n}"), dir.path());
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", child_test, "--nocapture", "--test-threads", "1"])
            .env(CHILD_URL, url)
            .env(CHILD_DIR, dir.path())
            .env(CHILD_RUN, &run.id)
            .env(CHILD_DIE_AT, n.to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The harness prints the test's name on the line the child's first words go to.
        let said = |prefix: &str| {
            stdout
                .lines()
                .find_map(|l| l.find(prefix).map(|at| l[at + prefix.len()..].to_owned()))
        };
        if let Some(total) = said("RUN COMPLETE ") {
            assert!(output.status.success(), "{output:?}");
            // The point after the last one: every point before it was a crash.
            assert_eq!(total.parse::<u32>().unwrap(), n, "{stdout}");
            // Nothing crashed: recovery finds every call committed and in the transcript.
            let report = recover_and_finish::<B>(url, &run).await;
            assert!(
                report
                    .iter()
                    .all(|r| r.action == "already in the transcript")
            );
            break;
        }
        let Some(crash) = said(&format!("CRASH {n} ")) else {
            panic!(
                "point {n}: the child neither crashed nor completed: {output:?}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(output.status.signal(), Some(9), "point {n}: not a SIGKILL");
        let mut parts = crash.split('|');
        let mut next = || parts.next().unwrap().to_owned();
        let (when, what, call) = (next(), next(), next());
        let report = recover_and_finish::<B>(url, &run).await;
        let (left, recovery) = report
            .into_iter()
            .find(|r| r.call == call)
            .map_or_else(|| ("-".to_owned(), "-".to_owned()), |r| (r.left, r.action));
        covered.push(Covered {
            n,
            when,
            what,
            call,
            left,
            recovery,
        });
    }
    covered
}

/// What recovery found a call in and did with it.
pub struct RecoveredCall {
    pub call: String,
    /// Its state as the crash left it.
    pub left: String,
    /// What recovery did, in short.
    pub action: String,
}

impl std::fmt::Display for Covered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>3} {} {} {}: left {}; recovery: {}",
            self.n, self.when, self.what, self.call, self.left, self.recovery
        )
    }
}

/// A short name of what recovery did.
fn action_name(action: &RecoveryAction) -> &'static str {
    match action {
        RecoveryAction::Completed(_) => "result from the ledger",
        RecoveryAction::AlreadyInTranscript => "already in the transcript",
        RecoveryAction::Executed(_) => "run (had not started)",
        RecoveryAction::Rerun(_) => "re-run, same key",
        RecoveryAction::AwaitingApproval => "waits for approval",
        RecoveryAction::NeedsReconciliation { .. } => "to a person (reconciliation)",
        RecoveryAction::Leased { .. } => "leased",
        RecoveryAction::NotStarted => "not started",
        RecoveryAction::Failed(_) => "failed",
    }
}

/// Recovers `run` from the database at `url` in this process, long after every lease, checks
/// what must hold after a crash, lets the agent finish the run, and checks the end; returns
/// what recovery did with each call.
pub async fn recover_and_finish<B: Backend>(url: &str, run: &Run) -> Vec<RecoveredCall> {
    recover_and_finish_on::<B>(B::open(url).await, url, run).await
}

/// [`recover_and_finish`] on a store already open (one whose connection was lost, say).
pub async fn recover_and_finish_on<B: Backend>(
    store: B::Store,
    url: &str,
    run: &Run,
) -> Vec<RecoveredCall> {
    let left = store.list_run(run.id.clone()).await.unwrap();
    let acted_before: BTreeMap<String, usize> = SCRIPT
        .iter()
        .map(|s| (s.call.to_owned(), run.acted(s.call)))
        .collect();
    check_world(run, &format!("{} before recovery", run.id));

    let world = World::new(run.clone(), Points::never());
    let later = Timestamp::system_now() + Duration::from_secs(3600);
    let runner = ToolRunner::new(store.clone(), toolbox(&world))
        .with_clock(TokioClock)
        .with_epoch(later);
    let transcript = run.transcript();
    let report = runner
        .recover(&run.id, &policy(), |k| {
            transcript.iter().any(|(c, _)| c == k.call_id())
        })
        .await
        .unwrap();
    let mut actions = Vec::new();
    for call in &report.calls {
        let name = call.key.call_id().to_owned();
        assert!(
            !matches!(
                call.action,
                RecoveryAction::Failed(_) | RecoveryAction::Leased { .. }
            ),
            "{}: recovery could not handle {call}",
            run.id
        );
        if let Some(outcome) = call.action.transcript_entry() {
            run.append_transcript(&name, outcome);
        }
        let left = left
            .iter()
            .find(|r| r.key == call.key)
            .map_or("-", |r| r.state.name());
        actions.push(RecoveredCall {
            call: name,
            left: left.to_owned(),
            action: action_name(&call.action).to_owned(),
        });
    }

    let after = store.list_run(run.id.clone()).await.unwrap();
    let at = format!("{} after recovery", run.id);
    check_world(run, &at);
    // Nothing lost: every call recorded before the crash is still there.
    for record in &left {
        assert!(
            after.iter().any(|r| r.key == record.key),
            "{at}: {} vanished",
            record.key
        );
    }
    for record in &after {
        let call = record.key.call_id();
        if record.effect != ToolEffect::SideEffect {
            continue;
        }
        let was = left.iter().find(|r| r.key == record.key);
        // A side effect that had started is never run again by recovery.
        if was.is_some_and(|r| r.attempts > 0 && !matches!(r.state, CallState::Prepared)) {
            assert_eq!(
                run.acted(call),
                acted_before[call],
                "{at}: recovery ran the started side effect {call} again"
            );
        }
        // Started, or seen by the world: committed, or waiting for a person. Never lost,
        // never silently pending.
        if record.attempts > 0 || run.acted(call) > 0 {
            assert!(
                matches!(
                    record.state,
                    CallState::Committed { .. } | CallState::NeedsReconciliation { .. }
                ),
                "{at}: side effect {call} is {} (it started {} times; the world saw it {} times)",
                record.state.name(),
                record.attempts,
                run.acted(call)
            );
        }
    }

    // The agent goes on where its transcript stands.
    agent(&runner, &world).await.unwrap();

    let end = format!("{} at the end", run.id);
    check_world(run, &end);
    let transcript = run.transcript();
    let history = B::commits_in_history(url, &run.id).await;
    for step in &SCRIPT {
        let record = store
            .get(run.key(step.call))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{end}: {} was lost", step.call));
        let CallState::Committed { outcome } = &record.state else {
            panic!("{end}: {} is {}", step.call, record.state.name());
        };
        let entries: Vec<_> = transcript.iter().filter(|(c, _)| c == step.call).collect();
        assert_eq!(
            entries.len(),
            1,
            "{end}: {} is in the transcript {} times",
            step.call,
            entries.len()
        );
        assert_eq!(
            &entries[0].1, outcome,
            "{end}: the transcript has another result of {} than the ledger",
            step.call
        );
        assert_eq!(
            history.get(step.call),
            Some(&1),
            "{end}: {} was committed {:?} times",
            step.call,
            history.get(step.call)
        );
        // Every side effect happened, once.
        if step.spec.effect() == ToolEffect::SideEffect {
            assert_eq!(run.acted(step.call), 1, "{end}: {}", step.call);
        } else {
            assert!(run.acted(step.call) >= 1, "{end}: {}", step.call);
        }
    }
    actions
}

/// What must hold of the world at any time: no side effect twice; every repeat of an
/// idempotent write (or read) carries its call's one key; no result twice in the transcript.
fn check_world(run: &Run, at: &str) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let witness = run.witness();
    for entry in &witness {
        *seen.entry(entry.call.as_str()).or_default() += 1;
        assert_eq!(
            entry.key,
            format!("{}:{}", run.id, entry.call),
            "{at}: {} acted under another key",
            entry.call
        );
        assert_eq!(entry.tool, spec_of(&entry.call).name());
    }
    for (call, times) in seen {
        if spec_of(call).effect() == ToolEffect::SideEffect {
            assert!(
                times <= 1,
                "{at}: side effect {call} happened {times} times"
            );
        }
    }
    let transcript = run.transcript();
    for (n, (call, _)) in transcript.iter().enumerate() {
        assert!(
            !transcript[..n].iter().any(|(c, _)| c == call),
            "{at}: {call} was appended to the transcript twice"
        );
    }
}

/// The matrix of crash points covered: rows are crash points (`before insert`, `after act`,
/// …), columns the kinds of call; each cell how many points of that kind were killed and
/// recovered.
pub fn matrix(backend: &str, covered: &[Covered]) -> String {
    const COLUMNS: [&str; 4] = [
        "read",
        "idempotent write",
        "side effect",
        "side effect, approval",
    ];
    let mut rows: Vec<(String, [u32; 4])> = Vec::new();
    for point in covered {
        let row = format!("{} {}", point.when, point.what);
        let column = COLUMNS
            .iter()
            .position(|c| *c == class_of(&point.call))
            .unwrap();
        match rows.iter_mut().find(|(r, _)| *r == row) {
            Some((_, cells)) => cells[column] += 1,
            None => {
                let mut cells = [0; 4];
                cells[column] = 1;
                rows.push((row, cells));
            }
        }
    }
    rows.sort_by_key(|(row, _)| {
        let (when, what) = row.split_once(' ').unwrap();
        let order = [
            "insert+start",
            "insert+await_approval",
            "insert",
            "await_approval",
            "approve",
            "start",
            "act",
            "reconcile",
            "reopen",
            "commit",
        ];
        (order.iter().position(|o| *o == what), when == "after")
    });
    let mut out = format!(
        "{backend}: {} crash points, each a SIGKILL, a recovery in a new process and the rest of the run\n",
        covered.len()
    );
    let _ = writeln!(out, "| crash point | {} |", COLUMNS.join(" | "));
    let _ = writeln!(out, "|---|---|---|---|---|");
    for (row, cells) in rows {
        let cells: Vec<String> = cells.iter().map(|c| c.to_string()).collect();
        let _ = writeln!(out, "| {row} | {} |", cells.join(" | "));
    }
    out
}

/// Every kind of ledger write and the tool's act, before and after: what every backend's
/// crash test must have covered.
pub fn assert_every_kind_covered(covered: &[Covered]) {
    assert_eq!(
        covered.len(),
        66,
        "the run's crash points changed: update the matrix in ledger_crash.rs and docs/behaviour.md"
    );
    for what in [
        "insert+start",
        "insert+await_approval",
        "approve",
        "start",
        "act",
        "reconcile",
        "reopen",
        "commit",
    ] {
        for when in ["before", "after"] {
            assert!(
                covered.iter().any(|c| c.what == what && c.when == when),
                "no crash point {when} {what}"
            );
        }
    }
    for class in [
        "read",
        "idempotent write",
        "side effect",
        "side effect, approval",
    ] {
        for when in ["before", "after"] {
            assert!(
                covered
                    .iter()
                    .any(|c| c.what == "act" && c.when == when && class_of(&c.call) == class),
                "no crash point {when} a {class} acts"
            );
        }
    }
}
