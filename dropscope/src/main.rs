//! The dropscope binary: parses the command line and runs it, reporting errors plainly.
#![deny(clippy::unwrap_used)]

use std::process::ExitCode;

use clap::Parser;
use dropscope::{
    cli::{Cli, Command},
    cmd::Outcome,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let tui = matches!(cli.command, None | Some(Command::Replay { .. }));
    let filter =
        || tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    if tui {
        // The TUI owns the screen: warnings are kept for its footer and `?` instead.
        use tracing_subscriber::layer::SubscriberExt as _;
        let subscriber = tracing_subscriber::registry()
            .with(filter())
            .with(dropscope::tui::warnings::Keep);
        let _ = tracing::subscriber::set_global_default(subscriber);
    } else {
        // Elsewhere, diagnostics go to stderr (RUST_LOG to tune).
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(filter())
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
    // The command runs as a task, not as block_on's own future: a task woken by another task
    // of this thread is queued without a system call, whereas waking block_on's future writes
    // to the runtime's eventfd (a write and an extra epoll_wait per wake-up).
    // A panic in it has unwound the task (restoring the terminal, detaching the probe) and is
    // raised again here, so the process ends as a panic does.
    let res = rt.block_on(async {
        match tokio::spawn(dropscope::cmd::dispatch::run(cli)).await {
            Ok(res) => res,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(anyhow::anyhow!("the command's task ended: {e}")),
        }
    });
    match res {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped reading (`| head`) ends the command quietly, as coreutils do.
        Err(e) if stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => match Outcome::of(&e) {
            // A broken budget is a finding, one line per clause: exit status 1.
            Some(Outcome::Broken(lines)) => {
                for line in lines {
                    eprintln!("dropscope: {}", dropscope::sanitize::terminal(line));
                }
                ExitCode::from(1)
            }
            outcome => {
                // An error can quote a path or a name from a recording: shown escaped.
                let msg = format!("{e:#}");
                eprintln!("dropscope: error: {}", dropscope::sanitize::terminal(&msg));
                // A usage error exits with 2, as clap's own.
                ExitCode::from(outcome.map_or(1, Outcome::status))
            }
        },
    }
}

/// Whether `e` comes from writing to a standard output whose reader has gone (a broken pipe
/// there, not on some other file or socket).
fn stdout_closed(e: &anyhow::Error) -> bool {
    let broken_pipe = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if !broken_pipe {
        return false;
    }
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: poll(2) on one valid pollfd that lives across the call; a zero timeout.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    // A pipe or socket whose reading end is closed polls as an error (or hang-up) for its writer.
    ready == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}
