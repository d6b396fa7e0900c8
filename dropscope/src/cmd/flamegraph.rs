//! `dropscope flamegraph`: an SVG or folded stacks of the sampled drop stacks.
use std::{
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, bail};

use super::{recorded_window, shown};
use crate::{
    cli::{FlamegraphArgs, GraphFormat},
    flamegraph::{self, GraphMeta},
    model::{SessionInfo, Snapshot},
    outfile,
};

/// Where the graph goes.
#[derive(Debug, PartialEq, Eq)]
enum Sink {
    /// Standard output (`-o -`, or no `-o` where that is what a pipe wants).
    Stdout,
    /// A new file.
    File(PathBuf),
}

/// The sink of `-o` (`-` is stdout); without `-o`, folded text goes to stdout, and an SVG too
/// unless stdout is a terminal.
fn sink(output: Option<&Path>, format: GraphFormat, stdout_is_tty: bool) -> anyhow::Result<Sink> {
    Ok(match output {
        Some(p) if p == Path::new("-") => Sink::Stdout,
        Some(p) => Sink::File(p.to_path_buf()),
        None if format == GraphFormat::Folded || !stdout_is_tty => Sink::Stdout,
        None => bail!(
            "an SVG is not for a terminal: name a file with `-o FILE` (e.g. `-o drops.svg`), \
             or pipe the output (`-o -` writes to stdout anyway)"
        ),
    })
}

/// Runs `flamegraph`.
pub async fn flamegraph_cmd(args: FlamegraphArgs) -> anyhow::Result<()> {
    // Everything that can fail without counting is checked before counting.
    let sink = sink(
        args.output.as_deref(),
        args.format,
        std::io::stdout().is_terminal(),
    )?;
    if let Sink::File(path) = &sink {
        outfile::check_destination(path, args.force)?;
    }
    let baseline = match (&args.diff, args.format) {
        (Some(_), GraphFormat::Folded) => bail!("--diff writes an SVG; drop --format folded"),
        (Some(base), GraphFormat::Svg) => Some(
            flamegraph::read_folded(base)
                .with_context(|| format!("reading baseline {}", shown(base)))?,
        ),
        (None, _) => None,
    };
    if args.window.input.is_none() && args.live.no_stacks {
        bail!("--no-stacks leaves nothing to draw");
    }
    let (info, mut snap, window) = if args.window.input.is_some() {
        recorded_window(&args.window, &args.live.select)?
    } else {
        live_stacks(&args).await?
    };
    if !args.offsets {
        snap.stacks = flamegraph::without_offsets(&snap.stacks);
    }
    let meta = GraphMeta {
        info: &info,
        window,
        filter: None,
    };
    let mut out = Vec::new();
    match (args.format, baseline) {
        (GraphFormat::Folded, _) => {
            out.extend_from_slice(flamegraph::folded(&snap.stacks).as_bytes())
        }
        (GraphFormat::Svg, None) => flamegraph::write_svg(&snap.stacks, &meta, &mut out)?,
        (GraphFormat::Svg, Some(before)) => {
            let after = flamegraph::folded(&snap.stacks);
            flamegraph::write_diff_svg(&before, &after, &meta, &mut out)?;
        }
    }
    let written = match &sink {
        Sink::File(path) => {
            outfile::write_file(path, args.force, &out)?;
            shown(path)
        }
        Sink::Stdout => {
            // Written, not printed: a closed pipe ends the command with an error, not a panic.
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&out).context("writing to stdout")?;
            stdout.flush().context("writing to stdout")?;
            match args.format {
                GraphFormat::Svg => "the SVG to standard output".into(),
                GraphFormat::Folded => "the folded stacks to standard output".into(),
            }
        }
    };
    let est = snap
        .stacks
        .iter()
        .fold(0u64, |a, s| a.saturating_add(s.weight));
    eprintln!(
        "dropscope: wrote {written} ({} stacks, ~{est} drops estimated from samples; {} drops counted exactly)",
        snap.stacks.len(),
        snap.total
    );
    Ok(())
}

/// Samples stacks live until `--duration` or a signal.
#[cfg(feature = "live")]
async fn live_stacks(
    args: &FlamegraphArgs,
) -> anyhow::Result<(SessionInfo, Snapshot, (Duration, Duration))> {
    let (info, snap) = super::live::count_live(
        &args.live,
        args.duration,
        " and sampling stacks",
        None,
        |_| Ok(()),
    )
    .await?;
    let window = (Duration::ZERO, snap.elapsed);
    Ok((info, snap, window))
}

#[cfg(not(feature = "live"))]
async fn live_stacks(
    _: &FlamegraphArgs,
) -> anyhow::Result<(SessionInfo, Snapshot, (Duration, Duration))> {
    Err(super::no_live("`flamegraph` without `--input`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dash_and_pipes_are_stdout_a_terminal_is_not_for_svg() {
        let file = Some(Path::new("g.svg"));
        let dash = Some(Path::new("-"));
        let svg = GraphFormat::Svg;
        let folded = GraphFormat::Folded;
        assert_eq!(sink(dash, svg, true).ok(), Some(Sink::Stdout));
        assert_eq!(sink(None, folded, true).ok(), Some(Sink::Stdout));
        assert_eq!(sink(None, svg, false).ok(), Some(Sink::Stdout));
        assert!(sink(None, svg, true).is_err());
        assert_eq!(
            sink(file, folded, false).ok(),
            Some(Sink::File(PathBuf::from("g.svg")))
        );
    }
}
