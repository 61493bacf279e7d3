//! `Scheduler` against `tokio::task::JoinSet` + `tokio::sync::Semaphore`: 100,000 trivial
//! tasks at concurrency 8, 64, 512 and 4,096.
//!
//! - **time**: tasks per second on a multi-thread runtime with 2 workers and on a
//!   current-thread runtime, each run on a runtime of its own, `RUNS` rounds with the
//!   contestants alternating; medians, min–max and the ratio of the medians;
//! - **instructions and heap allocations per task**: counted by valgrind (cachegrind, DHAT)
//!   on a current-thread runtime, as `(count(MANY) - count(FEW)) / (MANY - FEW)`. Skipped with
//!   a note without valgrind, or with `--no-count`.
//!
//! `--rates <who>/<c> <multi|current> <runs>` times one row alone, one rate a line (`who` is
//! `scheduler` or `joinset`): to see how a row's runs spread.
//!
//! The scheduler gets a `max_pending` of the whole burst: with the default (1,024) it refuses
//! all but the first `concurrency + 1,024` tasks of a burst with `QueueFull`, which the last
//! line of the output shows. `JoinSet` + `Semaphore` is the pattern of tokio's `Semaphore`
//! docs: take an owned permit, then spawn the task holding it.

#[allow(dead_code, reason = "shared by the counting benches")]
mod counted;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use retry_toolkit::{Scheduler, SchedulerOptions, TaskContext, TaskFailure};
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

const TASKS: u64 = 100_000;
const CONCURRENCY: [usize; 4] = [8, 64, 512, 4096];
const RUNS: usize = 3;
const FEW: u64 = 20_000;
const MANY: u64 = 120_000;

/// Runs `n` tasks through a scheduler of concurrency `c`; the sum of their outputs.
async fn scheduler(c: usize, n: u64) -> u64 {
    let options = SchedulerOptions::new()
        .with_concurrency(c)
        .with_max_pending(n as usize);
    let scheduler = Scheduler::new(options).expect("valid options");
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        handles.push(
            scheduler
                .submit(move |_: TaskContext| async move { Ok::<_, TaskFailure>(black_box(i)) }),
        );
    }
    let mut sum = 0;
    for handle in handles {
        sum += handle.await.expect("a trivial task succeeds");
    }
    sum
}

/// The same through a `JoinSet`, at most `c` at once by a `Semaphore`.
async fn joinset(c: usize, n: u64) -> u64 {
    let semaphore = Arc::new(Semaphore::new(c));
    let mut set = JoinSet::new();
    for i in 0..n {
        let permit = Arc::clone(&semaphore)
            .acquire_owned()
            .await
            .expect("never closed");
        set.spawn(async move {
            let _permit = permit;
            black_box(i)
        });
    }
    let mut sum = 0;
    while let Some(done) = set.join_next().await {
        sum += done.expect("a trivial task succeeds");
    }
    sum
}

fn run(rt: &Runtime, who: &str, c: usize, n: u64) -> u64 {
    match who {
        "scheduler" => rt.block_on(scheduler(c, n)),
        "joinset" => rt.block_on(joinset(c, n)),
        _ => panic!("no contestant `{who}`"),
    }
}

fn multi_thread() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a runtime")
}

fn current_thread() -> Runtime {
    Builder::new_current_thread().build().expect("a runtime")
}

