//! A throwaway PostgreSQL server for the tests, started by the tests themselves.
//!
//! With `DATABASE_URL` set, the tests use that server. Otherwise the first test of a binary
//! starts a cluster in a temporary directory (`initdb` + `pg_ctl`, as the `postgres` user when
//! running as root, listening only on a unix socket in that directory, `fsync` off: nothing
//! here must survive), and a watcher process stops it and removes the directory once the test
//! binary has exited. Each test gets a database of its own. A machine without PostgreSQL fails
//! the tests with what to install: nothing is skipped.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use retry_durable::{PostgresOptions, PostgresStore};

/// Where the server is: a connection string without `dbname`.
struct Server {
    base: String,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// A connection string for a new, empty database of its own.
pub async fn database_url() -> String {
    let base = server();
    let name = format!(
        "retry_durable_test_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::SeqCst)
    );
    let (client, connection) =
        tokio_postgres::connect(&format!("{base} dbname=postgres"), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the test server at {base}: {e}"));
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    drop(client);
    let _ = driver.await;
    format!("{base} dbname={name}")
}

/// The server's connection string without a database (`host=… port=… user=…`).
pub fn server() -> String {
    match SERVER.get_or_init(start) {
        Ok(server) => server.base.clone(),
        Err(why) => panic!("{why}"),
    }
}

/// A store on a new database; the guard is `()` (the cluster outlives every test).
pub async fn fresh() -> (PostgresStore, ()) {
    fresh_with(PostgresOptions::default()).await
}

/// A store with `options` on a new database.
pub async fn fresh_with(options: PostgresOptions) -> (PostgresStore, ()) {
    let url = database_url().await;
    let store = PostgresStore::connect_with(&url, options)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    (store, ())
}

fn start() -> Result<Server, String> {
    if let Ok(url) = std::env::var("DATABASE_URL") {
        return Ok(Server {
            base: key_value_base(&url)?,
        });
    }
    let bin = server_binaries()?;
    let dir = tempfile::Builder::new()
        .prefix("retry-durable-pg-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?
        .keep();
    let root = is_root();
    if root {
        let (uid, gid) = postgres_ids()?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| format!("chown: {e}"))?;
    }
    let data = dir.join("data");
    run(
        root,
        bin.join("initdb"),
        &[
            "-D",
            path(&data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
    )?;
    // One role needs a password, so that a test can be refused one: `checked` / `right`.
    let hba = data.join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
    std::fs::write(&hba, format!("local all checked scram-sha-256\n{rules}"))
        .map_err(|e| format!("pg_hba.conf: {e}"))?;
    let settings = format!(
        "-k {} -c listen_addresses='' -c fsync=off -c synchronous_commit=off \
         -c full_page_writes=off -c max_connections=300",
        path(&dir)
    );
    let log = dir.join("server.log");
    run(
        root,
        bin.join("pg_ctl"),
        &[
            "-D",
            path(&data),
            "-o",
            &settings,
            "-l",
            path(&log),
            "-w",
            "start",
        ],
    )
    .map_err(|e| {
        format!(
            "{e}; server log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    })?;
    watch_and_stop(root, &bin, &dir, &data)?;
    let base = format!("host={} port=5432 user=postgres", path(&dir));
    run(
        root,
        bin.join("psql"),
        &[
            &format!("{base} dbname=postgres"),
            "-c",
            "CREATE ROLE checked LOGIN PASSWORD 'right'",
        ],
    )?;
    Ok(Server { base })
}

/// A `DATABASE_URL` as key=value pairs without its database, so that one can be appended.
fn key_value_base(url: &str) -> Result<String, String> {
    let config: tokio_postgres::Config = url.parse().map_err(|e| format!("DATABASE_URL: {e}"))?;
    let mut parts = Vec::new();
    for host in config.get_hosts() {
        match host {
            tokio_postgres::config::Host::Tcp(name) => parts.push(format!("host={name}")),
            tokio_postgres::config::Host::Unix(dir) => {
                parts.push(format!("host={}", dir.display()))
            }
        }
    }
    if let Some(port) = config.get_ports().first() {
        parts.push(format!("port={port}"));
    }
    if let Some(user) = config.get_user() {
        parts.push(format!("user={user}"));
    }
    if let Some(password) = config.get_password() {
        parts.push(format!("password={}", String::from_utf8_lossy(password)));
    }
    Ok(parts.join(" "))
}

fn server_binaries() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .collect();
    candidates.sort();
    candidates.reverse(); // the newest version first
    if let Some(paths) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&paths));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .ok_or_else(|| {
            "the PostgreSQL tests need a server: `initdb` and `pg_ctl` were not found in \
             /usr/lib/postgresql/*/bin or on PATH. Install them (`apt-get install postgresql`) \
             or set DATABASE_URL to a server these tests may create databases on."
                .to_owned()
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn postgres_ids() -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(|e| format!("id: {e}"))?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| {
            "running as root, the tests start PostgreSQL as the `postgres` user, which does not \
             exist here (installing the `postgresql` package creates it)"
                .to_owned()
        })
    };
    Ok((id("-u")?, id("-g")?))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Runs a server binary, as `postgres` when we are root (the server refuses to run as root).
fn run(root: bool, program: PathBuf, args: &[&str]) -> Result<(), String> {
    let mut command = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&program);
        c
    } else {
        Command::new(&program)
    };
    let out = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {:?} failed: {}{}",
            program.display(),
            args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A detached watcher: once this test binary has exited, stop the server and remove its
/// directory.
fn watch_and_stop(root: bool, bin: &Path, dir: &Path, data: &Path) -> Result<(), String> {
    let as_postgres = if root { "runuser -u postgres -- " } else { "" };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
         {as_postgres}{pg_ctl} -D {data} stop -m immediate >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        pg_ctl = path(&bin.join("pg_ctl")),
        data = path(data),
        dir = path(dir),
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the server's watcher: {e}"))
}
