//! Which command runs: the parsed command line dispatched to it, with what a build without
//! the `live` feature says instead of counting live.
use std::time::Duration;

#[cfg(not(feature = "live"))]
use super::no_live;
#[cfg(feature = "live")]
use super::{check, live};
use super::{diff, flamegraph, generate, history, reasons, replay, report};
use crate::cli::{Cli, Command, InputWindow};

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => live_view(cli).await,
        Some(Command::Report(args)) => report::report_cmd(args).await,
        Some(Command::Reasons { format, btf }) => reasons::reasons_cmd(format, btf.as_deref()),
        Some(Command::Explain { name }) => reasons::explain_cmd(&name),
        Some(Command::Record {
            output,
            duration,
            force,
            pcap,
            count_syscalls,
            mut live,
        }) => {
            live.count_syscalls = count_syscalls;
            record(live, output, duration, force, pcap).await
        }
        Some(Command::Replay {
            file,
            from,
            to,
            since,
            output_dir,
            budget,
            select,
        }) => {
            let window = InputWindow {
                input: Some(file),
                from,
                to,
                since,
            };
            replay::replay_cmd(&window, &output_dir, &select, budget).await
        }
        Some(Command::Flamegraph(args)) => flamegraph::flamegraph_cmd(args).await,
        Some(Command::Diff(args)) => diff::diff_cmd(args),
        Some(Command::Check(args)) => check(args).await,
        Some(Command::Serve(args)) => serve(args).await,
        Some(Command::History { dir }) => history::history_cmd(&dir),
        Some(Command::Generate { what }) => generate::generate(what),
    }
}

#[cfg(feature = "live")]
async fn live_view(cli: Cli) -> anyhow::Result<()> {
    let live = crate::cli::LiveArgs {
        count_syscalls: cli.count_syscalls,
        ..cli.live
    };
    live::live_tui(&live, &cli.output_dir).await
}

#[cfg(not(feature = "live"))]
async fn live_view(_: Cli) -> anyhow::Result<()> {
    Err(no_live("the live view"))
}

#[cfg(feature = "live")]
async fn record(
    live: crate::cli::LiveArgs,
    output: std::path::PathBuf,
    duration: Option<Duration>,
    force: bool,
    pcap: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    live::record_cmd(&live, &output, duration, force, pcap.as_deref()).await
}

#[cfg(not(feature = "live"))]
async fn record(
    _: crate::cli::LiveArgs,
    _: std::path::PathBuf,
    _: Option<Duration>,
    _: bool,
    _: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    Err(no_live("`record`"))
}

#[cfg(feature = "live")]
async fn check(args: crate::cli::CheckArgs) -> anyhow::Result<()> {
    check::check_cmd(args).await
}

#[cfg(not(feature = "live"))]
async fn check(_: crate::cli::CheckArgs) -> anyhow::Result<()> {
    Err(no_live("`check`"))
}

#[cfg(feature = "live")]
async fn serve(args: crate::cli::ServeArgs) -> anyhow::Result<()> {
    let opts = crate::serve::ServeOptions {
        listen: args.listen,
        max_series: usize::try_from(args.max_series).unwrap_or(usize::MAX),
        web_config: args.web_config,
        limits: crate::serve::connections::Limits::default(),
        counts_all: args.live.select.describe().is_none(),
        history: args.history.map(|dir| crate::history::HistoryOptions {
            dir,
            retention: crate::history::Retention {
                age: args.retain,
                bytes: args.retain_size,
            },
            segment: args.segment_length,
            full_resolution: args.full_resolution,
        }),
    };
    crate::serve::run(opts, || {
        live::start_live(&args.live, Some(crate::serve::KERNEL_READ))
    })
    .await
}

#[cfg(not(feature = "live"))]
async fn serve(_: crate::cli::ServeArgs) -> anyhow::Result<()> {
    Err(no_live("`serve`"))
}
