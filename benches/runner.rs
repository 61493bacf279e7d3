//! `ToolRunner` over `MemoryLedger`: what the runner adds to a tool call, with a tool that
//! does nothing (returns its argument).
//!
//! Two tools: `echo`, a [`tool_fn`] taking one number, and `send`, a `#[tool]` function with
//! three named arguments (a JSON object of three members). Each call is a new call id, so every
//! call is recorded with its start, then committed: two ledger writes (three before `0ce3861`). The `build` rows make the
//! `ToolCall` (its key and JSON arguments) and drop it; the *runner* figures are a call's row
//! minus its `build` row, so they count what the runner does and not what the caller hands it.
//!
//! - **time**: per call on a current-thread runtime, `RUNS` runs of `CALLS` calls, median and
//!   min–max: wall-clock time, and the time the thread was on a CPU (Linux's
//!   `/proc/thread-self/schedstat`), which a machine shared with other builds inflates much less
//!   (it still counts the caches and cores they share);
//! - **instructions, heap allocations and bytes allocated** per call: valgrind (cachegrind,
//!   DHAT), `(count(MANY) - count(FEW)) / (MANY - FEW)`. Skipped without valgrind or with
//!   `--no-count`.

#[allow(dead_code, reason = "shared by the counting benches")]
mod counted;

use std::hint::black_box;
use std::time::Instant;

use retry_toolkit::effects::{
    CallKey, MemoryLedger, ToolCall, ToolContext, ToolEffect, ToolRunner, ToolSpec, Toolbox,
    tool_fn,
};
use retry_toolkit::tool;
use serde_json::json;
use tokio::runtime::{Builder, Runtime};

const CALLS: u64 = 50_000;
const RUNS: usize = 3;
const FEW: u64 = 2_000;
const MANY: u64 = 12_000;

/// A `#[tool]` with three named arguments that returns one of them.
#[tool(effect = "read")]
async fn send(to: String, subject: String, amount: u64) -> Result<u64, String> {
    black_box((to, subject));
    Ok(amount)
}

fn runner() -> ToolRunner<MemoryLedger> {
    let echo = tool_fn(
        ToolSpec::new("echo").with_effect(ToolEffect::Read),
        |n: u64, _: ToolContext| async move { Ok::<_, String>(n) },
    );
    let tools = Toolbox::new()
        .with(echo)
        .and_then(|tools| tools.with(send {}))
        .expect("valid tools");
    ToolRunner::new(MemoryLedger::new(), tools)
}

fn echo_call(i: u64) -> ToolCall {
    let key = CallKey::new("run-1", format!("call-{i}")).expect("a valid key");
    ToolCall::new(key, "echo", json!(i))
}

fn send_call(i: u64) -> ToolCall {
    let key = CallKey::new("run-1", format!("call-{i}")).expect("a valid key");
    ToolCall::new(
        key,
        "send",
        json!({ "to": "ana@example.com", "subject": "invoice", "amount": i }),
    )
}

/// The rows: `(key, label)`.
const ROWS: [(&str, &str); 4] = [
    ("build/echo", "build the `echo` call"),
    ("call/echo", "`tool_fn`, one number"),
    ("build/send", "build the `send` call"),
    ("call/send", "`#[tool]`, three named arguments"),
];

fn run(rt: &Runtime, key: &str, n: u64) {
    let runner = runner();
    rt.block_on(async {
        for i in 0..n {
            match key {
                "build/echo" => drop(black_box(echo_call(i))),
                "build/send" => drop(black_box(send_call(i))),
                "call/echo" => drop(black_box(runner.call(echo_call(i)).await.expect("done"))),
                "call/send" => drop(black_box(runner.call(send_call(i)).await.expect("done"))),
                _ => panic!("no row `{key}`"),
            }
        }
    });
}

/// Nanoseconds this thread has spent on a CPU, if the kernel says (Linux, schedstat).
fn on_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn current_thread() -> Runtime {
    Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--run") {
        run(
            &current_thread(),
            &args[i + 1],
            args[i + 2].parse().expect("a count"),
        );
        return;
    }
    let count = !args.iter().any(|a| a == "--no-count") && counted::valgrind_available();
    let exe = std::env::current_exe().expect("the path of this executable");
    let rt = current_thread();
    let mut rows = Vec::new();
    for (key, label) in ROWS {
        let (mut times, mut cpu): (Vec<f64>, Vec<f64>) = (0..RUNS)
            .map(|_| {
                let (start, on_cpu) = (Instant::now(), on_cpu_ns());
                run(&rt, key, CALLS);
                let wall = start.elapsed().as_secs_f64() * 1e6 / CALLS as f64;
                let cpu = on_cpu.zip(on_cpu_ns()).map_or(f64::NAN, |(a, b)| {
                    b.saturating_sub(a) as f64 / 1e3 / CALLS as f64
                });
                (wall, cpu)
            })
            .unzip();
        let (all, all_cpu) = (times.clone(), cpu.clone());
        let time = counted::median_min_max(&mut times);
        let cpu_time = counted::median_min_max(&mut cpu);
        let counts = count.then(|| counted::per_unit_with_bytes(&exe, key, FEW, MANY));
        eprintln!("runner: {key}: {time:?} on CPU {cpu_time:?} {counts:?}");
        rows.push((key, label, (time, cpu_time), (all, all_cpu), counts));
    }
    let mut out = String::from(
        "### ToolRunner over MemoryLedger, per call (a trivial tool)\n\n\
         | | µs per call, median (min–max) | on CPU, µs | instructions | allocations | bytes allocated |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    for (_, label, ((median, min, max), (cpu, cpu_min, cpu_max)), _, counts) in &rows {
        let (i, a, b) = counts.map_or_else(
            || {
                (
                    "not counted".into(),
                    "not counted".into(),
                    "not counted".into(),
                )
            },
            |(i, a, b)| (format!("{i:.0}"), format!("{a:.1}"), format!("{b:.0}")),
        );
        out.push_str(&format!(
            "| {label} | {median:.3} ({min:.3}–{max:.3}) | {cpu:.3} ({cpu_min:.3}–{cpu_max:.3}) | {i} | {a} | {b} |\n"
        ));
    }
    for pair in rows.chunks(2) {
        let [(_, _, _, build, built), (_, label, _, call, counted)] = pair else {
            continue;
        };
        let minus = |call: &[f64], build: &[f64]| {
            let mut runner: Vec<f64> = call.iter().zip(build).map(|(c, b)| c - b).collect();
            counted::median_min_max(&mut runner)
        };
        let (median, min, max) = minus(&call.0, &build.0);
        let (cpu, cpu_min, cpu_max) = minus(&call.1, &build.1);
        let (i, a, b) = match (built, counted) {
            (Some(x), Some(y)) => (
                format!("{:.0}", y.0 - x.0),
                format!("**{:.1}**", y.1 - x.1),
                format!("{:.0}", y.2 - x.2),
            ),
            _ => (
                "not counted".into(),
                "not counted".into(),
                "not counted".into(),
            ),
        };
        out.push_str(&format!(
            "| **the runner**, {label} | **{median:.3}** ({min:.3}–{max:.3}) | **{cpu:.3}** ({cpu_min:.3}–{cpu_max:.3}) | {i} | {a} | {b} |\n"
        ));
    }
    println!("\n{out}\nload average (1, 5, 15 min) after the runs: {load}");
}
