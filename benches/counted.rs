//! Counting one workload under valgrind: instructions (cachegrind) and heap blocks (DHAT), by
//! re-running this benchmark's own binary on `FEW` and `MANY` units of work and taking the
//! difference, so that start-up, the runtime and the measuring loop cancel out.
//!
//! Both counts come from valgrind, so the timed binaries link no counting allocator: the
//! times are those of the ordinary allocator.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How a counting bench's `main` starts. In the child valgrind runs (`--run <key> <n>`): runs
/// row `key` `n` times with `run` and exits (with 2 for a row `run` does not know). In the
/// parent: the row filter (the first argument not starting with `-`; empty: every row) and
/// this executable, to re-run — or `None`, said on stdout, when valgrind is not installed.
pub(crate) fn child_or_parent(
    bench: &str,
    run: impl Fn(&str, u64) -> bool,
) -> Option<(String, PathBuf)> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--run") {
        let key = args.get(i + 1).map(String::as_str).unwrap_or_default();
        let n = args.get(i + 2).and_then(|n| n.parse().ok()).unwrap_or(0);
        if !run(key, n) {
            eprintln!("no row `{key}`");
            std::process::exit(2);
        }
        std::process::exit(0);
    }
    if !valgrind_available() {
        println!("{bench}: valgrind is not installed; nothing counted (apt-get install valgrind).");
        return None;
    }
    let filter = args
        .iter()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    let exe = std::env::current_exe().expect("the path of this executable");
    Some((filter, exe))
}

/// Whether valgrind can be run.
pub(crate) fn valgrind_available() -> bool {
    Command::new("valgrind").arg("--version").output().is_ok()
}

/// The environment variable that tells a child run which heap layout to start from.
const HEAP_LAYOUT: &str = "RETRY_BENCH_HEAP_LAYOUT";

/// Heap layouts [`per_unit_over_layouts`] averages over.
pub(crate) const LAYOUTS: u32 = 6;

/// Allocates (and keeps, until the returned blocks are dropped) a few blocks before the
/// workload starts, as many as the parent asked for: each count gives glibc's heap another
/// layout. A child run calls it first.
///
/// Why: where the blocks of a call land decides whether glibc reuses a freed block at once or
/// walks its bins, and that alone moves a loopback call by up to 500 instructions, the same
/// workload, the same code. One layout can flatter one contestant and not another; the mean
/// over several does not.
pub(crate) fn hold_heap_layout() -> Vec<Box<[u8]>> {
    let layout: usize = std::env::var(HEAP_LAYOUT)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (0..layout)
        .map(|i| vec![0u8; 24 + 40 * i].into_boxed_slice())
        .collect()
}

/// `(instructions, heap blocks)` per unit of work, instructions as the mean over [`LAYOUTS`]
/// heap layouts (see [`hold_heap_layout`]; heap blocks do not depend on them).
pub(crate) fn per_unit_over_layouts(exe: &Path, key: &str, few: u64, many: u64) -> (f64, f64) {
    let instructions = (0..LAYOUTS)
        .map(|layout| per_unit_in(exe, key, few, many, Tool::Cachegrind, layout))
        .sum::<f64>()
        / f64::from(LAYOUTS);
    (
        instructions,
        per_unit_in(exe, key, few, many, Tool::Dhat, 0),
    )
}

/// `(instructions, heap blocks)` per unit of work: `exe --run <key> <n>` run for `few` and
/// `many` units.
pub(crate) fn per_unit(exe: &Path, key: &str, few: u64, many: u64) -> (f64, f64) {
    let (instructions, blocks, _) = per_unit_with_bytes(exe, key, few, many);
    (instructions, blocks)
}

/// [`per_unit`] and the bytes allocated per unit.
pub(crate) fn per_unit_with_bytes(exe: &Path, key: &str, few: u64, many: u64) -> (f64, f64, f64) {
    let diff = |tool| per_unit_in(exe, key, few, many, tool, 0);
    (
        diff(Tool::Cachegrind),
        diff(Tool::Dhat),
        diff(Tool::DhatBytes),
    )
}

/// Instructions alone per unit of work (cachegrind only: the `instructions` bench).
pub(crate) fn instructions_per_unit(exe: &Path, key: &str, few: u64, many: u64) -> f64 {
    per_unit_in(exe, key, few, many, Tool::Cachegrind, 0)
}

/// What `tool` counts per unit of work, from heap layout `layout`: the difference between
/// `many` and `few` units, so that start-up cancels out.
fn per_unit_in(exe: &Path, key: &str, few: u64, many: u64, tool: Tool, layout: u32) -> f64 {
    let count = |n| count(exe, key, n, tool, layout);
    (count(many) - count(few)) as f64 / (many - few) as f64
}

#[derive(Clone, Copy)]
enum Tool {
    Cachegrind,
    Dhat,
    DhatBytes,
}

/// The whole process's instructions or heap blocks allocated, running `key` `n` times from
/// heap layout `layout` (see [`hold_heap_layout`]).
fn count(exe: &Path, key: &str, n: u64, tool: Tool, layout: u32) -> u64 {
    let (args, marker): (&[&str], &str) = match tool {
        Tool::Cachegrind => (
            &[
                "--tool=cachegrind",
                "--cache-sim=no",
                "--cachegrind-out-file=/dev/null",
            ],
            "I   refs:",
        ),
        Tool::Dhat | Tool::DhatBytes => (&["--tool=dhat", "--dhat-out-file=/dev/null"], "Total:"),
    };
    let output = Command::new("valgrind")
        .args(args)
        .arg(exe)
        .args(["--run", key, &n.to_string()])
        .env(HEAP_LAYOUT, layout.to_string())
        .output()
        .expect("valgrind runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "valgrind failed for {key}:\n{stderr}"
    );
    stderr
        .lines()
        .find_map(|line| {
            let rest = line.split(marker).nth(1)?;
            let number = match tool {
                Tool::Cachegrind => rest.trim(),
                // `Total:     1,234 bytes in 56 blocks`
                Tool::Dhat => rest.split(" in ").nth(1)?.split_whitespace().next()?,
                Tool::DhatBytes => rest.split_whitespace().next()?,
            };
            number.replace(',', "").parse().ok()
        })
        .unwrap_or_else(|| panic!("no `{marker}` line from valgrind for {key}:\n{stderr}"))
}

/// The median, minimum and maximum of `values`.
pub(crate) fn median_min_max(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}
