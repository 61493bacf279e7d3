//! A thin layer over criterion that remembers what ran, then prints it as Markdown.
//!
//! Criterion keeps each benchmark's samples in `<criterion dir>/<group>/<id>/new/sample.json`
//! (the iteration counts and the total time of every sample). From those this module prints
//! the median and the min–max of the per-iteration times, and each median's ratio to the
//! group's baseline. Only files written by this run are read, so a filtered run
//! (`cargo bench … -- success`) prints only what it measured.
//!
//! On a shared machine one run is not enough: each benchmark's medians of the last
//! `HISTORY` runs are kept next to criterion's files (`retry-benches-runs.json`) and printed
//! in a last column, so that a few runs in a row show how much the figures move.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};

/// Criterion plus the list of groups and benchmarks this run asked for.
pub(crate) struct Suite {
    criterion: Criterion,
    groups: Vec<GroupRecord>,
    started: SystemTime,
}

struct GroupRecord {
    name: String,
    /// The benchmark every ratio of the group is taken against, if any.
    baseline: Option<String>,
    ids: Vec<String>,
}

/// One criterion group being run; benchmarks are added with [`GroupRun::bench`].
pub(crate) struct GroupRun<'a> {
    group: BenchmarkGroup<'a, WallTime>,
    record: &'a mut GroupRecord,
}

impl Suite {
    pub(crate) fn new(criterion: Criterion) -> Self {
        Self {
            criterion,
            groups: Vec::new(),
            started: SystemTime::now(),
        }
    }

    /// Starts group `name`; `baseline` names the benchmark ratios are taken against
    /// (empty: no ratios).
    pub(crate) fn group(&mut self, name: &str, baseline: &str) -> GroupRun<'_> {
        self.groups.push(GroupRecord {
            name: name.to_owned(),
            baseline: (!baseline.is_empty()).then(|| baseline.to_owned()),
            ids: Vec::new(),
        });
        let record = self.groups.last_mut().expect("just pushed");
        GroupRun {
            group: self.criterion.benchmark_group(name),
            record,
        }
    }

    /// Ends criterion's run and prints the Markdown tables.
    pub(crate) fn finish(self) {
        self.criterion.final_summary();
        let dir = criterion_dir();
        let mut out = String::new();
        for group in &self.groups {
            render_group(&mut out, &dir, group, self.started);
        }
        if !out.is_empty() {
            println!("\n## Markdown summary (median; min–max over criterion's samples)\n\n{out}");
        }
    }
}

impl GroupRun<'_> {
    /// Adjusts the group's criterion settings (sample count, sampling mode …).
    pub(crate) fn configure(
        &mut self,
        settings: impl FnOnce(&mut BenchmarkGroup<'_, WallTime>),
    ) -> &mut Self {
        settings(&mut self.group);
        self
    }

    /// Measures `routine`, called once per iteration; its output is kept from the optimizer.
    pub(crate) fn bench<O>(&mut self, id: &str, mut routine: impl FnMut() -> O) -> &mut Self {
        self.group.bench_function(id, |b| b.iter(&mut routine));
        self.record.ids.push(id.to_owned());
        self
    }

    /// Measures `make()`'s future awaited inside one `block_on` of `rt` per sample, as
    /// criterion's `b.to_async(&rt).iter(make)` does: what an `.await` in a running task
    /// costs, without `block_on`'s own start and finish in every iteration.
    pub(crate) fn bench_awaited<F: std::future::Future>(
        &mut self,
        id: &str,
        rt: &tokio::runtime::Runtime,
        mut make: impl FnMut() -> F,
    ) -> &mut Self {
        self.group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = std::time::Instant::now();
                    for _ in 0..iters {
                        std::hint::black_box(make().await);
                    }
                    start.elapsed()
                })
            })
        });
        self.record.ids.push(id.to_owned());
        self
    }
}

