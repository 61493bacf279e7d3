//! The real binary against a real SQLite file: every command's output and exit code, the
//! JSON shape, the mutations and their refusals, and bad input.

use crate::support;

use std::path::PathBuf;

use retry_durable::SqliteStore;
use support::{Made, NOW, make, run, run_raw};

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    made: Made,
}

impl Fixture {
    fn db(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let made = make(SqliteStore::open(&path).unwrap(), "default").await;
    Fixture {
        _dir: dir,
        path,
        made,
    }
}

#[tokio::test]
async fn status_counts_each_handlers_work_by_state() {
    let f = fixture().await;
    let out = run(f.db(), &["status"]);
    assert_eq!(out.code, 0, "{out:?}");
    let text = &out.stdout;
    assert!(
        text.starts_with("owner `default` at 2026-01-05T00:02:00.000Z\n"),
        "{out:?}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let header = lines[2];
    assert!(
        header.starts_with("HANDLER  WAITING  RUNNING  DEAD"),
        "{out:?}"
    );
    let charge = lines.iter().find(|l| l.starts_with("charge")).unwrap();
    let send = lines.iter().find(|l| l.starts_with("send")).unwrap();
    let report = lines.iter().find(|l| l.starts_with("report")).unwrap();
    let cells = |l: &str| {
        l.split("  ")
            .filter(|c| !c.is_empty())
            .map(str::trim)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // handler, waiting, running, dead, cancelled, succeeded, oldest waiting, next due
    assert_eq!(cells(charge)[..6], ["charge", "0", "0", "1", "0", "0"]);
    assert_eq!(
        cells(send),
        [
            "send",
            "1",
            "1",
            "0",
            "1",
            "0",
            "2 min",
            "2026-01-05T00:05:00.000Z (in 3 min)"
        ]
    );
    assert_eq!(cells(report)[7], "2026-01-05T06:00:00.000Z (in 5 h)");
    assert!(
        text.contains("next due:      2026-01-05T00:05:00.000Z (in 3 min)\n"),
        "{out:?}"
    );
    assert!(
        text.contains("dead letters:  1 (not re-driven)\n"),
        "{out:?}"
    );
    assert!(text.contains("quarantined:   0\n"), "{out:?}");
}

#[tokio::test]
async fn status_as_json_has_stable_field_names() {
    let f = fixture().await;
    let out = run(f.db(), &["status", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let json = out.json();
    assert_eq!(json["owner"], "default");
    assert_eq!(json["now"], "2026-01-05T00:02:00.000Z");
    assert_eq!(json["next_due"], "2026-01-05T00:05:00.000Z");
    assert_eq!(json["dead_letters"], 1);
    assert_eq!(json["quarantined"], 0);
    assert_eq!(json["corrupt"], 0);
    let send = &json["handlers"].as_array().unwrap()[2];
    assert_eq!(
        send,
        &serde_json::json!({
            "handler": "send", "waiting": 1, "running": 1, "cancelled": 1, "succeeded": 0,
            "dead_lettered": 0, "oldest_waiting_since": "2026-01-05T00:00:00.000Z",
            "oldest_waiting_age_ms": 120_000, "next_due": "2026-01-05T00:05:00.000Z",
            "dead_letters": 0,
        })
    );
}

#[tokio::test]
async fn status_of_another_owner_is_empty() {
    let f = fixture().await;
    let out = run(f.db(), &["--owner", "billing", "status"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("owner `billing`"), "{out:?}");
    assert!(
        out.stdout.contains("no work and no dead letters"),
        "{out:?}"
    );
    assert!(out.stdout.contains("next due:      -"), "{out:?}");
}

fn ids(out: &support::Run) -> Vec<i64> {
    out.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn list_filters_by_state_handler_kind_and_due_time() {
    let f = fixture().await;
    let m = &f.made;
    let all = run(f.db(), &["list", "--json"]);
    assert_eq!(all.code, 0, "{all:?}");
    let mut every = vec![m.waiting, m.cron, m.cancelled, m.running];
    every.sort();
    assert_eq!(ids(&all), every);
    let cases: [(&[&str], Vec<i64>); 7] = [
        (&["--state", "waiting"], vec![m.waiting, m.cron]),
        (&["--state", "running"], vec![m.running]),
        (&["--handler", "report"], vec![m.cron]),
        (&["--kind", "cron"], vec![m.cron]),
        (&["--kind", "once", "--state", "waiting"], vec![m.waiting]),
        (
            &["--due-before", "2026-01-05T00:10:00Z"],
            vec![m.cancelled, m.running],
        ),
        (
            &["--due-after", "2026-01-05T00:10:00Z", "--handler", "send"],
            vec![m.waiting],
        ),
    ];
    for (filter, expected) in cases {
        let mut args = vec!["list", "--json"];
        args.extend_from_slice(filter);
        let out = run(f.db(), &args);
        assert_eq!(out.code, 0, "{filter:?}: {out:?}");
        assert_eq!(ids(&out), expected, "{filter:?}");
    }
}

#[tokio::test]
async fn list_pages_with_limit_and_after() {
    let f = fixture().await;
    let first = run(f.db(), &["list", "--json", "--limit", "3"]);
    assert_eq!(ids(&first).len(), 3);
    let next = first.json()["next_after"].as_i64().unwrap();
    assert_eq!(Some(&next), ids(&first).last());
    let after = next.to_string();
    let second = run(
        f.db(),
        &["list", "--json", "--limit", "3", "--after", &after],
    );
    assert_eq!(ids(&second), [f.made.running]);
    assert_eq!(second.json()["next_after"], serde_json::Value::Null);

    let text = run(f.db(), &["list", "--limit", "1"]);
    assert!(
        text.stdout
            .ends_with(&format!("more: --after {}\n", f.made.waiting)),
        "{text:?}"
    );
}

#[tokio::test]
async fn list_prints_aligned_columns_with_times() {
    let f = fixture().await;
    let out = run(f.db(), &["list", "--state", "waiting"]);
    assert_eq!(out.code, 0, "{out:?}");
    let expected = format!(
        "ID  STATE    HANDLER  KIND  ATTEMPT  DUE                                  LAST ERROR\n\
         {:<2}  waiting  send     once  0/3      2026-01-05T00:10:00.000Z (in 8 min)  -\n\
         {:<2}  waiting  report   cron  0/3      2026-01-05T06:00:00.000Z (in 5 h)    -\n",
        f.made.waiting, f.made.cron
    );
    assert_eq!(out.stdout, expected);

    let none = run(f.db(), &["list", "--handler", "nobody"]);
    assert_eq!((none.code, none.stdout.as_str()), (0, "no work matches\n"));
}

#[tokio::test]
async fn show_prints_the_full_record() {
    let f = fixture().await;
    let id = f.made.running.to_string();
    let out = run(f.db(), &["show", &id]);
    assert_eq!(out.code, 0, "{out:?}");
    for line in [
        format!("work:         #{id}"),
        "handler:      send".to_owned(),
        "state:        running".to_owned(),
        "timing:       queue".to_owned(),
        "attempts:     1/3".to_owned(),
        "lease until:  2026-01-05T00:05:00.000Z (in 3 min)".to_owned(),
        "created:      2026-01-05T00:00:00.000Z (2 min ago)".to_owned(),
        "payload:      2".to_owned(),
    ] {
        assert!(out.stdout.lines().any(|l| l == line), "{line}\n{out:?}");
    }
    assert!(
        out.stdout.contains("options:      {\"max_attempts\":3"),
        "{out:?}"
    );

    let json = run(f.db(), &["show", &f.made.cron.to_string(), "--json"]).json();
    assert_eq!(
        json["timing"],
        serde_json::json!({"kind": "cron", "cron": "0 6 * * *", "zone": "UTC", "misfire": "fire-once"})
    );
    assert_eq!(json["payload"], "daily");
    assert_eq!(json["state"], "waiting");
    assert_eq!(json["due_at"], "2026-01-05T06:00:00.000Z");
    assert_eq!(json["lease_until"], serde_json::Value::Null);
    assert_eq!(json["options"]["max_attempts"], 3);
}

#[tokio::test]
async fn show_of_an_unknown_id_is_not_found() {
    let f = fixture().await;
    let out = run(f.db(), &["show", "999"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr, "retry-jobs: no work #999\n");
}

#[tokio::test]
async fn in_flight_shows_the_lease_and_the_attempt() {
    let f = fixture().await;
    let out = run(f.db(), &["in-flight"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!(
            "ID  HANDLER  ATTEMPT  LEASE UNTIL\n{:<2}  send     1/3      2026-01-05T00:05:00.000Z (in 3 min)\n",
            f.made.running
        )
    );
    // Once the lease has run out, the worker is presumed dead.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_retry-jobs"));
    let late = command
        .env_remove("DATABASE_URL")
        .args([
            "--database",
            f.db(),
            "--now",
            "2026-01-05T00:06:00Z",
            "in-flight",
        ])
        .output()
        .unwrap();
    let late = String::from_utf8(late.stdout).unwrap();
    assert!(
        late.contains("(1 min ago) (expired: the next claim takes it)"),
        "{late}"
    );

    let json = run(f.db(), &["in-flight", "--json"]).json();
    assert_eq!(json["items"][0]["lease_until"], "2026-01-05T00:05:00.000Z");
    assert_eq!(json["items"][0]["attempt"], 1);
}

#[tokio::test]
async fn dead_letters_are_listed_and_shown() {
    let f = fixture().await;
    let out = run(f.db(), &["dead", "list"]);
    assert_eq!(out.code, 0, "{out:?}");
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(
            "ID  WORK  HANDLER  REASON     ATTEMPTS  FAILED                                RE-DRIVEN AS  LAST ERROR"
        )
    );
    let row = lines.next().unwrap();
    assert!(row.starts_with(&format!("{:<2}  ", f.made.dead)), "{row}");
    assert!(row.contains("charge   exhausted  1         2026-01-05T00:00:00.000Z (2 min ago)  -             card declined"), "{row}");

    let id = f.made.dead.to_string();
    let show = run(f.db(), &["dead", "show", &id]);
    assert_eq!(show.code, 0, "{show:?}");
    assert!(
        show.stdout.contains("reason:       exhausted\n"),
        "{show:?}"
    );
    assert!(
        show.stdout.contains("last error:   card declined\n"),
        "{show:?}"
    );
    assert!(
        show.stdout.contains("payload:      {\"order\":7}\n"),
        "{show:?}"
    );
    assert!(show.stdout.contains("re-driven as: -\n"), "{show:?}");

    let json = run(f.db(), &["dead", "show", &id, "--json"]).json();
    assert_eq!(json["reason"], "exhausted");
    assert_eq!(json["payload"], serde_json::json!({"order": 7}));
    assert_eq!(json["failed_at"], "2026-01-05T00:00:00.000Z");
    assert_eq!(json["redriven_as"], serde_json::Value::Null);

    let missing = run(f.db(), &["dead", "show", "999"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (3, "retry-jobs: no dead letter #999\n")
    );
    let other = run(f.db(), &["--owner", "billing", "dead", "list"]);
    assert_eq!(other.stdout, "no dead letters\n");
}

#[tokio::test]
async fn redrive_writes_new_work_once_and_refuses_again() {
    let f = fixture().await;
    let id = f.made.dead.to_string();
    let out = run(f.db(), &["dead", "redrive", &id, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let json = out.json();
    assert_eq!(json["dead_letter"], f.made.dead);
    assert_eq!(json["work"]["handler"], "charge");
    assert_eq!(json["work"]["state"], "waiting");
    assert_eq!(json["work"]["attempt"], 0);
    assert_eq!(json["work"]["due_at"], "2026-01-05T00:02:00.000Z");
    assert_eq!(json["work"]["payload"], serde_json::json!({"order": 7}));
    let work = json["work"]["id"].as_i64().unwrap();

    let shown = run(f.db(), &["show", &work.to_string()]);
    assert_eq!(shown.code, 0, "{shown:?}");
    let dead = run(f.db(), &["dead", "show", &id, "--json"]).json();
    assert_eq!(dead["redriven_as"], work);

    let again = run(f.db(), &["dead", "redrive", &id]);
    assert_eq!(again.code, 4, "{again:?}");
    assert_eq!(
        again.stderr,
        format!("retry-jobs: dead letter #{id} was already re-driven as work #{work}\n")
    );
    let missing = run(f.db(), &["dead", "redrive", "999"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (3, "retry-jobs: no dead letter #999\n")
    );
}

#[tokio::test]
async fn redrive_says_what_it_did() {
    let f = fixture().await;
    let out = run(f.db(), &["dead", "redrive", &f.made.dead.to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .starts_with(&format!("re-drove dead letter #{} as work #", f.made.dead)),
        "{out:?}"
    );
    assert!(
        out.stdout
            .ends_with(" (charge, due 2026-01-05T00:02:00.000Z (just now))\n"),
        "{out:?}"
    );
}

#[tokio::test]
async fn purge_deletes_a_dead_letter_once() {
    let f = fixture().await;
    let id = f.made.dead.to_string();
    let out = run(f.db(), &["dead", "purge", &id]);
    assert_eq!(
        (out.code, out.stdout.clone()),
        (0, format!("purged dead letter #{id}\n"))
    );
    assert_eq!(run(f.db(), &["dead", "list"]).stdout, "no dead letters\n");
    let again = run(f.db(), &["dead", "purge", &id]);
    assert_eq!(
        (again.code, again.stderr),
        (3, format!("retry-jobs: no dead letter #{id}\n"))
    );
}

#[tokio::test]
async fn cancel_stops_waiting_work_and_refuses_what_cannot_run() {
    let f = fixture().await;
    let id = f.made.waiting.to_string();
    let out = run(f.db(), &["cancel", &id]);
    assert_eq!(
        (out.code, out.stdout.clone()),
        (0, format!("cancelled work #{id} (it was waiting)\n")),
        "{out:?}"
    );
    let json = run(f.db(), &["show", &id, "--json"]).json();
    assert_eq!(json["state"], "cancelled");

    let again = run(f.db(), &["cancel", &id]);
    assert_eq!(again.code, 4, "{again:?}");
    assert_eq!(
        again.stderr,
        format!(
            "retry-jobs: work #{id} is cancelled: only waiting or running work can be cancelled\n"
        )
    );
    let missing = run(f.db(), &["cancel", "999"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (3, "retry-jobs: no work #999\n")
    );

    let running = run(f.db(), &["cancel", &f.made.running.to_string(), "--json"]);
    assert_eq!(running.code, 0, "{running:?}");
    assert_eq!(
        running.json(),
        serde_json::json!({"work": f.made.running, "was": "running"})
    );
    assert_eq!(run(f.db(), &["in-flight"]).stdout, "nothing in flight\n");
}

#[tokio::test]
async fn bad_values_are_usage_errors() {
    let f = fixture().await;
    let state = run(f.db(), &["list", "--state", "sleeping"]);
    assert_eq!(state.code, 2, "{state:?}");
    assert!(
        state.stderr.contains("unknown state `sleeping`: expected one of waiting, running, cancelled, succeeded, dead_lettered"),
        "{state:?}"
    );
    let time = run(f.db(), &["list", "--due-before", "tomorrow"]);
    assert_eq!(time.code, 2, "{time:?}");
    assert!(
        time.stderr
            .contains("`tomorrow` is not a time: expected RFC 3339"),
        "{time:?}"
    );
    let kind = run(f.db(), &["list", "--kind", "weekly"]);
    assert_eq!(kind.code, 2, "{kind:?}");
    let id = run(f.db(), &["show", "seven"]);
    assert_eq!(id.code, 2, "{id:?}");
    let limit = run(f.db(), &["list", "--limit", "0"]);
    assert_eq!(limit.code, 2, "{limit:?}");
    let unknown = run(f.db(), &["restart"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    // A dash for an underscore is accepted.
    assert_eq!(run(f.db(), &["list", "--state", "dead-lettered"]).code, 0);
}

#[tokio::test]
async fn a_missing_file_is_refused_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jbos.db");
    let out = run(path.to_str().unwrap(), &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr.starts_with("retry-jobs: no such file `"),
        "{out:?}"
    );
    assert!(out.stderr.contains("nothing is created"), "{out:?}");
    assert!(!path.exists());
}

#[tokio::test]
async fn a_file_that_is_not_a_jobs_database_fails_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "not a database at all, just some text that is long enough",
    )
    .unwrap();
    let out = run(path.to_str().unwrap(), &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("retry-jobs: cannot open the store: "),
        "{out:?}"
    );
}

#[tokio::test]
async fn the_store_comes_from_database_url_or_nowhere() {
    let f = fixture().await;
    let out = run_raw(
        &["--now", NOW, "status", "--json"],
        &[("DATABASE_URL", f.db())],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["dead_letters"], 1);

    let none = run_raw(&["status"], &[]);
    assert_eq!(none.code, 2, "{none:?}");
    assert!(
        none.stderr.contains("no store given: pass `--database"),
        "{none:?}"
    );
}

#[tokio::test]
async fn help_documents_the_exit_codes() {
    let out = run_raw(&["--help"], &[]);
    assert_eq!(out.code, 0, "{out:?}");
    for line in ["Exit codes:", "3  not found", "4  refused"] {
        assert!(out.stdout.contains(line), "{line}\n{out:?}");
    }
    assert!(
        !out.stdout.contains("--now"),
        "the test-only flag is hidden"
    );
}

#[tokio::test]
async fn corrupt_and_quarantined_rows_are_counted_and_listed() {
    use retry_durable::Store;
    let f = fixture().await;
    let id = f.made.waiting;
    let conn = rusqlite::Connection::open(&f.path).unwrap();
    let changed = conn
        .execute("UPDATE work SET payload = 'not json' WHERE id = ?1", [id])
        .unwrap();
    assert_eq!(changed, 1);

    let status = run(f.db(), &["status", "--json"]).json();
    assert_eq!(
        (&status["corrupt"], &status["quarantined"]),
        (&1.into(), &0.into())
    );
    assert_eq!(
        status["handlers"][2]["waiting"], 0,
        "a corrupt row is not counted as work"
    );
    let text = run(f.db(), &["status"]);
    assert!(
        text.stdout.contains("corrupt rows:  1 (see `list`)\n"),
        "{text:?}"
    );
    let list = run(f.db(), &["list", "--state", "waiting"]);
    assert!(
        list.stdout
            .ends_with(&format!("corrupt row #{id}: payload is not JSON\n")),
        "{list:?}"
    );
    let json = run(f.db(), &["list", "--json"]).json();
    assert_eq!(
        json["corrupt"],
        serde_json::json!([{"id": id, "problem": "payload is not JSON"}])
    );
    let show = run(f.db(), &["show", &id.to_string()]);
    assert_eq!(show.code, 1, "{show:?}");
    assert!(show.stderr.contains("payload is not JSON"), "{show:?}");

    // A worker's claim sets it apart.
    let store = SqliteStore::open(&f.path).unwrap();
    let later = support::MONDAY + std::time::Duration::from_secs(3600);
    let until = later + std::time::Duration::from_secs(60);
    let claim = store.claim("default", later, until, 10).await.unwrap();
    assert_eq!(claim.corrupt.len(), 1);
    assert!(
        store
            .quarantine(
                retry_durable::WorkId(id),
                until,
                "payload is not JSON".into(),
                later
            )
            .await
            .unwrap()
    );
    let status = run(f.db(), &["status", "--json"]).json();
    assert_eq!(
        (&status["corrupt"], &status["quarantined"]),
        (&1.into(), &1.into())
    );
}

#[tokio::test]
async fn serve_refuses_a_short_token_as_a_usage_error() {
    let f = fixture().await;
    let out = run_raw(
        &["serve", "--database", f.db()],
        &[("RETRY_JOBS_TOKEN", "short")],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("needs at least 16"), "{out:?}");
}

/// `serve` from the real binary: it says where it listens, and that address answers with the
/// status page of the file it was given.
#[tokio::test]
async fn serve_listens_where_it_says_and_shows_the_status_page() {
    use std::io::{BufRead, BufReader, Read, Write};

    let f = fixture().await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_retry-jobs"))
        .env_remove("DATABASE_URL")
        .env("RETRY_JOBS_TOKEN", "a-token-of-twenty-bytes")
        .args(["serve", "--database", f.db(), "--bind", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("serve printed its address").unwrap();
        if let Some(rest) = line.strip_prefix("dashboard on http://") {
            break rest.trim_end_matches('/').to_owned();
        }
    };
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains("send"),
        "the fixture's handler is listed: {page}"
    );
}

/// A dead letter shows the attempts that led to it (the history its work kept), as text and
/// as JSON; work that never ended an attempt says none is kept.
#[tokio::test]
async fn show_lists_the_attempts_kept() {
    let f = fixture().await;
    let dead = run(f.db(), &["dead", "show", &f.made.dead.to_string()]);
    assert_eq!(dead.code, 0, "{dead:?}");
    let kept = dead
        .stdout
        .split("attempts kept:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no attempts section: {dead:?}"));
    assert!(kept.contains("dead-lettered"), "{dead:?}");
    assert!(kept.contains("card declined"), "{dead:?}");

    let json = run(
        f.db(),
        &["dead", "show", &f.made.dead.to_string(), "--json"],
    )
    .json();
    let history = json["history"].as_array().expect("a history array");
    assert_eq!(history.len(), 1, "{json}");
    assert_eq!(history[0]["attempt"], 1);
    assert_eq!(history[0]["outcome"], "dead-lettered");
    assert_eq!(history[0]["error"], "card declined");

    let waiting = run(f.db(), &["show", &f.made.waiting.to_string()]);
    assert!(
        waiting.stdout.ends_with("attempts kept:\n  none\n"),
        "{waiting:?}"
    );
    let json = run(f.db(), &["show", &f.made.waiting.to_string(), "--json"]).json();
    assert_eq!(json["history"], serde_json::json!([]));
}
