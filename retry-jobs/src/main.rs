//! `retry-jobs`: see and steer durable work. This build has the `serve` command (the dashboard).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use retry_jobs::web::{self, Config};

#[derive(Parser)]
#[command(name = "retry-jobs", version, about = "See and steer durable work")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serves the dashboard: the work in a browser, with re-drive, purge and cancel.
    Serve(Serve),
}

#[derive(Args)]
struct Serve {
    /// A SQLite file, or a PostgreSQL URL (`postgres://…` or `host=… dbname=…`).
    #[arg(env = "DATABASE_URL")]
    target: String,
    /// Whose work to show (the owner given to `JobsBuilder::owner`).
    #[arg(long, default_value = "default")]
    owner: String,
    /// Where to listen. Anything but loopback exposes the pages to the network.
    #[arg(long, default_value_t = SocketAddr::from(([127, 0, 0, 1], web::DEFAULT_PORT)))]
    bind: SocketAddr,
    /// The action token (at least 16 bytes), read from the environment so that it does not
    /// show in the process list. Without it and without --read-only, one is made and printed.
    #[arg(long, env = "RETRY_JOBS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// No actions: pages only (a token given is ignored).
    #[arg(long)]
    read_only: bool,
}

fn is_postgres(target: &str) -> bool {
    target.starts_with("postgres://")
        || target.starts_with("postgresql://")
        || target.contains("host=")
        || target.contains("dbname=")
}

async fn serve(args: Serve) -> Result<(), Box<dyn std::error::Error>> {
    let config = if args.read_only {
        Config::read_only()
    } else {
        let token = match args.token {
            Some(token) => token,
            None => {
                let token = new_token();
                eprintln!("action token (give it to the login page): {token}");
                token
            }
        };
        Config::with_token(token)?
    };
    let config = config.owner(args.owner)?.bind(args.bind);
    let listener = tokio::net::TcpListener::bind(config.bind_addr()).await?;
    eprintln!("dashboard on http://{}/", listener.local_addr()?);
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if is_postgres(&args.target) {
        let store = retry_durable::PostgresStore::connect(&args.target).await?;
        tokio::select! {
            served = web::serve(listener, store, config) => served?,
            () = stop => {}
        }
    } else {
        let store = retry_durable::SqliteStore::open(&args.target)?;
        tokio::select! {
            served = web::serve(listener, store, config) => served?,
            () = stop => {}
        }
    }
    Ok(())
}

/// A fresh random token: 24 bytes as hex.
fn new_token() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("retry-jobs: {e}");
            ExitCode::FAILURE
        }
    }
}
