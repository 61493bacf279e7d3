//! The command line: arguments (parsed with clap), and running one command to the text it
//! prints or the failure it exits with.

use std::fmt;
use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};
use retry_durable::{StoreError, WorkFilter, WorkId, WorkState};
use retry_toolkit::store::Timestamp;
use serde::Serialize;

use crate::action::{self, ActionError};
use crate::render;
use crate::target::{Opened, Target, TargetError};
use crate::time;
use crate::view::{self, ListQuery};
use crate::web;

/// Exit code: the store failed, could not be opened or reached.
pub const EXIT_STORE: u8 = 1;
/// Exit code: the command line is wrong (clap's own code for usage errors).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: no item or dead letter has that id.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: the item or dead letter is there, but its state does not allow the change.
pub const EXIT_REFUSED: u8 = 4;

const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the store failed, or could not be opened or reached
  2  usage error (unknown command or option, a bad value, no store given)
  3  not found: no item or dead letter has that id
  4  refused: the state does not allow it (already re-driven, already finished or cancelled)";

/// See and steer durable retry-durable work: status, listings, in-flight leases, dead
/// letters, re-drive, purge, cancel. Reads and writes the store only; it never runs work.
#[derive(Debug, Parser)]
#[command(name = "retry-jobs", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// The store: a SQLite file (which must exist) or a postgres:// URL.
    #[arg(
        long,
        short = 'd',
        env = "DATABASE_URL",
        hide_env_values = true,
        global = true,
        value_name = "FILE|URL"
    )]
    pub database: Option<String>,

    /// The owner whose work to show (the name given to `Jobs::builder(..).owner(..)`).
    #[arg(long, default_value = "default", global = true)]
    pub owner: String,

    /// Print JSON for scripts instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// For tests: the time to count relative times from and to write as "now" (RFC 3339).
    #[arg(long, env = "RETRY_JOBS_NOW", hide = true, global = true, value_parser = time::parse)]
    pub now: Option<Timestamp>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per handler: counts by state, the oldest waiting item's age, the next due time, dead
    /// letters; and the owner's quarantined rows.
    Status,
    /// Work, in id order, filtered and paged.
    List(ListArgs),
    /// One item: every stored value, its options, attempts so far and last error.
    Show {
        /// The item's id.
        id: i64,
    },
    /// Work claimed by a worker: its attempt and when its lease ends.
    InFlight,
    /// Dead letters: list, show, re-drive, purge.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Cancels waiting or running work: it is kept as cancelled and never claimed again.
    Cancel {
        /// The item's id.
        id: i64,
    },
    /// Serves the dashboard: the same views in a browser, with re-drive, purge and cancel.
    /// Runs until Ctrl-C.
    Serve(ServeArgs),
}

/// `serve`'s address and who may act.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen. Anything but loopback shows the pages to the network.
    #[arg(long, default_value_t = SocketAddr::from(([127, 0, 0, 1], web::DEFAULT_PORT)))]
    pub bind: SocketAddr,
    /// The action token (at least 16 bytes), best given in the environment so that it does not
    /// show in the process list. Without it and without --read-only, one is made and printed.
    #[arg(long, env = "RETRY_JOBS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Pages only: no forms, and every action refused (a token given is ignored).
    #[arg(long)]
    pub read_only: bool,
}

/// `list`'s filters and paging.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only work in this state: waiting, running, cancelled, succeeded, dead_lettered.
    #[arg(long, value_parser = parse_state)]
    pub state: Option<WorkState>,
    /// Only work of this handler.
    #[arg(long)]
    pub handler: Option<String>,
    /// Only work of this kind.
    #[arg(long, value_parser = ["once", "queue", "cron", "every"])]
    pub kind: Option<String>,
    /// Only work due before this time (RFC 3339 or a date).
    #[arg(long, value_parser = time::parse, value_name = "TIME")]
    pub due_before: Option<Timestamp>,
    /// Only work due at or after this time (RFC 3339 or a date).
    #[arg(long, value_parser = time::parse, value_name = "TIME")]
    pub due_after: Option<Timestamp>,
    /// Where the page starts and how long it is.
    #[command(flatten)]
    pub page: PageArgs,
}

/// Where a page starts and how long it is.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// At most this many rows.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
    /// Start after this id (the previous page's last).
    #[arg(long, value_name = "ID")]
    pub after: Option<i64>,
}

/// `dead`'s commands.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// Dead letters, in id order.
    List(PageArgs),
    /// One dead letter: its payload, options, attempts and last error.
    Show {
        /// The dead letter's id.
        id: i64,
    },
    /// Runs a dead letter again: new work due now, with fresh attempts (run by the owner's
    /// workers).
    Redrive {
        /// The dead letter's id.
        id: i64,
    },
    /// Deletes a dead letter for good.
    Purge {
        /// The dead letter's id.
        id: i64,
    },
}

fn parse_state(text: &str) -> Result<WorkState, String> {
    text.replace('-', "_").parse().map_err(|_| {
        format!(
            "unknown state `{text}`: expected one of {}",
            view::STATES.map(WorkState::name).join(", ")
        )
    })
}

/// Why a command failed: the message for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code (see the `EXIT_*` constants).
    pub code: u8,
    /// One line saying what went wrong.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure {
            code: EXIT_STORE,
            message: format!("the store failed: {e}"),
        }
    }
}

