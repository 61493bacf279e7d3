//! `cargo run -p retry-examples-agent-tools --example agent_tools -- --db <path>` survives a real restart (A1, A5): the
//! example runs as a real process, kills itself with SIGKILL at the step `--crash-after`
//! names, and a second process on the same file recovers the run, says in plain words what it
//! did with each call, and finishes it. Checked for every step the example offers, by what
//! the processes print and what the outside world (its log beside the database) saw.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The example's binary, built by this test if `cargo test` has not (a `--test` run builds
/// only the test). Built with the workspace's features, as `cargo test --workspace` and the
/// README's `cargo run --example` build it, so that build is reused: `-p` alone resolves the
/// package's own features and compiles about thirty dependencies again.
fn example() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let output = Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "--workspace",
                "--example",
                "agent_tools",
                "--message-format=json",
            ])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cargo build -p retry-examples-agent-tools --example agent_tools: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|m| m["target"]["name"] == "agent_tools")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the example's executable")
    })
}

fn run(args: &[&str]) -> (Output, String) {
    let output = Command::new(example()).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output, stdout)
}

/// Runs the example on a new database until it kills itself after `step`, then again; returns
/// what each process printed and the world's log.
fn crash_and_restart(step: &str) -> (String, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let db = db.to_str().unwrap();
    let (first, before) = run(&["--db", db, "--crash-after", step]);
    assert_eq!(
        first.status.signal(),
        Some(9),
        "`--crash-after {step}` did not SIGKILL the process: {before}"
    );
    assert!(
        before.contains("killing this process (SIGKILL)"),
        "{before}"
    );
    let (second, after) = run(&["--db", db]);
    assert!(
        second.status.success(),
        "{after}{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let world = std::fs::read_to_string(format!("{db}.world")).unwrap();
    (before, after, world)
}

fn count(world: &str, prefix: &str) -> usize {
    world.lines().filter(|l| l.starts_with(prefix)).count()
}

/// Every call ends in the transcript once; every side effect happened once.
fn finished(after: &str, world: &str) {
    let transcript = after.split("\ntranscript:\n").nth(1).expect(after);
    for call in ["call-1", "call-2", "call-3", "call-4"] {
        assert_eq!(
            transcript.matches(&format!("run-7:{call}: ")).count(),
            1,
            "{after}"
        );
    }
    assert_eq!(count(world, "send_email "), 1, "{world}");
    assert_eq!(count(world, "pay_invoice "), 1, "{world}");
    assert_eq!(count(world, "save_note run-7:call-2 saved"), 1, "{world}");
    assert!(
        after.contains("send_email ran 1x; pay_invoice ran 1x"),
        "{after}"
    );
}

#[test]
fn a5_a_side_effect_killed_after_it_acted_goes_to_a_person_not_out_again() {
    let (before, after, world) = crash_and_restart("send_email");
    assert!(before.contains("mail server: e-mail sent to ana@example.com"));
    for line in [
        "run-7 is in ",
        "3 calls recorded by an earlier process; recovering",
        "run-7:call-1 lookup_weather (read): committed by the earlier process: replayed the \
         recorded result, the tool was not called again",
        "run-7:call-2 save_note (idempotent-write): committed by the earlier process: replayed \
         the recorded result",
        "run-7:call-3 send_email (side-effect): sent the side effect to reconciliation",
        "a person decides",
        "an operator checks the outside world for run-7:call-3: it happened; recording that",
        "pay_invoice waits for approval",
        "an operator approves run-7:call-4",
    ] {
        assert!(after.contains(line), "missing `{line}` in:\n{after}");
    }
    // The second process never sent the e-mail again, and the world saw it once.
    assert!(!after.contains("mail server: e-mail sent"), "{after}");
    finished(&after, &world);
}

#[test]
fn a5_each_crash_step_is_recovered_and_said_in_plain_words() {
    let cases: [(&str, &[&str]); 4] = [
        (
            "lookup_weather",
            &[
                "run-7:call-1 lookup_weather (read): started, no result recorded: re-ran the \
               read-only call",
            ],
        ),
        (
            "save_note",
            &[
                "notes store: key run-7:call-2 seen before, nothing changed",
                "run-7:call-2 save_note (idempotent-write): started, no result recorded: re-ran \
                 the idempotent write with the same key run-7:call-2",
                "save_note ran 2x, the store holds 1 note",
            ],
        ),
        (
            "approval",
            &[
                "run-7:call-4 pay_invoice (side-effect): waiting for approval: nothing runs until \
               a person decides",
            ],
        ),
        (
            "pay_invoice",
            &[
                "run-7:call-4 pay_invoice (side-effect): sent the side effect to reconciliation",
                "an operator checks the outside world for run-7:call-4: it happened",
            ],
        ),
    ];
    for (step, lines) in cases {
        let (_, after, world) = crash_and_restart(step);
        for line in lines {
            assert!(
                after.contains(line),
                "--crash-after {step}: missing `{line}` in:\n{after}"
            );
        }
        finished(&after, &world);
    }
}

#[test]
fn a1_a_finished_run_run_again_replays_every_result_and_acts_on_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let db = db.to_str().unwrap();
    let (first, _) = run(&["--db", db]);
    assert!(first.status.success());
    let world = std::fs::read_to_string(format!("{db}.world")).unwrap();
    let (again, said) = run(&["--db", db]);
    assert!(again.status.success());
    assert_eq!(
        said.matches("replayed the recorded result").count(),
        4,
        "{said}"
    );
    assert!(!said.contains("the agent goes on"), "{said}");
    assert_eq!(
        std::fs::read_to_string(format!("{db}.world")).unwrap(),
        world,
        "a finished run acted again"
    );
}

#[test]
fn bad_arguments_are_refused_with_the_steps_and_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let db = db.to_str().unwrap();
    for args in [
        &["--db", db, "--crash-after", "send_mail"][..],
        &["--crash-after", "send_email"][..],
        &["--db"][..],
        &["--frobnicate"][..],
    ] {
        let (output, _) = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("error: "), "{args:?}: {stderr}");
        assert!(stderr.contains("usage: agent_tools"), "{args:?}: {stderr}");
    }
    let (output, _) = run(&["--db", db, "--crash-after", "send_mail"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "`send_mail` is not a step; use one of lookup_weather, save_note, send_email, \
             pay_invoice, approval"
        ),
        "{stderr}"
    );
    assert!(
        !Path::new(db).exists(),
        "a refused command created the database"
    );
}

#[test]
fn without_a_database_the_example_still_simulates_the_crash_in_one_process() {
    let (output, said) = run(&[]);
    assert!(output.status.success(), "{said}");
    for line in [
        "process 1: the agent calls three tools",
        "*** the process crashes ***",
        "process 2: restarted 10 minutes later; recovering run-7",
        "the world saw: lookup_weather ran 1x; save_note ran 2x, the store holds 1 note; \
         send_email ran 1x",
    ] {
        assert!(said.contains(line), "missing `{line}` in:\n{said}");
    }
}