/// Where criterion writes, found the way criterion finds it: `$CRITERION_HOME`, else
/// `$CARGO_TARGET_DIR/criterion`, else `<target>/criterion` next to this executable
/// (`<target>/release/deps/overhead-…`).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(|t| t.join("criterion")))
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// Criterion's directory name for a group or benchmark id.
fn dir_name(name: &str) -> String {
    name.replace(['?', '"', '/', '\\', '*', '<', '>', ':', '|', '^'], "_")
}

/// How many runs' medians the history keeps.
const HISTORY: usize = 5;

/// Median, min and max of the per-iteration times of one benchmark, in nanoseconds.
#[derive(Clone, Copy, Debug)]
struct Stats {
    median: f64,
    min: f64,
    max: f64,
}

/// Reads one benchmark's samples, if this run wrote them.
fn read_stats(bench_dir: &Path, since: SystemTime) -> Option<Stats> {
    let path = bench_dir.join("new").join("sample.json");
    let written = std::fs::metadata(&path).ok()?.modified().ok()?;
    if written < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    let numbers = |key: &str| -> Option<Vec<f64>> {
        json.get(key)?
            .as_array()?
            .iter()
            .map(serde_json::Value::as_f64)
            .collect()
    };
    let (iters, times) = (numbers("iters")?, numbers("times")?);
    let mut per_iter: Vec<f64> = iters.iter().zip(&times).map(|(n, t)| t / n).collect();
    per_iter.sort_by(f64::total_cmp);
    let n = per_iter.len();
    if n == 0 {
        return None;
    }
    let median = if n % 2 == 1 {
        per_iter[n / 2]
    } else {
        (per_iter[n / 2 - 1] + per_iter[n / 2]) / 2.0
    };
    Some(Stats {
        median,
        min: per_iter[0],
        max: per_iter[n - 1],
    })
}

fn render_group(out: &mut String, dir: &Path, group: &GroupRecord, since: SystemTime) {
    let rows: Vec<(&str, Stats, Vec<f64>)> = group
        .ids
        .iter()
        .filter_map(|id| {
            let bench_dir = dir.join(dir_name(&group.name)).join(dir_name(id));
            let stats = read_stats(&bench_dir, since)?;
            Some((id.as_str(), stats, record_median(&bench_dir, stats.median)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let baseline = group.baseline.as_deref().and_then(|b| {
        rows.iter()
            .find(|(id, _, _)| *id == b)
            .map(|(_, s, _)| (b, s.median))
    });
    let _ = writeln!(out, "### `{}`\n", group.name);
    match baseline {
        Some((name, _)) => {
            let _ = writeln!(
                out,
                "| | median | min – max | vs {name} | medians of the last runs |\n\
                 |---|---:|---:|---:|---|"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "| | median | min – max | medians of the last runs |\n|---|---:|---:|---|"
            );
        }
    }
    for (id, s, history) in rows {
        let _ = write!(
            out,
            "| {id} | {} | {} – {} |",
            time(s.median),
            time(s.min),
            time(s.max)
        );
        if let Some((_, base)) = baseline {
            let _ = write!(out, " {:.2}× |", s.median / base);
        }
        let history: Vec<String> = history.into_iter().map(time).collect();
        let _ = writeln!(out, " {} |", history.join(" · "));
    }
    out.push('\n');
}

/// Appends `median` to the benchmark's history and returns the last `HISTORY` medians,
/// oldest first. A history that cannot be read or written is only this run's median.
fn record_median(bench_dir: &Path, median: f64) -> Vec<f64> {
    let path = bench_dir.join("retry-benches-runs.json");
    let mut runs: Vec<f64> = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    runs.push(median);
    let excess = runs.len().saturating_sub(HISTORY);
    runs.drain(..excess);
    if let Ok(json) = serde_json::to_vec(&runs) {
        let _ = std::fs::write(&path, json);
    }
    runs
}

/// A time in nanoseconds, in the unit that reads best.
fn time(ns: f64) -> String {
    match ns {
        ns if ns < 100.0 => format!("{ns:.2} ns"),
        ns if ns < 1e3 => format!("{ns:.1} ns"),
        ns if ns < 1e6 => format!("{:.2} µs", ns / 1e3),
        ns => format!("{:.3} ms", ns / 1e6),
    }
}
