//! The simulators write their charts where a user looks for build output: into
//! `$CARGO_TARGET_DIR` when it is set, as cargo itself does, not into the checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `example` from the workspace root with the workspace's features, as the README's
/// command does (so the build `cargo test --workspace` made is reused), and returns its
/// executable.
fn example(example: &str) -> PathBuf {
    let output = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--example",
            example,
            "--message-format=json",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cargo build --example {example}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["target"]["name"] == example)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

fn run_in_target_dir(binary: &Path, args: &[&str], target_dir: &Path) -> String {
    let output = Command::new(binary)
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn contention_writes_its_chart_into_cargo_target_dir() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = run_in_target_dir(
        &example("contention"),
        &["--clients", "2", "--runs", "1"],
        dir.path(),
    );
    let chart = dir.path().join("contention.svg");
    assert!(chart.is_file(), "no {}: {stdout}", chart.display());
    assert!(stdout.contains(&chart.display().to_string()), "{stdout}");
}

#[test]
fn outage_writes_its_chart_into_cargo_target_dir() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = run_in_target_dir(&example("outage"), &["--clients", "2"], dir.path());
    let chart = dir.path().join("outage.svg");
    assert!(chart.is_file(), "no {}: {stdout}", chart.display());
}
