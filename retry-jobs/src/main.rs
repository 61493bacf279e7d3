//! `retry-jobs`: see and steer durable work from a terminal. The work is in the library
//! (`retry_jobs`); this parses the arguments, runs one command and exits with its code.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use retry_jobs::cli::{self, Cli, EXIT_STORE};

fn main() -> ExitCode {
    let args = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("retry-jobs: cannot start: {e}");
            return ExitCode::from(EXIT_STORE);
        }
    };
    match runtime.block_on(cli::run(args)) {
        Ok(text) => {
            // A closed pipe (`retry-jobs list | head`) is not a failure of the command.
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("retry-jobs: {failure}");
            ExitCode::from(failure.code)
        }
    }
}
