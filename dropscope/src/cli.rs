//! The command line, parsed in one place; doc comments are the help text.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::format::parse_duration;
use crate::{probe::ProbeChoice, vocab::budget};

mod selection;
pub use selection::{DEFAULT_BY, Selection, check_reason};

/// Interactive terminal profiler for Linux kernel packet drops: which packets the kernel drops,
/// why, where, from which stack, and since when. Counts in the kernel, never per event.
///
/// With no command, starts the live view (needs root and a terminal).
#[derive(Debug, Parser)]
#[command(
    name = "dropscope",
    version,
    about,
    long_about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do (default: the live view).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Probe and polling options of the live view.
    #[command(flatten)]
    pub live: LiveArgs,
    /// Directory where `f` writes flamegraph SVGs and `r` writes recordings.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub output_dir: PathBuf,
    /// Count dropscope's own syscalls for the header (syscalls/s), with a `sys_enter` program.
    /// Off by default: it runs on every syscall of every process on the machine.
    #[arg(long)]
    pub count_syscalls: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Count drops (live, or from a recording) and print the result.
    Report(ReportArgs),
    /// List the running kernel's drop reasons with a one-line summary each (read from BTF; no
    /// root needed).
    Reasons {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Read another kernel's reasons from its BTF file (e.g. extracted from its vmlinux).
        #[arg(long, value_name = "FILE")]
        btf: Option<PathBuf>,
    },
    /// Explain a drop reason or a counter of the drop ledger: what it means, its usual
    /// causes, what to check, and the kernel counters that count it (no root needed).
    Explain {
        /// The reason, e.g. SOCKET_RCVBUFF (the SKB_DROP_REASON_ prefix and case do not
        /// matter), a layer counter, e.g. Link:eth0:rx_missed_errors or Qdisc:*:drops, or a
        /// kernel counter as the `c` panel prints it, e.g. TcpExt:ListenDrops or Udp:NoPorts.
        name: String,
    },
    /// Record the live snapshot stream to a file, headless, until Ctrl-C or --duration.
    Record {
        /// The recording to write (created with owner-only permissions); `-` writes it to
        /// standard output as it goes, for a pipe (e.g. into `dropscope replay -`).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Stop after this long (e.g. 30s, 10m, 2h).
        #[arg(long, value_parser = parse_duration, value_name = "D")]
        duration: Option<Duration>,
        /// Replace FILE (and the --pcap file) if something already has its name (never
        /// written through).
        #[arg(long)]
        force: bool,
        /// Also write the sampled packets of the last snapshot (up to 8 per key) to this
        /// pcapng file when recording ends (created with owner-only permissions).
        #[arg(long, value_name = "FILE")]
        pcap: Option<PathBuf>,
        /// Count dropscope's own syscalls, for the replay's header (syscalls/s), with a
        /// `sys_enter` program. Off by default: it runs on every syscall of every process on
        /// the machine.
        #[arg(long)]
        count_syscalls: bool,
        /// Probe and polling options.
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Replay a recording, or a window of a history directory, in the live view's TUI (no root
    /// needed).
    Replay {
        /// The recording; `-` reads one from standard input and follows it as it grows; a
        /// history directory (`serve --history DIR`) replays its last hour, or the window of
        /// --since/--from/--to (across its sessions and gaps).
        #[arg(value_name = "FILE|DIR")]
        file: PathBuf,
        /// Of a history: the window's start, a wall-clock time (03:10, 2026-11-27 03:10,
        /// 2026-11-27T03:10:00Z).
        #[arg(long, value_parser = crate::history::when::parse_time, value_name = "T")]
        from: Option<crate::history::when::TimeArg>,
        /// Of a history: the window's end (default: the history's end).
        #[arg(long, value_parser = crate::history::when::parse_time, value_name = "T")]
        to: Option<crate::history::when::TimeArg>,
        /// Of a history: the last D before now (e.g. 30m).
        #[arg(long, value_parser = parse_duration, value_name = "D", conflicts_with = "from")]
        since: Option<Duration>,
        /// Directory where `f` writes flamegraph SVGs.
        #[arg(long, default_value = ".", value_name = "DIR")]
        output_dir: PathBuf,
        /// Of a history: budget clauses `v` judges the window shown against, as `diff
        /// --history --budget` judges NEW (repeatable, or a comma list): `total<5/s`, a
        /// reason's rate (`NO_SOCKET<1/s`), `ratio<0.1%`, `new-reasons=0`; rows over budget
        /// are marked.
        #[arg(long, value_delimiter = ',', value_parser = parse_clause, value_name = "SPEC")]
        budget: Vec<budget::Clause>,
        /// Grouping and filters, applied to the recording's counts as live.
        #[command(flatten)]
        select: Selection,
    },
    /// Write a flamegraph SVG (or folded stacks) of the sampled drop stacks.
    Flamegraph(FlamegraphArgs),
    /// Compare two runs' drops key by key: each key's rate in BASE and NEW, their ratio, and
    /// whether the change is more than chance; judge NEW against drop budgets (no root needed).
    ///
    /// BASE and NEW are recordings or `report --format json` output (told apart by content).
    /// A change is significant when a Poisson rate test (the conditional binomial test of the
    /// two counts given their windows' lengths) gives a p-value below --alpha. Exit status: 1
    /// when a --budget clause is broken (or, with --fail-on-regression, a key's rate went up
    /// significantly), 2 on a usage error, including a clause the inputs cannot answer.
    ///
    /// With --by ...,culprit, each run's culprits are derived from its own recording (as
    /// `report --input` derives them), and rows are matched across the runs by their culprit's
    /// stable label: its certainty and who it names (a rule by family, table, chain and handle,
    /// a chain's policy by its chain, a program by its name and attach point without its id,
    /// a socket by its holders' names without process ids, its protocol and local address). A
    /// row whose culprit differs between the runs (another rule, or exact in one run and a
    /// candidate in the other) is two rows, one only in BASE and one only in NEW, never one.
    /// A JSON report carries no kernel view: it is refused as an input with --by culprit or
    /// --culprit.
    Diff(DiffArgs),
    /// Count live for --duration, then judge the drops against budgets: exit status 1 when a
    /// clause is broken, naming it and what broke it; 0 when every clause holds.
    Check(CheckArgs),
    /// Serve Prometheus metrics over HTTP (/metrics), counting live until Ctrl-C or SIGTERM.
    ///
    /// Loopback only by default. Listening beyond loopback without --web-config shows the drop
    /// metrics (with namespace and container names) to anyone on the network; --web-config
    /// adds TLS and basic auth.
    ///
    /// Limits: 64 open connections in all and 16 per peer (an IPv4 address or an IPv6 /64); at
    /// either cap a new connection takes the place of the least recently active one, so a
    /// client that holds connections idle cannot lock a scraper out (while all of a peer's
    /// connections wait on the server, its request unread or its password being verified, the
    /// peer's new one is refused instead). A connection must send a
    /// request head within 5 s of opening or of its previous answer (the idle timeout, which
    /// also bounds the TLS handshake); a write that makes no progress for 5 s (a client not
    /// reading) closes it; it is closed after 100 requests; a response must be ready within
    /// 10 s; request bodies are limited to 1 KiB.
    ///
    /// With basic auth, a peer may fail 10 logins at once, then one every 6 s; past that its
    /// failures are answered 429 with Retry-After. A wrong password sent again is refused
    /// without bcrypt, and at a cap a connection whose last request failed auth is shed first.
    Serve(ServeArgs),
    /// List what a history directory (`serve --history DIR`) covers: each segment's time range,
    /// size, snapshots, machine and kernel, the gaps between (dropscope not running, or history
    /// paused), and segments refused as damaged (no root needed).
    History {
        /// The history directory.
        dir: PathBuf,
    },
    /// Write the man pages or a shell completion script, for packagers (`cargo xtask dist`
    /// installs them with the `.deb`).
    #[command(hide = true)]
    Generate {
        /// What to write.
        #[command(subcommand)]
        what: Generated,
    },
}