/// How many of a `TASKS` burst the default options refuse at concurrency 64.
fn refused_with_defaults() -> usize {
    current_thread().block_on(async {
        let scheduler =
            Scheduler::new(SchedulerOptions::new().with_concurrency(64)).expect("valid options");
        let handles: Vec<_> = (0..TASKS)
            .map(|_| scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(()) }))
            .collect();
        let mut refused = 0;
        for handle in handles {
            if matches!(handle.await, Err(TaskFailure::QueueFull { .. })) {
                refused += 1;
            }
        }
        refused
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `--run <who>/<c> <n>`: one workload, for valgrind.
    if let Some(i) = args.iter().position(|a| a == "--run") {
        let (key, n) = (&args[i + 1], args[i + 2].parse().expect("a count"));
        let (who, c) = key.split_once('/').expect("<who>/<concurrency>");
        black_box(run(
            &current_thread(),
            who,
            c.parse().expect("a concurrency"),
            n,
        ));
        return;
    }
    // `--rates <who>/<c> <multi|current> <runs>`: one row's runs after one untimed, one rate a line.
    if let Some(i) = args.iter().position(|a| a == "--rates") {
        let (who, c) = args[i + 1].split_once('/').expect("<who>/<concurrency>");
        let c = c.parse().expect("a concurrency");
        let make = match args[i + 2].as_str() {
            "multi" => multi_thread as fn() -> Runtime,
            _ => current_thread,
        };
        // One run untimed first: the first run of a process also pays for faulting in the
        // heap the burst lives in.
        black_box(run(&make(), who, c, TASKS));
        for _ in 0..args[i + 3].parse().expect("a number of runs") {
            let rt = make();
            let start = Instant::now();
            black_box(run(&rt, who, c, TASKS));
            println!("{}", k(TASKS as f64 / start.elapsed().as_secs_f64()));
        }
        return;
    }
    let count = !args.iter().any(|a| a == "--no-count") && counted::valgrind_available();
    let exe = std::env::current_exe().expect("the path of this executable");
    let mut out = String::from(
        "### Scheduler vs JoinSet + Semaphore, 100,000 trivial tasks\n\n\
         | concurrency | runtime | Scheduler, tasks/s (min–max) | JoinSet + Semaphore, tasks/s (min–max) | ratio of medians (per run) |\n\
         |---:|---|---:|---:|---:|\n",
    );
    let mut counts_table = String::from(
        "\n| concurrency | instructions per task, Scheduler / JoinSet | allocations per task, Scheduler / JoinSet |\n\
         |---:|---:|---:|\n",
    );
    for c in CONCURRENCY {
        for (flavour, make) in [
            ("multi-thread, 2 workers", multi_thread as fn() -> Runtime),
            ("current-thread", current_thread),
        ] {
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..RUNS {
                for (who, rates) in [("scheduler", &mut ours), ("joinset", &mut theirs)] {
                    let rt = make();
                    let start = Instant::now();
                    black_box(run(&rt, who, c, TASKS));
                    rates.push(TASKS as f64 / start.elapsed().as_secs_f64());
                }
            }
            let per_run: Vec<String> = ours
                .iter()
                .zip(&theirs)
                .map(|(a, b)| format!("{:.2}×", a / b))
                .collect();
            let (a, a_min, a_max) = counted::median_min_max(&mut ours);
            let (b, b_min, b_max) = counted::median_min_max(&mut theirs);
            let row = format!(
                "| {c} | {flavour} | {} ({}–{}) | {} ({}–{}) | **{:.2}×** ({}) |\n",
                k(a),
                k(a_min),
                k(a_max),
                k(b),
                k(b_min),
                k(b_max),
                a / b,
                per_run.join(" · "),
            );
            eprint!("scheduler: {row}");
            out.push_str(&row);
        }
        if count {
            let (ai, aa) = counted::per_unit(&exe, &format!("scheduler/{c}"), FEW, MANY);
            let (bi, ba) = counted::per_unit(&exe, &format!("joinset/{c}"), FEW, MANY);
            let row = format!("| {c} | {ai:.0} / {bi:.0} | {aa:.2} / {ba:.2} |\n");
            eprint!("scheduler: {row}");
            counts_table.push_str(&row);
        }
    }
    if count {
        out.push_str(&counts_table);
    } else {
        out.push_str(
            "\nInstructions and allocations not counted (no valgrind, or `--no-count`).\n",
        );
    }
    out.push_str(&format!(
        "\nWith the default `max_pending` (1,024) at concurrency 64, {} of a burst of {TASKS} \
         tasks are refused with `QueueFull`.\n",
        refused_with_defaults()
    ));
    println!("\n{out}");
}

/// Thousands, as `1,234k`.
fn k(rate: f64) -> String {
    let k = (rate / 1000.0).round() as u64;
    if k >= 1000 {
        format!("{},{:03}k", k / 1000, k % 1000)
    } else {
        format!("{k}k")
    }
}
