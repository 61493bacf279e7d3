//! N clients race to update one row with optimistic concurrency; how much work does each
//! retry strategy waste, and how long until everyone is done?
//!
//! The experiment of the AWS Architecture Blog post "Exponential Backoff And Jitter", run on
//! retry-toolkit's real retry loop and the testkit's virtual clock (deterministic from a seed,
//! seconds of wall time):
//!
//! ```sh
//! cargo run --release --example contention -- --clients 100
//! cargo run --release --example contention -- --clients 50 --runs 20 --seed 7 --svg chart.svg
//! ```
//!
//! It prints a Markdown table for `--clients` clients and writes an SVG chart of calls and
//! time to finish for 10%, 20%, … 100% of that many clients.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use retry_testkit::sim::{self, Contention, SimError, Strategy, Summary};

mod output;

const USAGE: &str = "usage: contention [--clients N] [--runs R] [--seed S] [--svg PATH]

  --clients N   clients competing for the row (default 100)
  --runs R      runs averaged per point, seeds S, S+1, ... (default 20)
  --seed S      first seed (default 0)
  --svg PATH    where to write the chart (default: contention.svg in $CARGO_TARGET_DIR,
                or in the workspace's target/ when it is unset)";

struct Args {
    clients: usize,
    runs: u32,
    seed: u64,
    svg: PathBuf,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        clients: 100,
        runs: 20,
        seed: 0,
        svg: output::default_chart("contention.svg"),
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--clients" => parsed.clients = number(&flag, &value()?)?,
            "--runs" => parsed.runs = number(&flag, &value()?)?,
            "--seed" => parsed.seed = number(&flag, &value()?)?,
            "--svg" => parsed.svg = PathBuf::from(value()?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if parsed.clients == 0 || parsed.runs == 0 {
        return Err("`--clients` and `--runs` must be at least 1".to_owned());
    }
    Ok(parsed)
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("`{flag}` expects a whole number, got `{text}`"))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("error: {message}\n");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let step = (args.clients / 10).max(1);
    let mut counts: Vec<usize> = (step..=args.clients).step_by(step).collect();
    if counts.last() != Some(&args.clients) {
        counts.push(args.clients);
    }
    let mut sweep = Vec::new();
    for &clients in &counts {
        for strategy in Strategy::ALL {
            let summary = Contention::new(clients)
                .with_seed(args.seed)
                .average(strategy, args.runs)
                .map_err(|e: SimError| e.to_string())?;
            sweep.push(summary);
        }
    }
    let last: Vec<Summary> = sweep
        .iter()
        .filter(|s| s.clients == args.clients)
        .copied()
        .collect();

    println!(
        "{} clients, one row, optimistic concurrency; base 5 ms, cap 2000 ms, network 10 ± 2 ms;",
        args.clients
    );
    println!(
        "mean of {} runs (seeds {}..{}); calls = conditional writes sent\n",
        args.runs,
        args.seed,
        args.seed.saturating_add(u64::from(args.runs))
    );
    print!("{}", sim::markdown_table(&last));

    let by = |strategy| last.iter().find(|s| s.strategy == strategy);
    if let (Some(none), Some(expo), Some(full)) = (
        by(Strategy::NoBackoff),
        by(Strategy::Exponential),
        by(Strategy::FullJitter),
    ) {
        println!(
            "\nfull jitter: {:.0}% fewer calls than no backoff, {:.0}% fewer than exponential without jitter",
            100.0 * (1.0 - full.calls / none.calls),
            100.0 * (1.0 - full.calls / expo.calls),
        );
    }

    if let Some(dir) = args.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&args.svg, sim::chart_svg(&sweep))
        .map_err(|e| format!("{}: {e}", args.svg.display()))?;
    println!(
        "chart: {} ({} points, {:.2?} wall time)",
        args.svg.display(),
        sweep.len(),
        started.elapsed()
    );
    Ok(())
}
