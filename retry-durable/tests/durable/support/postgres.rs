//! A throwaway PostgreSQL server for the tests, started by the tests themselves.
//!
//! With `DATABASE_URL` set, the tests use that server. Otherwise the first test of a binary
//! starts a cluster in a temporary directory (`initdb` + `pg_ctl`, as the `postgres` user when
//! running as root, listening only on a unix socket in that directory, `fsync` off: nothing
//! here must survive), and a watcher process stops it and removes the directory once the test
//! binary has exited. Each test gets a database of its own. A machine without PostgreSQL fails
//! the tests with what to install: nothing is skipped.

#![allow(dead_code, unreachable_pub)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use retry_durable::{PostgresOptions, PostgresStore};
use retry_testkit::postgres::PostgresCluster;

/// Where the server is: a connection string without `dbname`.
struct Server {
    base: String,
    /// Kept for the life of the test binary; its watcher stops it when the binary exits.
    _cluster: Option<PostgresCluster>,
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
            _cluster: None,
        });
    }
    // One role needs a password, so that a test can be refused one: `checked` / `right`.
    let cluster = PostgresCluster::start_with(
        &[
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=300",
        ],
        Some("local all checked scram-sha-256"),
    )?;
    cluster.psql("postgres", "CREATE ROLE checked LOGIN PASSWORD 'right'")?;
    Ok(Server {
        base: cluster.base().to_owned(),
        _cluster: Some(cluster),
    })
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