/// What `dropscope generate` writes.
#[derive(Debug, Subcommand)]
pub enum Generated {
    /// The man pages, into DIR: dropscope.1 and one per command (dropscope-report.1, ...).
    Man {
        /// The directory to write them into (created if missing).
        dir: PathBuf,
    },
    /// A completion script for SHELL, on standard output.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Options of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on (loopback by default; e.g. 0.0.0.0:9818 or [::]:9818 for
    /// every interface).
    #[arg(long, default_value = "127.0.0.1:9818", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Export at most N series per metric family (drop keys, devices, namespaces, layer
    /// counters), kept once given, the host's first, then those of namespaces root named, each
    /// namespace within a share of N; the rest are summed into one series per family
    /// (reason="other" in dropscope_drops_total).
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000), value_name = "N")]
    pub max_series: u64,
    /// TLS and basic auth, in the web-config format of Prometheus exporters (YAML:
    /// tls_server_config with cert_file and key_file, basic_auth_users with bcrypt hashes).
    /// It is not followed if a symbolic link; it, the files it names and every directory above
    /// them must be owned by root or the user dropscope runs as and writable by no one else,
    /// and the key file not readable by others (its group may read it).
    #[arg(long, value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Keep the snapshot stream (counts, names, stacks, samples, kernel counters) in this
    /// directory, one segment (a recording) per --segment-length, for `dropscope history`,
    /// `report --input DIR` and `replay DIR` (created 0700 if missing; never a symbolic link;
    /// one writer at a time). A full or failing disk pauses the history, never the counting
    /// or /metrics; it resumes by itself.
    #[arg(long, value_name = "DIR")]
    pub history: Option<PathBuf>,
    /// Remove history segments older than this (e.g. 7d, 12h).
    #[arg(long, value_parser = parse_duration, default_value = "7d", value_name = "D",
          requires = "history")]
    pub retain: Duration,
    /// Remove the oldest history segments while the history takes more than this (e.g. 1GiB,
    /// 500MiB, 2G).
    #[arg(long, value_parser = parse_size, default_value = "1GiB", value_name = "SIZE",
          requires = "history")]
    pub retain_size: u64,
    /// Keep every snapshot of the last D in the history; older segments keep one snapshot a
    /// minute (totals stay exact; a window's ends fall on the minute).
    #[arg(long, value_parser = parse_duration, default_value = "1d", value_name = "D",
          requires = "history")]
    pub full_resolution: Duration,
    /// How long one history segment covers before the next is started.
    #[arg(long, value_parser = parse_duration, default_value = "1h", value_name = "D",
          requires = "history")]
    pub segment_length: Duration,
    /// Probe and polling options.
    #[command(flatten)]
    pub live: LiveArgs,
}

