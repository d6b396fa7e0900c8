//! `dropscope reasons` and `dropscope explain`: the kernel's drop reasons, and what one means.
use std::{io::Write, path::Path};

use crate::{
    cli::Format,
    explain::{self, Guide},
    kcounters,
    probe::reasons::ReasonTable,
    sanitize,
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

/// Runs `explain`.
pub fn explain_cmd(name: &str) -> anyhow::Result<()> {
    let e = Guide::builtin().explain(name);
    let counters = kcounters::map::counters_for(&e.name);
    let mut out = std::io::stdout().lock();
    write!(out, "{}", explain::render(&e, &counters))?;
    if let Ok(table) = ReasonTable::from_running_kernel()
        && table.value_of(&e.name).is_none()
    {
        writeln!(
            out,
            "\n(the running kernel has no drop reason named {}; `dropscope reasons` lists its own)",
            e.name
        )?;
    }
    Ok(())
}