impl From<TargetError> for Failure {
    fn from(e: TargetError) -> Self {
        let code = match e {
            TargetError::Missing => EXIT_USAGE,
            _ => EXIT_STORE,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

impl From<ActionError> for Failure {
    fn from(e: ActionError) -> Self {
        let code = match e {
            ActionError::NotFound(_) => EXIT_NOT_FOUND,
            ActionError::Refused(_) => EXIT_REFUSED,
            ActionError::Store(_) => EXIT_STORE,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

fn not_found(what: String) -> Failure {
    Failure {
        code: EXIT_NOT_FOUND,
        message: what,
    }
}

/// Runs `cli`: the text to print on success.
///
/// # Errors
/// A [`Failure`] with its exit code.
pub async fn run(cli: Cli) -> Result<String, Failure> {
    let target = Target::parse(cli.database.as_deref().unwrap_or_default())?;
    let store = target.open().await?;
    if let Command::Serve(args) = &cli.command {
        return serve(store, &cli.owner, args).await;
    }
    let now = cli.now.unwrap_or_else(Timestamp::system_now);
    execute(&store, &cli, now).await
}

/// Serves the dashboard until Ctrl-C; what it prints goes to stderr as it happens.
async fn serve(store: Opened, owner: &str, args: &ServeArgs) -> Result<String, Failure> {
    let usage = |message: String| Failure {
        code: EXIT_USAGE,
        message,
    };
    let config = if args.read_only {
        web::Config::read_only()
    } else {
        let token = match &args.token {
            Some(token) => token.clone(),
            None => {
                let token = web::new_token();
                eprintln!("action token (give it to the login page): {token}");
                token
            }
        };
        web::Config::with_token(token).map_err(|e| usage(e.to_string()))?
    };
    let config = config
        .owner(owner)
        .map_err(|e| usage(e.to_string()))?
        .bind(args.bind);
    let listener = tokio::net::TcpListener::bind(config.bind_addr())
        .await
        .map_err(|e| Failure {
            code: EXIT_STORE,
            message: format!("cannot listen on {}: {e}", config.bind_addr()),
        })?;
    match listener.local_addr() {
        Ok(addr) => eprintln!("dashboard on http://{addr}/"),
        Err(_) => eprintln!("dashboard on http://{}/", config.bind_addr()),
    }
    tokio::select! {
        served = web::serve(listener, store, config) => served.map_err(|e| Failure {
            code: EXIT_STORE,
            message: format!("the dashboard stopped: {e}"),
        })?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(String::new())
}

fn out<T: Serialize>(json: bool, value: &T, text: impl FnOnce(&T) -> String) -> String {
    if json {
        match serde_json::to_string_pretty(value) {
            Ok(mut s) => {
                s.push('\n');
                s
            }
            // The views hold strings, numbers and JSON values only: nothing fails to write.
            Err(e) => format!("{{\"error\": \"{e}\"}}\n"),
        }
    } else {
        text(value)
    }
}

async fn execute(store: &Opened, cli: &Cli, now: Timestamp) -> Result<String, Failure> {
    let owner = cli.owner.as_str();
    let json = cli.json;
    Ok(match &cli.command {
        Command::Status => {
            let status = view::status(store, owner, now).await?;
            out(json, &status, render::status)
        }
        Command::List(args) => {
            let mut filter = WorkFilter::new();
            filter.state = args.state;
            filter.handler = args.handler.clone();
            filter.kind = args.kind.clone();
            let query = ListQuery {
                filter,
                due_before: args.due_before,
                due_after: args.due_after,
                after: args.page.after.map(WorkId),
                limit: args.page.limit,
            };
            let page = view::list(store, owner, &query).await?;
            out(json, &page, |p| render::list(p, now))
        }
        Command::Show { id } => {
            let item = view::item(store, None, *id)
                .await?
                .ok_or_else(|| not_found(format!("no work #{id}")))?;
            out(json, &item, |i| render::item(i, now))
        }
        Command::InFlight => {
            let page = view::in_flight(store, owner).await?;
            out(json, &page, |p| render::in_flight(p, now))
        }
        Command::Dead(DeadCommand::List(page)) => {
            let page = view::dead_letters(store, owner, page.after, page.limit).await?;
            out(json, &page, |p| render::dead_letters(p, now))
        }
        Command::Dead(DeadCommand::Show { id }) => {
            let dead = view::dead_letter(store, None, *id)
                .await?
                .ok_or_else(|| not_found(format!("no dead letter #{id}")))?;
            out(json, &dead, |d| render::dead_letter(d, now))
        }
        Command::Dead(DeadCommand::Redrive { id }) => {
            let done = action::redrive(store, None, *id, now).await?;
            out(json, &done, |d| {
                format!(
                    "re-drove dead letter #{} as work #{} ({}, due {})\n",
                    d.dead_letter,
                    d.work.id,
                    d.work.handler,
                    time::human(d.work.due_at, now)
                )
            })
        }
        Command::Dead(DeadCommand::Purge { id }) => {
            let done = action::purge(store, None, *id).await?;
            out(json, &done, |d| {
                format!("purged dead letter #{}\n", d.dead_letter)
            })
        }
        Command::Serve(_) => String::new(),
        Command::Cancel { id } => {
            let done = action::cancel(store, None, *id, now).await?;
            out(json, &done, |d| {
                format!("cancelled work #{} (it was {})\n", d.work, d.was)
            })
        }
    })
}
