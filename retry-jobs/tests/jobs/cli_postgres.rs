//! The real binary against a real PostgreSQL (a throwaway cluster the test starts): status,
//! listings, in-flight leases, re-drive and its refusal, cancel, and a server that is down.

use crate::support;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use retry_durable::PostgresStore;
use retry_testkit::postgres::PostgresCluster;
use support::{Made, make, run};

static CLUSTER: OnceLock<PostgresCluster> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

fn cluster() -> &'static PostgresCluster {
    CLUSTER.get_or_init(|| {
        PostgresCluster::start(&["fsync=off", "synchronous_commit=off"])
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// A `postgresql://` URL of a new, empty database (the cluster listens on a unix socket,
/// named in the URL's `host` parameter).
fn database_url() -> String {
    let base = cluster().base();
    let name = format!(
        "retry_jobs_test_{}",
        DATABASES.fetch_add(1, Ordering::SeqCst)
    );
    cluster()
        .psql("postgres", &format!("CREATE DATABASE {name}"))
        .unwrap();
    let value = |key: &str| {
        base.split(' ')
            .find_map(|part| part.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {base}"))
            .to_owned()
    };
    format!(
        "postgresql://{}@localhost:{}/{name}?host={}",
        value("user"),
        value("port"),
        value("host")
    )
}

async fn fixture() -> (String, Made) {
    let url = database_url();
    let store = PostgresStore::connect(&url).await.unwrap();
    let made = make(store, "default").await;
    (url, made)
}

#[tokio::test]
async fn status_on_postgres() {
    let (url, _) = fixture().await;
    let out = run(&url, &["status"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("dead letters:  1 (not re-driven)\n"),
        "{out:?}"
    );
    assert!(
        out.stdout
            .contains("next due:      2026-01-05T00:05:00.000Z (in 3 min)\n"),
        "{out:?}"
    );
    let json = run(&url, &["status", "--json"]).json();
    let send = &json["handlers"].as_array().unwrap()[2];
    assert_eq!(send["handler"], "send");
    assert_eq!(
        (&send["waiting"], &send["running"], &send["cancelled"]),
        (&1.into(), &1.into(), &1.into())
    );
    assert_eq!(send["oldest_waiting_age_ms"], 120_000);
}

#[tokio::test]
async fn list_and_in_flight_on_postgres() {
    let (url, made) = fixture().await;
    let waiting = run(&url, &["list", "--state", "waiting", "--json"]).json();
    let ids: Vec<i64> = waiting["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [made.waiting, made.cron]);
    let cron = run(
        &url,
        &[
            "list",
            "--kind",
            "cron",
            "--due-after",
            "2026-01-05T05:00:00Z",
            "--json",
        ],
    )
    .json();
    assert_eq!(cron["items"][0]["id"], made.cron);
    let paged = run(
        &url,
        &[
            "list",
            "--limit",
            "1",
            "--after",
            &made.waiting.to_string(),
            "--json",
        ],
    )
    .json();
    assert_eq!(paged["items"][0]["id"], made.cron);
    assert_eq!(paged["next_after"], made.cron);

    let out = run(&url, &["in-flight"]);
    assert!(
        out.stdout
            .contains("send     1/3      2026-01-05T00:05:00.000Z (in 3 min)"),
        "{out:?}"
    );
    let show = run(&url, &["show", &made.running.to_string(), "--json"]).json();
    assert_eq!(show["state"], "running");
}

#[tokio::test]
async fn dead_redrive_on_postgres() {
    let (url, made) = fixture().await;
    let id = made.dead.to_string();
    let out = run(&url, &["dead", "redrive", &id]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .starts_with(&format!("re-drove dead letter #{id} as work #")),
        "{out:?}"
    );
    let dead = run(&url, &["dead", "show", &id, "--json"]).json();
    let work = dead["redriven_as"].as_i64().unwrap();
    let shown = run(&url, &["show", &work.to_string(), "--json"]).json();
    assert_eq!(
        (&shown["handler"], &shown["state"]),
        (&"charge".into(), &"waiting".into())
    );

    let again = run(&url, &["dead", "redrive", &id]);
    assert_eq!(again.code, 4, "{again:?}");
    assert!(again.stderr.contains("already re-driven"), "{again:?}");
    let missing = run(&url, &["dead", "redrive", "999"]);
    assert_eq!(missing.code, 3, "{missing:?}");

    let purged = run(&url, &["dead", "purge", &id]);
    assert_eq!(purged.code, 0, "{purged:?}");
    assert_eq!(run(&url, &["dead", "list"]).stdout, "no dead letters\n");
}

#[tokio::test]
async fn cancel_on_postgres() {
    let (url, made) = fixture().await;
    let out = run(&url, &["cancel", &made.running.to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(run(&url, &["in-flight"]).stdout, "nothing in flight\n");
    let again = run(&url, &["cancel", &made.cancelled.to_string()]);
    assert_eq!(again.code, 4, "{again:?}");
}

#[tokio::test]
async fn a_server_that_is_down_fails_with_exit_1() {
    // Port 1 on the loopback: nothing listens there, the connection is refused at once.
    let out = run("postgres://nobody@127.0.0.1:1/jobs", &["status"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .starts_with("retry-jobs: cannot open the store: "),
        "{out:?}"
    );
    assert_eq!(out.stdout, "");
}
