//! The README is the front door: its two commands must exist and build only what they show,
//! CI must run exactly the test command it gives, and the manual lives in the guides.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The workspace root (this package lives in its `tests/` directory).
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    let full = root().join(path);
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

/// `cargo metadata` of the workspace, without dependencies' own manifests.
fn metadata() -> Value {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The workspace members that own an example called `name`.
fn owners_of_example(metadata: &Value, name: &str) -> Vec<Value> {
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|package| {
            package["targets"].as_array().unwrap().iter().any(|target| {
                target["name"] == name
                    && target["kind"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k == "example")
            })
        })
        .cloned()
        .collect()
}

/// The root is a virtual manifest: no package there turns on every crate and feature for
/// whatever command runs at the root.
#[test]
fn the_root_manifest_is_virtual() {
    let manifest = read("Cargo.toml");
    assert!(
        !manifest.contains("\n[package]"),
        "root Cargo.toml has a [package]"
    );
    assert!(
        manifest.lines().any(|l| l.trim() == "[workspace]"),
        "{manifest}"
    );
}

/// The README's first command names an example that exactly one member owns (so cargo, run at
/// the root of a virtual workspace, finds it), and that member depends only on the core, the
/// testkit without its proptest strategies, and tokio: the first build stays small.
#[test]
fn readme_demo_example_builds_only_the_core_and_tokio() {
    let commands = readme_commands();
    let name = commands[0]
        .trim_start_matches("cargo run --example ")
        .split_whitespace()
        .next()
        .unwrap();
    let metadata = metadata();
    let owners = owners_of_example(&metadata, name);
    assert_eq!(
        owners.len(),
        1,
        "members owning example `{name}`: {owners:?}"
    );
    let core = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["manifest_path"]
                .as_str()
                .unwrap()
                .ends_with("retry-core/Cargo.toml")
        })
        .expect("the core package");
    let allowed = [core["name"].as_str().unwrap(), "retry-testkit", "tokio"];
    for dep in owners[0]["dependencies"].as_array().unwrap() {
        let dep_name = dep["name"].as_str().unwrap();
        assert!(
            allowed.contains(&dep_name),
            "the package of `{name}` depends on {dep_name}"
        );
        if dep_name == "retry-testkit" {
            assert_eq!(
                dep["uses_default_features"], false,
                "proptest is not needed"
            );
        }
    }
}

/// Every `cargo run [-p PACKAGE] --example NAME` the user-facing documents give works from
/// the root as written: the package it names owns the example, or, with no `-p`, a default
/// member does (cargo looks for an example only among the default members).
#[test]
fn every_documented_example_command_finds_its_example() {
    let metadata = metadata();
    let default_members: Vec<&str> = metadata["workspace_default_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    let mut documents = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    for dir in [
        "docs/guide",
        "examples/core",
        "examples/durable",
        "examples/http",
        "examples/mcp",
        "examples/agent-tools",
    ] {
        if let Ok(entries) = fs::read_dir(root().join(dir)) {
            documents.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        }
    }
    let mut seen = 0;
    for path in documents {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        for (start, _) in text.match_indices("cargo run ") {
            let words: Vec<&str> = text[start..].split_whitespace().take(8).collect();
            let Some(at) = words.iter().position(|w| *w == "--example") else {
                continue;
            };
            let name: String = words[at + 1]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let package = words[..at]
                .iter()
                .position(|w| *w == "-p")
                .map(|p| words[p + 1]);
            seen += 1;
            let owners = owners_of_example(&metadata, &name);
            assert_eq!(owners.len(), 1, "{}: `--example {name}`", path.display());
            let owner = &owners[0];
            match package {
                Some(package) => assert_eq!(
                    owner["name"],
                    package,
                    "{}: `-p {package} --example {name}`",
                    path.display()
                ),
                None => assert!(
                    default_members.contains(&owner["id"].as_str().unwrap()),
                    "{}: `--example {name}` needs `-p {}`",
                    path.display(),
                    owner["name"]
                ),
            }
        }
    }
    assert!(seen >= 10, "only {seen} example commands found");
}

/// The README stays a front door (at most 250 lines), and the manual lives in the guides, each
/// opening with the dependency lines its blocks need (`.ci/guide-examples` builds exactly
/// those), and each linked from the README.
#[test]
fn readme_is_short_and_every_guide_opens_with_its_dependency_lines() {
    let readme = read("README.md");
    assert!(
        readme.lines().count() <= 250,
        "README.md has {} lines",
        readme.lines().count()
    );
    let mut guides: Vec<_> = fs::read_dir(root().join("docs/guide"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    guides.sort();
    assert_eq!(guides.len(), 8, "{guides:?}");
    for guide in guides {
        let text = fs::read_to_string(&guide).unwrap();
        let name = guide.file_name().unwrap().to_str().unwrap();
        assert!(
            readme.contains(&format!("(docs/guide/{name}")),
            "README does not link {name}"
        );
        let first_block = text.find("```").unwrap();
        assert!(
            text[first_block..].starts_with("```toml\n[dependencies]\n"),
            "{name}: the first block is not its dependency lines"
        );
        assert!(
            !text[..first_block].contains("\n## "),
            "{name}: a section comes before the dependency lines"
        );
    }
}
