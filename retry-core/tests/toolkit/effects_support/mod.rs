//! Shared fixtures of the effects tests: a "world" that counts what tools did to it, one tool
//! per effect, a crash plan, and a ledger wrapper that crashes before or after a write.

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, HashSet};
use std::future::{Future, pending};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use retry_toolkit::TokioClock;
use retry_toolkit::effects::{
    CallKey, CallRecord, Insert, Ledger, LedgerError, MemoryLedger, ToolCall, ToolContext,
    ToolEffect, ToolOutcome, ToolRunner, ToolSpec, Toolbox, tool_fn,
};
use retry_toolkit::store::{Revision, Timestamp};
use serde_json::{Value, json};
use tokio::sync::Notify;

pub const RUN: &str = "run-1";
/// Wall-clock time of the first runner.
pub const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// Wall-clock time of a runner restarted long after every lease expired.
pub fn after_leases() -> Timestamp {
    T0 + Duration::from_secs(3600)
}

pub fn key(call: &str) -> CallKey {
    CallKey::new(RUN, call).unwrap()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the tools did: executions per (tool, call id), and the idempotent store.
#[derive(Clone, Default)]
pub struct World {
    inner: Arc<Mutex<WorldState>>,
}

#[derive(Default)]
struct WorldState {
    executions: BTreeMap<(String, String), u32>,
    /// The idempotent store, as a downstream system that honours keys keeps it:
    /// idempotency key → (call id, value). A repeat with a known key changes nothing.
    store: BTreeMap<String, (String, Value)>,
    keys_seen: Vec<String>,
}

impl World {
    pub fn executions(&self, tool: &str, call: &str) -> u32 {
        let state = lock(&self.inner);
        state
            .executions
            .get(&(tool.to_owned(), call.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    pub fn total_executions(&self, tool: &str) -> u32 {
        let state = lock(&self.inner);
        state
            .executions
            .iter()
            .filter(|((t, _), _)| t == tool)
            .map(|(_, n)| n)
            .sum()
    }

    /// How many store entries call `call` created: 1 if every attempt carried the same key.
    pub fn distinct_writes(&self, call: &str) -> usize {
        lock(&self.inner)
            .store
            .values()
            .filter(|(c, _)| c == call)
            .count()
    }

    /// Every idempotency key a tool was handed, in order.
    pub fn keys_seen(&self) -> Vec<String> {
        lock(&self.inner).keys_seen.clone()
    }

    fn execute(&self, tool: &str, ctx: &ToolContext) {
        let mut state = lock(&self.inner);
        let call = ctx.call().call_id().to_owned();
        *state.executions.entry((tool.to_owned(), call)).or_default() += 1;
        state.keys_seen.push(ctx.idempotency_key().to_string());
    }

    /// An upsert that honours the idempotency key, as a downstream system should.
    fn upsert(&self, key: &str, call: &str, value: Value) {
        let mut state = lock(&self.inner);
        state
            .store
            .entry(key.to_owned())
            .or_insert((call.to_owned(), value));
    }
}

/// When the simulated process dies: at the `crash_at`-th crash point, counting from 0.
pub struct Crash {
    state: Mutex<CrashState>,
    died: Notify,
}

struct CrashState {
    crash_at: Option<usize>,
    steps: usize,
    dead: bool,
    labels: Vec<String>,
}

impl Crash {
    pub fn never() -> Arc<Self> {
        Self::at(None)
    }

    pub fn at(crash_at: Option<usize>) -> Arc<Self> {
        Arc::new(Crash {
            state: Mutex::new(CrashState {
                crash_at,
                steps: 0,
                dead: false,
                labels: Vec::new(),
            }),
            died: Notify::new(),
        })
    }

    /// A crash point: true if the process dies here (or died before).
    pub fn step(&self, label: impl Into<String>) -> bool {
        let mut state = lock(&self.state);
        if state.dead {
            return true;
        }
        let index = state.steps;
        state.steps += 1;
        state.labels.push(label.into());
        if state.crash_at == Some(index) {
            state.dead = true;
            self.died.notify_one();
        }
        state.dead
    }

    /// Stops here for good if the process dies at this point.
    pub async fn point(&self, label: impl Into<String>) {
        if self.step(label) {
            pending::<()>().await;
        }
    }

    pub fn is_dead(&self) -> bool {
        lock(&self.state).dead
    }

    pub fn steps(&self) -> usize {
        lock(&self.state).steps
    }

    pub fn labels(&self) -> Vec<String> {
        lock(&self.state).labels.clone()
    }

    /// Completes when the process dies.
    pub async fn died(&self) {
        self.died.notified().await;
    }
}

/// A ledger whose process can die just before or just after any write.
pub struct CrashLedger {
    inner: MemoryLedger,
    crash: Arc<Crash>,
}

impl CrashLedger {
    pub fn new(inner: MemoryLedger, crash: Arc<Crash>) -> Self {
        CrashLedger { inner, crash }
    }

    async fn write<T>(&self, what: String, op: impl Future<Output = T>) -> T {
        self.crash.point(format!("before {what}")).await;
        let out = op.await;
        self.crash.point(format!("after {what}")).await;
        out
    }

    async fn read<T>(&self, op: impl Future<Output = T>) -> T {
        if self.crash.is_dead() {
            pending::<()>().await;
        }
        op.await
    }
}

impl Ledger for CrashLedger {
    async fn insert(&self, record: CallRecord) -> Result<Insert, LedgerError> {
        let what = format!("insert {}", record.key.call_id());
        self.write(what, self.inner.insert(record)).await
    }

    async fn get(&self, key: CallKey) -> Result<Option<CallRecord>, LedgerError> {
        self.read(self.inner.get(key)).await
    }

    async fn compare_and_swap(
        &self,
        expected: Revision,
        next: CallRecord,
    ) -> Result<CallRecord, LedgerError> {
        let what = format!("write {} {}", next.key.call_id(), next.state.name());
        self.write(what, self.inner.compare_and_swap(expected, next))
            .await
    }

    async fn list_run(&self, run_id: String) -> Result<Vec<CallRecord>, LedgerError> {
        self.read(self.inner.list_run(run_id)).await
    }
}

pub const LOOKUP: ToolSpec = ToolSpec::new("lookup").with_effect(ToolEffect::Read);
pub const UPSERT: ToolSpec = ToolSpec::new("upsert").with_effect(ToolEffect::IdempotentWrite);
pub const SEND: ToolSpec = ToolSpec::new("send");
pub const PAY: ToolSpec = ToolSpec::new("pay").with_approval();

/// The four tools, acting on `world`, with crash points around each tool's effect.
pub fn toolbox(world: &World, crash: &Arc<Crash>) -> Toolbox {
    let tool = |spec: ToolSpec| {
        let (world, crash) = (world.clone(), crash.clone());
        tool_fn(spec, move |args: Value, ctx: ToolContext| {
            let (world, crash) = (world.clone(), crash.clone());
            async move {
                let call = ctx.call().call_id().to_owned();
                crash.point(format!("tool {call} before effect")).await;
                world.execute(spec.name(), &ctx);
                if spec.effect() == ToolEffect::IdempotentWrite {
                    world.upsert(ctx.idempotency_key().as_str(), &call, args.clone());
                }
                crash.point(format!("tool {call} after effect")).await;
                Ok::<_, String>(json!({ "tool": spec.name(), "call": call, "args": args }))
            }
        })
    };
    Toolbox::new()
        .with(tool(LOOKUP))
        .and_then(|t| t.with(tool(UPSERT)))
        .and_then(|t| t.with(tool(SEND)))
        .and_then(|t| t.with(tool(PAY)))
        .unwrap()
}

/// A runner on tokio's (paused) clock whose wall-clock time starts at `epoch`.
pub fn runner<L: Ledger>(ledger: L, tools: Toolbox, epoch: Timestamp) -> ToolRunner<L, TokioClock> {
    ToolRunner::new(ledger, tools)
        .with_clock(TokioClock)
        .with_epoch(epoch)
}

pub fn call(id: &str, spec: ToolSpec, args: Value) -> ToolCall {
    ToolCall::new(key(id), spec.name(), args)
}

/// The agent's transcript: tool results appended by call, durable across the crash.
#[derive(Clone, Default)]
pub struct Transcript {
    entries: Arc<Mutex<Vec<(CallKey, ToolOutcome)>>>,
}

impl Transcript {
    pub fn append(&self, key: &CallKey, outcome: &ToolOutcome) {
        lock(&self.entries).push((key.clone(), outcome.clone()));
    }

    pub fn has(&self, key: &CallKey) -> bool {
        lock(&self.entries).iter().any(|(k, _)| k == key)
    }

    pub fn entries(&self) -> Vec<(CallKey, ToolOutcome)> {
        lock(&self.entries).clone()
    }

    /// Keys appended more than once.
    pub fn duplicates(&self) -> Vec<CallKey> {
        let mut seen = HashSet::new();
        lock(&self.entries)
            .iter()
            .filter(|(k, _)| !seen.insert(k.clone()))
            .map(|(k, _)| k.clone())
            .collect()
    }
}
