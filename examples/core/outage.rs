//! A dependency is down for good, or overloaded: how much traffic does each way of retrying
//! send it?
//!
//! 100 callers in one service each call the dependency once a second for a minute (6,000
//! calls), on retry-toolkit's real retry loop and the testkit's virtual clock (deterministic
//! from a seed, about a second of wall time in release):
//!
//! ```sh
//! cargo run --release --example outage
//! cargo run --release --example outage -- --seed 7 --svg chart.svg
//! ```
//!
//! It prints a Markdown table per dependency (load relative to calling without retries, and
//! the calls that succeeded) and writes an SVG chart of both.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use retry_testkit::sim::outage::{self, Dependency, Outage};

mod output;

const USAGE: &str = "usage: outage [--clients N] [--seed S] [--svg PATH]

  --clients N   callers, each calling once a second for a minute (default 100)
  --seed S      seed of start times, jitter and the dependency's failures (default 0)
  --svg PATH    where to write the chart (default: outage.svg in $CARGO_TARGET_DIR,
                or in the workspace's target/ when it is unset)";

struct Args {
    clients: usize,
    seed: u64,
    svg: PathBuf,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        clients: 100,
        seed: 0,
        svg: output::default_chart("outage.svg"),
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--clients" => parsed.clients = number(&flag, &value()?)?,
            "--seed" => parsed.seed = number(&flag, &value()?)?,
            "--svg" => parsed.svg = PathBuf::from(value()?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if parsed.clients == 0 {
        return Err("`--clients` must be at least 1".to_owned());
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
    let capacity = (args.clients as u32 * 4 / 5).max(1);
    let dependencies = [Dependency::Down, Dependency::Overloaded { capacity }];
    println!(
        "{} callers, one call each a second for 60 s; 3 attempts, full jitter from 100 ms; seed {}",
        args.clients, args.seed
    );
    let mut all = Vec::new();
    for dependency in dependencies {
        let runs = Outage::new(dependency)
            .with_clients(args.clients)
            .with_seed(args.seed)
            .run_all()
            .map_err(|e| e.to_string())?;
        println!("\ndependency {}:\n", dependency.describe());
        print!("{}", outage::markdown_table(&runs));
        all.extend(runs);
    }
    if let Some(dir) = args.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&args.svg, outage::chart_svg(&all))
        .map_err(|e| format!("{}: {e}", args.svg.display()))?;
    println!(
        "\nchart: {} ({:.2?} wall time)",
        args.svg.display(),
        started.elapsed()
    );
    Ok(())
}
