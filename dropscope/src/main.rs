//! The dropscope binary: parses the command line and runs it, reporting errors plainly.
#![deny(clippy::unwrap_used)]

use std::process::ExitCode;

use clap::Parser;
use dropscope::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tui = matches!(cli.command, None | Some(Command::Replay { .. }));
    if !tui {
        // The TUI owns the screen; elsewhere, diagnostics go to stderr (RUST_LOG to tune).
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .init();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dropscope: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dropscope::cmd::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An error can quote a path or a name from a recording: shown escaped.
            let msg = format!("{e:#}");
            eprintln!("dropscope: error: {}", dropscope::sanitize::terminal(&msg));
            ExitCode::FAILURE
        }
    }
}