/// Options of `diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline: a recording, or the output of `report --format json` (its last object
    /// for JSON Lines); `-` reads it from standard input.
    #[arg(value_name = "BASE", required_unless_present = "history")]
    pub base: Option<PathBuf>,
    /// The run to judge, of either kind; `-` reads it from standard input (one side only).
    #[arg(value_name = "NEW", required_unless_present = "history")]
    pub new: Option<PathBuf>,
    /// Compare two windows of this history directory (`serve --history DIR`) instead: NEW is
    /// the --last D before the history's end (or --at), BASE the same window --vs earlier.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["base", "new"],
          requires_all = ["last", "vs"])]
    pub history: Option<PathBuf>,
    /// With --history: the length of both windows (e.g. 10m).
    #[arg(long, value_parser = parse_duration, value_name = "D", requires = "history")]
    pub last: Option<Duration>,
    /// With --history: how much earlier BASE is than NEW (e.g. 1h, 1d).
    #[arg(long, value_parser = parse_duration, value_name = "D", requires = "history")]
    pub vs: Option<Duration>,
    /// With --history: NEW ends here instead of at the history's end (a wall-clock time:
    /// 03:10, 2026-11-27 03:10, 2026-11-27T03:10:00Z).
    #[arg(long, value_parser = crate::history::when::parse_time, value_name = "T",
          requires = "history")]
    pub at: Option<crate::history::when::TimeArg>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = JudgeFormat::Table)]
    pub format: JudgeFormat,
    /// Significance level: a change is significant when its p-value is below P.
    #[arg(long, default_value_t = crate::vocab::DEFAULT_ALPHA, value_parser = parse_alpha, value_name = "P")]
    pub alpha: f64,
    /// Budget clauses NEW must keep (repeatable, or a comma list): `total<5/s`, a reason's
    /// rate (`NO_SOCKET<1/s`; /s, /m or /h), `ratio<0.1%` (drops per packet received, from
    /// the kernel's counters), `new-reasons=0` (no reason BASE does not have); `<=` too.
    #[arg(long, value_delimiter = ',', value_parser = parse_clause, value_name = "SPEC")]
    pub budget: Vec<budget::Clause>,
    /// Also exit with status 1 when a key's rate went up significantly (by default only a
    /// broken budget does).
    #[arg(long)]
    pub fail_on_regression: bool,
    /// Grouping and filters, applied to both inputs (an unchanged --by groups them by the
    /// dimensions both have).
    #[command(flatten)]
    pub select: Selection,
}

/// Options of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Budget clauses the drops must keep (repeatable, or a comma list): `total<5/s`, a
    /// reason's rate (`NO_SOCKET<1/s`; /s, /m or /h), `ratio<0.1%` (drops per packet
    /// received, from the kernel's counters); `<=` too.
    #[arg(long, required = true, value_delimiter = ',', value_parser = parse_clause,
          value_name = "SPEC")]
    pub budget: Vec<budget::Clause>,
    /// Count for this long (e.g. 30s; a bare number is seconds); without it, until Ctrl-C or
    /// SIGTERM.
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub duration: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = JudgeFormat::Table)]
    pub format: JudgeFormat,
    /// Probe and polling options.
    #[command(flatten)]
    pub live: LiveArgs,
}

