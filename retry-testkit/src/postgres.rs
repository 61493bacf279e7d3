//! A throwaway PostgreSQL server for tests and benchmarks: [`PostgresCluster`].
//!
//! Tests of a PostgreSQL store need a real server, and a fresh machine has the binaries but no
//! running cluster. [`PostgresCluster::start`] makes one in a temporary directory (`initdb`,
//! then `pg_ctl start`, as the `postgres` user when running as root — the server refuses to
//! run as root), listening only on a unix socket in that directory. It is stopped and removed
//! when dropped, and a detached watcher does the same once the process has exited, so a test
//! binary (whose statics are never dropped) or a killed process leaves nothing behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A PostgreSQL cluster of this process's own. See the [module docs](self).
///
/// ```no_run
/// use retry_testkit::postgres::PostgresCluster;
///
/// let cluster = PostgresCluster::start(&["fsync=off"])?;
/// cluster.psql("postgres", "CREATE DATABASE app")?;
/// let url = format!("{} dbname=app", cluster.base());
/// # drop(url);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct PostgresCluster {
    root: bool,
    bin: PathBuf,
    dir: PathBuf,
    base: String,
}

impl PostgresCluster {
    /// Starts a cluster with the server settings `settings` (`"name=value"`, passed as `-c`).
    ///
    /// # Errors
    /// What is missing or failed, in words: no `initdb`/`pg_ctl` (with what to install), no
    /// `postgres` user when running as root, or the failing command's output and the server log.
    pub fn start(settings: &[&str]) -> Result<Self, String> {
        Self::start_with(settings, None)
    }

    /// [`start`](Self::start), with `hba_line` put first in `pg_hba.conf` (for instance one
    /// role that must give a password, so that a test can be refused one).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with(settings: &[&str], hba_line: Option<&str>) -> Result<Self, String> {
        let bin = server_binaries()?;
        let dir = std::env::temp_dir().join(format!(
            "retry-testkit-pg-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let root = is_root();
        if root {
            let (uid, gid) = postgres_ids()?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        let cluster = PostgresCluster {
            base: format!("host={} port=5432 user=postgres", text(&dir)?),
            root,
            bin,
            dir,
        };
        cluster.watch()?;
        let data = cluster.dir.join("data");
        // `--no-sync` skips only initdb's own final sync; the server fsyncs as configured.
        cluster.run(
            "initdb",
            &[
                "-D",
                text(&data)?,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        if let Some(line) = hba_line {
            let hba = data.join("pg_hba.conf");
            let rules = std::fs::read_to_string(&hba).map_err(|e| format!("pg_hba.conf: {e}"))?;
            std::fs::write(&hba, format!("{line}\n{rules}"))
                .map_err(|e| format!("pg_hba.conf: {e}"))?;
        }
        let mut options = format!("-k {} -c listen_addresses=''", text(&cluster.dir)?);
        for setting in settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        let log = cluster.dir.join("server.log");
        cluster
            .run(
                "pg_ctl",
                &[
                    "-D",
                    text(&data)?,
                    "-o",
                    &options,
                    "-l",
                    text(&log)?,
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
        Ok(cluster)
    }

    /// The connection string without a database: `host=<socket dir> port=5432 user=postgres`;
    /// append ` dbname=…`.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Runs `sql` in database `dbname` with `psql` (for setup that needs no client library).
    ///
    /// # Errors
    /// `psql`'s output when it fails.
    pub fn psql(&self, dbname: &str, sql: &str) -> Result<(), String> {
        let target = format!("{} dbname={dbname}", self.base);
        self.run("psql", &[&target, "-v", "ON_ERROR_STOP=1", "-c", sql])
    }

    /// Runs a server binary, as `postgres` when we are root.
    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(program);
        let mut command = if self.root {
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
                "{} {args:?} failed: {}{}",
                program.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// A detached watcher: once this process has exited, stop the server and remove its
    /// directory (a static cluster is never dropped; a killed process runs no destructor).
    fn watch(&self) -> Result<(), String> {
        let as_postgres = if self.root {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; \
             {as_postgres}{pg_ctl} -D {data} stop -m immediate >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            pg_ctl = text(&self.bin.join("pg_ctl"))?,
            data = text(&self.dir.join("data"))?,
            dir = text(&self.dir)?,
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
}

impl Drop for PostgresCluster {
    fn drop(&mut self) {
        if let Ok(data) = text(&self.dir.join("data")) {
            let _ = self.run("pg_ctl", &["-D", data, "stop", "-m", "fast"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Clusters started by this process, for unique directory names.
static CLUSTERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn text(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("not a UTF-8 path: {}", path.display()))
}

/// The newest `/usr/lib/postgresql/*/bin`, or a `PATH` entry, holding `initdb` and `pg_ctl`.
fn server_binaries() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .collect();
    candidates.sort();
    candidates.reverse();
    if let Some(paths) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&paths));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .ok_or_else(|| {
            "a PostgreSQL server is needed: `initdb` and `pg_ctl` were not found in \
             /usr/lib/postgresql/*/bin or on PATH. Install them (`apt-get install postgresql`) \
             or set DATABASE_URL to a server that may be used."
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
            "running as root, PostgreSQL is started as the `postgres` user, which does not exist \
             here (installing the `postgresql` package creates it)"
                .to_owned()
        })
    };
    Ok((id("-u")?, id("-g")?))
}
