//! `dropscope reasons` and `dropscope explain`: the kernel's drop reasons, and what one means.
use std::{io::Write, path::Path};

use anyhow::bail;

use crate::{
    cli::Format,
    explain::{self, Guide, Match},
    ledger,
    probe::reasons::ReasonTable,
    sanitize, suggest,
};

/// Runs `reasons`, from the running kernel or a BTF file.
pub fn reasons_cmd(format: Format, btf: Option<&Path>) -> anyhow::Result<()> {
    let table = match btf {
        Some(path) => ReasonTable::from_btf_file(path)?,
        None => ReasonTable::from_running_kernel()?,
    };
    let guide = Guide::builtin();
    // Written, not printed: a closed pipe (`| head`) ends the command with an error, not a panic.
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => {
            let w = table.iter().map(|(_, n)| n.len()).max().unwrap_or(4);
            writeln!(out, "{:>10}  {:<w$}  SUMMARY", "VALUE", "NAME")?;
            for (v, n) in table.iter() {
                let name = sanitize::terminal(n);
                writeln!(out, "{v:>10}  {name:<w$}  {}", guide.summary(n))?;
            }
            writeln!(
                out,
                "({} reasons, read from {:?})",
                table.iter().count(),
                table.source
            )?;
        }
        Format::Json => {
            let rows: Vec<_> = table
                .iter()
                .map(|(v, n)| {
                    let summary = guide.summary(n);
                    serde_json::json!({ "code": v, "name": n, "summary": summary })
                })
                .collect();
            let text = serde_json::to_string_pretty(&rows)?;
            writeln!(out, "{}", sanitize::json(&text))?;
        }
    }
    Ok(())
}

/// Runs `explain`. A name that is neither in the reason guide nor a reason of the running
/// kernel is an error that names the closest known ones.
pub fn explain_cmd(name: &str) -> anyhow::Result<()> {
    let guide = Guide::builtin();
    // A layer counter (`Link:eth0:rx_missed_errors`, `Qdisc:*:drops`) has an entry of its own.
    if let Some(entry) = guide.counter(name) {
        let mut out = std::io::stdout().lock();
        write!(
            out,
            "{}",
            explain::render_counter(&sanitize::terminal(name), entry)
        )?;
        return Ok(());
    }
    // A kernel counter of the ledger (`TcpExt:ListenDrops`), as the `c` panel prints it.
    if let Some(m) = ledger::map::lookup(name) {
        let mut out = std::io::stdout().lock();
        let text = explain::render_kernel_counter(&sanitize::terminal(name), m);
        write!(out, "{text}")?;
        return Ok(());
    }
    let e = guide.explain(name);
    let table = ReasonTable::from_running_kernel().ok();
    let in_kernel = table.as_ref().map(|t| t.value_of(&e.name).is_some());
    // `UNKNOWN(n)` is how a value without a name is shown, in the TUI and in reports.
    let unnamed_value = e.name.starts_with("UNKNOWN(") && e.name.ends_with(')');
    if e.found == Match::Generic && in_kernel != Some(true) && !unnamed_value {
        let known = guide
            .reasons()
            .iter()
            .map(|r| r.name.as_str())
            .chain(table.iter().flat_map(|t| t.iter().map(|(_, n)| n)));
        bail!(
            "no drop reason is named {}{} (`dropscope reasons` lists this kernel's)",
            sanitize::terminal(&e.name),
            suggest::did_you_mean(name, known)
        );
    }
    let counters = ledger::map::counters_for(&e.name);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", explain::render(&e, &counters))?;
    if in_kernel == Some(false) {
        writeln!(
            out,
            "\n(the running kernel has no drop reason named {}; `dropscope reasons` lists its own)",
            e.name
        )?;
    }
    Ok(())
}