/// Options of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Count for this long (e.g. 10s); without it, count until Ctrl-C or SIGTERM.
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub duration: Option<Duration>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Live: also print the counts so far every D (e.g. 1s), before the final report; with
    /// `--format json` every report is one line (JSON Lines). The kernel's counters (ledger,
    /// unseen drops) are read once per report (every 10 s without this).
    #[arg(long, value_parser = parse_duration, value_name = "D", conflicts_with = "input")]
    pub every: Option<Duration>,
    /// Also write the sampled packets of the final counts (up to 8 per key) to this pcapng
    /// file, for Wireshark or tshark (created with owner-only permissions).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Replace the --pcap file if something already has its name (never written through).
    #[arg(long, requires = "pcap")]
    pub force: bool,
    /// Where the counts come from.
    #[command(flatten)]
    pub window: InputWindow,
    /// Probe and polling options (live only).
    #[command(flatten)]
    pub live: LiveArgs,
}

/// Options of `flamegraph`.
#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// Sample live stacks for this long (e.g. 10s); without it, until Ctrl-C or SIGTERM.
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub duration: Option<Duration>,
    /// The file to write; `-` is stdout. Without it, folded stacks go to stdout, and an SVG
    /// too when stdout is not a terminal.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = GraphFormat::Svg)]
    pub format: GraphFormat,
    /// Replace the output file if something already has its name (never written through).
    #[arg(long)]
    pub force: bool,
    /// Keep each frame's `+0xoffset` (one tower per call site); by default frames are function
    /// names, so one function is one tower.
    #[arg(long)]
    pub offsets: bool,
    /// Write a differential flamegraph against this baseline (folded stacks, e.g. from an
    /// earlier `--format folded`).
    #[arg(long, value_name = "BASELINE.folded")]
    pub diff: Option<PathBuf>,
    /// Where the stacks come from.
    #[command(flatten)]
    pub window: InputWindow,
    /// Probe and polling options (live only).
    #[command(flatten)]
    pub live: LiveArgs,
}

/// Read a recording instead of the live kernel, optionally one window of it.
#[derive(Debug, Args)]
pub struct InputWindow {
    /// Read this recording, or this history directory (`serve --history DIR`), instead of
    /// counting live (no root needed); `-` reads a recording from standard input until it ends.
    #[arg(long, value_name = "FILE|DIR")]
    pub input: Option<PathBuf>,
    /// Start of the window: session time as replay shows it (e.g. 30s), or a wall-clock time:
    /// local (03:10, the last one before now; 2026-11-27 03:10) or RFC 3339
    /// (2026-11-27T03:10:00Z). Without it, counts are cumulative from the session's start (a
    /// history: from its first snapshot).
    #[arg(long, value_parser = crate::history::when::parse_time, value_name = "T",
          requires = "input")]
    pub from: Option<crate::history::when::TimeArg>,
    /// End of the window, as --from (default: the recording's or history's end).
    #[arg(long, value_parser = crate::history::when::parse_time, value_name = "T",
          requires = "input")]
    pub to: Option<crate::history::when::TimeArg>,
    /// The window is the last D (e.g. 30m, 2h) before now (a history) or before the
    /// recording's end.
    #[arg(long, value_parser = parse_duration, value_name = "D", requires = "input",
          conflicts_with = "from")]
    pub since: Option<Duration>,
}

