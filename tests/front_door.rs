//! The README is the front door: its two commands must exist, and CI must run exactly the test
//! command it gives.

use std::fs;
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The commands of the README's "Two commands" block.
fn readme_commands() -> Vec<String> {
    let readme = read("README.md");
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README has a ```sh block with the two commands");
    block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn readme_gives_exactly_two_commands_demo_then_tests() {
    let commands = readme_commands();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert!(
        commands[0].starts_with("cargo run --example "),
        "{commands:?}"
    );
    assert_eq!(commands[1], "cargo test --workspace");
}

#[test]
fn readme_demo_example_exists() {
    let commands = readme_commands();
    let name = commands[0]
        .trim_start_matches("cargo run --example ")
        .split_whitespace()
        .next()
        .unwrap();
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("examples/{name}.rs"))
            .exists(),
        "{name}"
    );
}

#[test]
fn ci_runs_the_readme_test_command_fmt_and_clippy() {
    let ci = read(".ci/run");
    let lines: Vec<&str> = ci.lines().map(str::trim).collect();
    assert!(lines.contains(&readme_commands()[1].as_str()), "{ci}");
    assert!(lines.contains(&"cargo fmt --all -- --check"));
    assert!(lines.contains(&"cargo clippy --workspace --all-targets -- -D warnings"));
    assert!(lines.contains(&"set -euo pipefail"));
}
