//! `dropscope generate`: the man pages and shell completions, from the clap definitions.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use clap::CommandFactory as _;

use crate::cli::{Cli, Generated};

/// What the man page adds to the clap definitions after its KEYS (see [`man_keys`]): examples,
/// and what to read next. Roff; every line is text of this file.
const MAN_EXTRA: &str = r#".SH EXAMPLES
.TP
\fBsudo dropscope\fR
the live view
.TP
\fBsudo dropscope report \-\-duration 10s\fR
count for 10 seconds and print a table
.TP
\fBdropscope explain NO_SOCKET\fR
what a drop reason means and what to check
.TP
\fBsudo dropscope record \-o drops.dsrec \-\-duration 1h\fR
record headless; \fBdropscope replay drops.dsrec\fR replays it
.TP
\fBsudo dropscope flamegraph \-\-duration 10s \-o drops.svg\fR
a flamegraph of the sampled drop stacks
.TP
\fBsudo dropscope serve\fR
Prometheus metrics on http://127.0.0.1:9818/metrics
.TP
\fBdropscope diff before.dsrec after.dsrec \-\-budget 'total<5/s'\fR
compare two runs key by key (rates, ratio, significance) and judge the second against a budget
.TP
\fBsudo dropscope check \-\-budget 'NO_SOCKET<1/s' \-\-duration 30s\fR
count for 30 seconds, then fail if a budget is broken
.SH EXIT STATUS
0 on success, also when the reader of standard output goes away (\fB| head\fR);
1 on an error, with a one-line message on standard error, and when \fBdiff\fR or \fBcheck\fR
finds a budget clause broken (one line naming each); 2 on a usage error, including a budget
clause the inputs cannot answer.
.SH FILES
.TP
\fI/sys/kernel/btf/vmlinux\fR
the kernel's BTF: drop reason names and the typed hook
.SH SEE ALSO
\fBdropscope-report\fR(1), \fBdropscope-explain\fR(1), \fBdropscope-record\fR(1),
\fBdropscope-replay\fR(1), \fBdropscope-flamegraph\fR(1), \fBdropscope-diff\fR(1),
\fBdropscope-check\fR(1), \fBdropscope-serve\fR(1), \fBdropscope-history\fR(1),
\fBnstat\fR(8), \fBss\fR(8)
"#;

/// The KEYS section: every key of the live view and of replay, from the one key table the
/// footer and `?` read too.
fn man_keys() -> String {
    use crate::tui::keys::{Applies, all};
    let roff = |t: &str| t.replace('\\', "\\e").replace('-', "\\-");
    let mut out = String::from(
        ".SH KEYS\nThe live view (and replay) answers which packets, why, where and since when:\n",
    );
    for k in all() {
        let said = k.action.contains("live") || k.action.contains("replay");
        let mode = match k.applies {
            Applies::Both => "",
            _ if said => "",
            Applies::Live => " (live)",
            Applies::Replay => " (replay)",
        };
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}{mode}\n",
            roff(k.keys),
            roff(k.action)
        ));
    }
    out
}

/// Runs `generate`.
pub fn generate(what: Generated) -> anyhow::Result<()> {
    match what {
        Generated::Man { dir } => {
            for page in man_pages(&dir)? {
                println_path(&page)?;
            }
            Ok(())
        }
        Generated::Completion { shell } => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut visible(Cli::command()), "dropscope", &mut out);
            out.flush().context("writing to stdout")
        }
    }
}

/// The command line without its hidden commands (this one), which completion scripts would
/// otherwise offer.
fn visible(full: clap::Command) -> clap::Command {
    let mut cmd = clap::Command::new("dropscope")
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
        .args_conflicts_with_subcommands(true)
        .version(env!("CARGO_PKG_VERSION"));
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    cmd
}

fn println_path(p: &Path) -> anyhow::Result<()> {
    writeln!(std::io::stdout().lock(), "{}", p.display()).context("writing to stdout")
}

/// Writes dropscope.1 and one page per command (visible ones) into `dir`; returns their paths.
pub fn man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    let mut main = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut main)
        .context("rendering the man page")?;
    main.extend_from_slice(man_keys().as_bytes());
    main.extend_from_slice(MAN_EXTRA.as_bytes());
    let path = dir.join("dropscope.1");
    fs::write(&path, main).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let man = clap_mangen::Man::new(sub.clone());
        let path = man
            .generate_to(dir)
            .with_context(|| format!("writing the page of {}", sub.get_name()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_pages_cover_every_command_and_the_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pages = man_pages(dir.path()).expect("pages");
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        for want in ["dropscope.1", "dropscope-report.1", "dropscope-serve.1"] {
            assert!(names.iter().any(|n| n == want), "{names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("generate")), "{names:?}");
        let main = fs::read_to_string(dir.path().join("dropscope.1")).expect("dropscope.1");
        assert!(main.starts_with(".ie \\n(.g .ds Aq") || main.contains(".TH dropscope 1"));
        assert!(main.contains(".SH KEYS") && main.contains("\\-\\-count\\-syscalls"));
        // Every key of the one key table, with what it does.
        for k in crate::tui::keys::all() {
            let action = k.action.replace('-', "\\-");
            assert!(main.contains(&action), "KEYS lacks {}: {main}", k.keys);
        }
        let report = fs::read_to_string(dir.path().join("dropscope-report.1")).expect("report");
        assert!(report.contains("\\-\\-duration"), "{report}");
    }

    #[test]
    fn completions_offer_every_visible_command_and_no_hidden_one() {
        let cmd = visible(Cli::command());
        let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
        assert_eq!(
            names,
            [
                "report",
                "reasons",
                "explain",
                "record",
                "replay",
                "flamegraph",
                "diff",
                "check",
                "serve",
                "history"
            ]
        );
        assert_eq!(
            cmd.get_arguments().count(),
            Cli::command().get_arguments().count()
        );
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut visible(Cli::command()), "dropscope", &mut out);
            let script = String::from_utf8(out).expect("UTF-8");
            assert!(script.contains("flamegraph") && script.contains("count-syscalls"));
            assert!(!script.contains("generate"), "{shell}: {script}");
        }
    }

    #[test]
    fn every_see_also_page_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        man_pages(dir.path()).expect("pages");
        let see_also = &MAN_EXTRA[MAN_EXTRA.find(".SH SEE ALSO").expect("SEE ALSO")..];
        for page in see_also
            .split("\\fB")
            .skip(1)
            .filter_map(|s| s.split_once("\\fR(1)").map(|(n, _)| n))
        {
            assert!(
                dir.path().join(format!("{page}.1")).exists(),
                "SEE ALSO names {page}(1), which is not written"
            );
        }
    }
}