/// Probe and polling options.
#[derive(Debug, Args, Clone)]
pub struct LiveArgs {
    /// Grouping and filters.
    #[command(flatten)]
    pub select: Selection,
    /// Base poll interval: counts are read every half interval while drops arrive; while idle,
    /// only the mmap'd totals are checked (no syscall) and the view updates once per interval.
    #[arg(long, value_parser = parse_interval, default_value = "1s", value_name = "D")]
    pub interval: Duration,
    /// Capacity of the in-kernel map of drop keys (one per distinct combination of the --by
    /// dimensions: reason, location, namespace, ...); drops of further keys are counted as
    /// overflow.
    #[arg(long, default_value_t = dropscope_common::DEFAULT_MAX_KEYS,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000), value_name = "N")]
    pub max_keys: u32,
    /// Which kernel hook to use.
    #[arg(long, value_enum, default_value_t = ProbeChoice::Auto)]
    pub probe: ProbeChoice,
    /// Kernel BTF file (for tp_btf and drop-reason names).
    #[arg(long, default_value = "/sys/kernel/btf/vmlinux", value_name = "PATH")]
    pub btf: PathBuf,
    /// Do not capture kernel stacks.
    #[arg(long)]
    pub no_stacks: bool,
    /// Stack samples per second to aim for; the sampling period follows the drop rate.
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000), value_name = "N")]
    pub stack_budget: u64,
    /// Whether to count dropscope's own syscalls: set from `--count-syscalls`, which only the
    /// live view and `record` offer (only their headers show the count).
    #[arg(skip)]
    pub count_syscalls: bool,
    /// Benchmark only: start with N synthetic keys (one count on every CPU each), so the cost of
    /// reading many keys can be measured.
    #[cfg(feature = "bench")]
    #[arg(long, hide = true, default_value_t = 0, value_name = "N")]
    pub bench_keys: u32,
    /// Benchmark only: load the bench program with these steps of the per-drop path taken out
    /// (a comma list of `dropscope_common::skip` names; `none`: the bench program as it is;
    /// `all`: every step).
    #[cfg(feature = "bench")]
    #[arg(long, hide = true, value_parser = parse_skip, value_name = "STEPS")]
    pub bench_skip: Option<u32>,
    /// Enable kernel BPF run-time statistics while running, to show the probe's ns per drop
    /// (costs a little per drop; off again on exit).
    #[arg(long)]
    pub bpf_stats: bool,
}

/// Text or JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// One JSON object.
    Json,
}

/// Output of the commands that judge (`diff`, `check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JudgeFormat {
    /// Aligned columns, and one line per budget clause.
    Table,
    /// One JSON object.
    Json,
    /// JUnit XML, for CI: one test case per budget clause and per significant regression.
    Junit,
}

/// Flamegraph output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    /// An interactive SVG (inferno).
    Svg,
    /// Collapsed stacks, one `frame;frame;... weight` line each.
    Folded,
}

/// A size in bytes: `1GiB`, `500MiB`, `2G`, `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size::parse_size(s.trim()).map_err(|e| format!("{e} (examples: 1GiB, 500MiB, 2G)"))
}

/// One budget clause (see [`budget::parse`]).
fn parse_clause(s: &str) -> Result<budget::Clause, String> {
    budget::parse(s).map_err(|e| e.to_string())
}

/// A significance level: above 0, below 1.
fn parse_alpha(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(a) if a > 0.0 && a < 1.0 => Ok(a),
        _ => Err(format!("{s:?}: give a p-value between 0 and 1, e.g. 0.001")),
    }
}

/// `--bench-skip`: step names, comma-separated, as bits; `none` is no step, `all` every step.
#[cfg(feature = "bench")]
fn parse_skip(s: &str) -> Result<u32, String> {
    if s == "all" {
        return Ok(u32::MAX);
    }
    s.split(',')
        .filter(|n| !n.is_empty() && *n != "none")
        .try_fold(0, |bits, name| {
            dropscope_common::skip::NAMES
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, bit)| bits | bit)
                .ok_or_else(|| format!("no step {name:?} to take out"))
        })
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(50) || d > Duration::from_secs(60) {
        return Err("the interval must be between 50ms and 60s".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn a_bare_number_is_seconds() {
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn the_cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_report_flags() {
        let cli = Cli::try_parse_from([
            "dropscope",
            "report",
            "--duration",
            "2s",
            "--format",
            "json",
        ])
        .expect("parse");
        let Some(Command::Report(r)) = cli.command else {
            panic!("not a report")
        };
        assert_eq!(r.duration, Some(Duration::from_secs(2)));
        assert_eq!(r.format, Format::Json);
    }

    #[test]
    fn parses_serve_flags() {
        let cli = Cli::try_parse_from([
            "dropscope",
            "serve",
            "--listen",
            "[::1]:9000",
            "--max-series",
            "5",
            "--interval",
            "100ms",
            "--web-config",
            "/etc/dropscope/web.yml",
        ])
        .expect("parse");
        let Some(Command::Serve(s)) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(s.listen, "[::1]:9000".parse().expect("addr"));
        assert_eq!(s.max_series, 5);
        assert_eq!(
            s.web_config.as_deref(),
            Some(std::path::Path::new("/etc/dropscope/web.yml"))
        );
        assert_eq!(s.live.interval, Duration::from_millis(100));
        let default = Cli::try_parse_from(["dropscope", "serve"]).expect("parse");
        let Some(Command::Serve(d)) = default.command else {
            panic!("not serve")
        };
        assert!(d.listen.ip().is_loopback(), "{}", d.listen);
        assert!(d.web_config.is_none());
        assert!(Cli::try_parse_from(["dropscope", "serve", "--max-series", "0"]).is_err());
        assert!(Cli::try_parse_from(["dropscope", "serve", "--listen", "localhost"]).is_err());
    }

    #[test]
    fn parses_pcap_outputs() {
        let cli = Cli::try_parse_from(["dropscope", "report", "--pcap", "d.pcapng", "--force"])
            .expect("parse");
        let Some(Command::Report(r)) = cli.command else {
            panic!("not a report")
        };
        assert_eq!(r.pcap, Some(PathBuf::from("d.pcapng")));
        assert!(r.force);
        assert!(Cli::try_parse_from(["dropscope", "report", "--force"]).is_err());
        let cli = Cli::try_parse_from(["dropscope", "record", "-o", "r.ds", "--pcap", "p"])
            .expect("parse");
        assert!(
            matches!(cli.command, Some(Command::Record { pcap: Some(p), .. }) if p == std::path::Path::new("p"))
        );
    }

    #[test]
    fn parses_explain() {
        let cli = Cli::try_parse_from(["dropscope", "explain", "NO_SOCKET"]).expect("parse");
        assert!(matches!(cli.command, Some(Command::Explain { name }) if name == "NO_SOCKET"));
        assert!(Cli::try_parse_from(["dropscope", "explain"]).is_err());
    }

    #[test]
    fn parses_diff_and_check_flags() {
        let cli = Cli::try_parse_from([
            "dropscope",
            "diff",
            "base.dsrec",
            "-",
            "--budget",
            "total<5/s,NO_SOCKET<1/s",
            "--budget",
            "new-reasons=0",
            "--alpha",
            "0.01",
            "--format",
            "junit",
            "--by",
            "reason,netns",
        ])
        .expect("parse");
        let Some(Command::Diff(d)) = cli.command else {
            panic!("not diff")
        };
        let clauses: Vec<String> = d.budget.iter().map(ToString::to_string).collect();
        assert_eq!(clauses, ["total<5/s", "NO_SOCKET<1/s", "new-reasons=0"]);
        assert_eq!((d.alpha, d.format), (0.01, JudgeFormat::Junit));
        assert_eq!(d.new, Some(PathBuf::from("-")));
        assert!(!d.fail_on_regression);
        for alpha in ["0", "1", "-0.1", "x"] {
            let args = ["dropscope", "diff", "a", "b", "--alpha", alpha];
            assert!(Cli::try_parse_from(args).is_err(), "--alpha {alpha}");
        }
        assert!(Cli::try_parse_from(["dropscope", "diff", "a", "b", "--budget", "total"]).is_err());

        let cli = Cli::try_parse_from([
            "dropscope",
            "check",
            "--budget",
            "ratio<0.1%",
            "--duration",
            "30",
        ])
        .expect("parse");
        let Some(Command::Check(c)) = cli.command else {
            panic!("not check")
        };
        assert_eq!(
            c.duration,
            Some(Duration::from_secs(30)),
            "a bare number is seconds"
        );
        assert_eq!(c.budget.len(), 1);
        assert!(
            Cli::try_parse_from(["dropscope", "check", "--duration", "3"]).is_err(),
            "check needs a budget"
        );
    }

    /// Flags README and docs/ show that belong to other tools (cargo xtask's own: `test`'s,
    /// and `bench`'s in docs/benchmark.md).
    const OTHER_TOOLS: &[&str] = &[
        "--fuzz-seconds",
        "--no-lint",
        "--no-vmtest",
        "--rounds",
        "--flood-secs",
        "--window-secs",
        "--collector-secs",
        "--no-build",
        "--breakdown",
        "--dump",
        "--layers",
        "--syscalls",
    ];

    /// Flags of a build with the `bench` feature only (as `cargo xtask bench` makes it), hidden
    /// from `--help`: docs/benchmark.md shows them.
    const BENCH_BUILD: &[&str] = &["--bench-keys", "--bench-skip"];

    /// The code README shows: each line of its fenced blocks and each inline code span (which
    /// may run over a line break).
    fn readme_code(readme: &str) -> Vec<String> {
        let mut code = Vec::new();
        let mut prose = String::new();
        let mut fenced = false;
        for line in readme.lines() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if fenced {
                code.push(line.split(" # ").next().unwrap_or_default().to_owned());
            } else {
                prose.push_str(line);
                prose.push('\n');
            }
        }
        code.extend(
            prose
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|s| s.replace('\n', " ")),
        );
        code
    }

    /// The long options a command's `--help` lists.
    fn longs(cmd: &clap::Command) -> Vec<String> {
        cmd.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .chain(["--help".into(), "--version".into()])
            .collect()
    }

    /// Every `--flag` README shows exists in the `--help` of the command it is given to
    /// (`dropscope report --duration 10s`, `report --every D`), or, shown alone (`--interval
    /// D` in the options table), in some command's.
    fn readme_flags(readme: &str) -> (usize, Vec<String>) {
        let cli = Cli::command();
        let sub = |name: &str| cli.find_subcommand(name).filter(|s| !s.is_hide_set());
        let any: Vec<String> = std::iter::once(&cli)
            .chain(cli.get_subcommands())
            .flat_map(longs)
            .collect();
        let flag = |t: &str| {
            let t = t.split('=').next().unwrap_or_default();
            let t = t.trim_end_matches([',', '.', ')', ':', ';']);
            (t.len() > 2
                && t.starts_with("--")
                && t[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .then(|| t.to_owned())
        };
        let mut checked = 0;
        let mut wrong = Vec::new();
        for code in readme_code(readme) {
            for command in code.split(['|', ';']).flat_map(|c| c.split("&&")) {
                let tokens: Vec<&str> = command.split_whitespace().collect();
                // `cargo ... -p dropscope` names a package, not the program.
                let program = tokens
                    .iter()
                    .position(|t| *t == "dropscope" || t.ends_with("/dropscope"))
                    .filter(|_| tokens.first() != Some(&"cargo"));
                // Arguments of dropscope: after `dropscope`, after `cargo xtask run --`, or a
                // command's own (`report --every D`).
                let (start, owner) = match program {
                    Some(i) => (i + 1, None),
                    None if tokens.first() == Some(&"cargo") => {
                        match tokens.iter().position(|t| *t == "--") {
                            Some(i) if tokens.contains(&"run") => (i + 1, None),
                            _ => continue,
                        }
                    }
                    None if tokens.first().is_some_and(|t| sub(t).is_some()) => (0, None),
                    None if tokens.first().is_some_and(|t| t.starts_with("--")) => (0, Some("any")),
                    None => continue,
                };
                let args = &tokens[start.min(tokens.len())..];
                let (cmd, owner) = match (owner, args.first().and_then(|t| sub(t))) {
                    (Some(o), _) => (None, o.to_owned()),
                    (None, Some(s)) => (Some(s), format!("dropscope {}", s.get_name())),
                    (None, None) => (Some(&cli), "dropscope".to_owned()),
                };
                let known = cmd.map_or_else(|| any.clone(), longs);
                for f in args.iter().filter_map(|t| flag(t)) {
                    checked += 1;
                    let other_tool = cmd.is_none() && OTHER_TOOLS.contains(&&*f);
                    let bench_build = BENCH_BUILD.contains(&&*f);
                    if !known.contains(&f) && !other_tool && !bench_build {
                        wrong.push(format!("{f} (given to {owner}, in `{}`)", code.trim()));
                    }
                }
            }
        }
        (checked, wrong)
    }

    /// README.md and every page of docs/, which README links to, with their paths.
    const DOCS: &[(&str, &str)] = &[
        ("README.md", include_str!("../../README.md")),
        ("docs/benchmark.md", include_str!("../../docs/benchmark.md")),
        (
            "docs/counting-protocol.md",
            include_str!("../../docs/counting-protocol.md"),
        ),
        (
            "docs/development.md",
            include_str!("../../docs/development.md"),
        ),
        ("docs/guide.md", include_str!("../../docs/guide.md")),
        ("docs/history.md", include_str!("../../docs/history.md")),
        ("docs/kernels.md", include_str!("../../docs/kernels.md")),
        ("docs/ledger.md", include_str!("../../docs/ledger.md")),
        (
            "docs/prometheus.md",
            include_str!("../../docs/prometheus.md"),
        ),
        (
            "docs/recording-format.md",
            include_str!("../../docs/recording-format.md"),
        ),
    ];

    /// The dropscope command lines README shows (`sudo dropscope report --duration 10s`, each
    /// side of a pipe), as argument vectors: words split as the shell splits these, single
    /// quotes removed; comments (`# ...`) left out.
    fn readme_commands(readme: &str) -> Vec<Vec<String>> {
        // Only shell blocks (```sh) hold commands; other blocks are screens and files.
        let mut shell = String::new();
        let (mut fenced, mut skipped) = (false, false);
        for line in readme.lines() {
            if let Some(lang) = line.trim_start().strip_prefix("```") {
                fenced = !fenced;
                let skip = skipped || (fenced && lang != "sh");
                skipped = fenced && lang != "sh";
                if skip {
                    continue;
                }
            } else if skipped {
                continue;
            }
            shell.push_str(line);
            shell.push('\n');
        }
        let mut commands = Vec::new();
        for code in readme_code(&shell) {
            if code.trim_start().starts_with('#') {
                continue;
            }
            for command in code.split(['|', ';']).flat_map(|c| c.split("&&")) {
                let mut words = Vec::new();
                let mut quoted = false;
                for part in command.split('\'') {
                    if quoted {
                        words.push(part.to_owned());
                    } else {
                        words.extend(part.split_whitespace().map(str::to_owned));
                    }
                    quoted = !quoted;
                }
                if words.first().is_some_and(|w| w == "cargo") {
                    continue;
                }
                if let Some(i) = words.iter().position(|w| w == "dropscope") {
                    commands.push(words[i..].to_vec());
                }
            }
        }
        commands
    }

    /// Every command README shows is one dropscope accepts as shown: the command, its flags and
    /// their values (durations, budgets, formats) parse.
    #[test]
    fn every_command_the_readme_shows_parses() {
        let commands = readme_commands(DOCS[0].1);
        assert!(
            commands.len() >= 10,
            "only {} commands found in README: {commands:?}",
            commands.len()
        );
        for c in [
            "report",
            "explain",
            "record",
            "replay",
            "flamegraph",
            "diff",
            "check",
            "serve",
        ] {
            assert!(
                commands
                    .iter()
                    .any(|w| w.get(1).map(String::as_str) == Some(c)),
                "README shows no `dropscope {c}`"
            );
        }
        let wrong: Vec<String> = commands
            .iter()
            .filter_map(|c| {
                let e = Cli::try_parse_from(c).err()?;
                Some(format!("`{}`: {}", c.join(" "), e.kind()))
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "README shows commands that do not parse:\n{}",
            wrong.join("\n")
        );
        assert_eq!(
            readme_commands(
                "```sh\nsudo dropscope check --budget 'NO_SOCKET<1/s' # x\n# dropscope no\n\
                 cargo run -p dropscope\n```\n```\ndropscope vm 6.18\n```\n`ssh H sudo dropscope record -o - | dropscope replay -`"
            ),
            [
                vec!["dropscope", "check", "--budget", "NO_SOCKET<1/s"],
                vec!["dropscope", "record", "-o", "-"],
                vec!["dropscope", "replay", "-"],
            ]
        );
    }

    #[test]
    fn the_docs_checked_are_every_page_of_docs() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
        let mut pages: Vec<String> = std::fs::read_dir(dir)
            .expect("docs/")
            .map(|e| {
                e.expect("a docs/ entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("docs/{n}"))
            .collect();
        pages.sort();
        let checked: Vec<&str> = DOCS.iter().skip(1).map(|(p, _)| *p).collect();
        assert_eq!(pages, checked, "add the page to DOCS");
    }

    #[test]
    fn every_flag_the_readme_shows_exists() {
        let mut checked = 0;
        let mut wrong = Vec::new();
        for (path, text) in DOCS {
            let (n, w) = readme_flags(text);
            checked += n;
            wrong.extend(w.into_iter().map(|w| format!("{path}: {w}")));
        }
        assert!(
            checked > 50,
            "only {checked} flags found in README and docs/"
        );
        assert!(
            wrong.is_empty(),
            "README or docs/ show flags --help does not list:\n{}",
            wrong.join("\n")
        );
        let (_, wrong) = readme_flags(
            "Run `sudo dropscope report --duration 10s --count-syscalls` and\n\
             `serve --max-keys 5 --listen\n0.0.0.0:1`:\n\
             ```sh\ndropscope --nonesuch # comment --ignored\n\
             cargo xtask run -- flamegraph --diff x --frobnicate\n```\n\
             `--fuzz-seconds 0`, `--everything`, `cargo xtask test --no-vmtest`",
        );
        assert_eq!(
            wrong
                .iter()
                .map(|w| w.split(' ').next().unwrap_or_default())
                .collect::<Vec<_>>(),
            [
                "--nonesuch",
                "--frobnicate",
                "--count-syscalls",
                "--everything"
            ],
            "{wrong:#?}"
        );
    }

    #[test]
    fn rejects_bad_values() {
        assert!(Cli::try_parse_from(["dropscope", "--interval", "1ms"]).is_err());
        assert!(Cli::try_parse_from(["dropscope", "report", "--duration", "soon"]).is_err());
        assert!(Cli::try_parse_from(["dropscope", "--max-keys", "0"]).is_err());
        assert!(Cli::try_parse_from(["dropscope", "report", "--from", "1s"]).is_err());
    }
}
