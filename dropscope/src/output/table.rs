//! The report's table: one column per dimension the keys have, names escaped for the
//! terminal and cut, fitted to a width by cutting locations first; `diff` and `check` write
//! their tables with it too.
use std::io::Write;

use unicode_width::UnicodeWidthStr;

use super::rows::sorted;
use crate::{
    format::count,
    model::{DropCount, DropKey, Snapshot},
    sanitize,
};

/// Longest reason name shown in full in the table (longer ones are cut with `…`).
pub const MAX_REASON_CHARS: usize = 48;
/// Longest location shown in full in the table.
pub const MAX_LOCATION_CHARS: usize = 96;

/// Appends `s` and spaces up to `width` display columns.
fn pad(out: &mut String, s: &str, width: usize) {
    out.push_str(s);
    let w = UnicodeWidthStr::width(s);
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(w)));
}

/// A location escaped for the terminal and cut to `chars`, keeping its `+0x` offset: the
/// function's name is cut, not the call site (two call sites of one function stay apart).
fn cut_location(location: &str, chars: usize) -> String {
    let offset = (location.rfind("+0x"))
        .map(|i| location.split_at(i))
        .filter(|(_, off)| off.len() <= 20 && off[3..].bytes().all(|b| b.is_ascii_hexdigit()));
    match offset {
        Some((function, off)) if location.chars().count() > chars && off.len() + 4 <= chars => {
            let mut out = sanitize::terminal_cell(function, chars - off.len());
            out.push_str(off);
            out
        }
        _ => sanitize::terminal_cell(location, chars),
    }
}

/// Width of the table when the output is not a terminal.
pub const PIPE_WIDTH: usize = 100;
/// The narrowest a location is cut to when the table must fit a width.
const MIN_LOCATION_CHARS: usize = 24;

/// The width the table is fitted to: the terminal's, or [`PIPE_WIDTH`] when stdout is not one.
pub fn table_width() -> usize {
    use std::io::IsTerminal as _;
    if std::io::stdout().is_terminal() {
        crossterm::terminal::size().map_or(PIPE_WIDTH, |(w, _)| usize::from(w).max(40))
    } else {
        PIPE_WIDTH
    }
}

/// A column of the table: its title and each row's cell.
struct Column {
    title: &'static str,
    cells: Vec<String>,
    right: bool,
}

impl Column {
    fn width(&self) -> usize {
        (self
            .cells
            .iter()
            .map(|c| UnicodeWidthStr::width(c.as_str())))
        .chain([self.title.len()])
        .max()
        .unwrap_or(0)
    }
}

/// The columns of the dimensions the keys have: the reason and location where they were not
/// merged away, the namespace (its name, else its inode), the interface, protocol and port.
fn key_columns(rows: &[&DropKey], loc_chars: usize) -> Vec<Column> {
    let has = |f: &dyn Fn(&DropKey) -> bool| rows.iter().any(|k| f(k));
    let column = |title, f: &dyn Fn(&DropKey) -> String| Column {
        title,
        cells: rows.iter().map(|k| f(k)).collect(),
        right: false,
    };
    let mut cols = Vec::new();
    if rows.is_empty() || has(&|k| &*k.reason.name != "*") {
        cols.push(column("REASON", &|k| {
            sanitize::terminal_cell(&k.reason.name, MAX_REASON_CHARS)
        }));
    }
    if rows.is_empty() || has(&|k| &*k.location != "*") {
        cols.push(column("LOCATION", &|k| {
            sanitize::terminal_cell(&k.location, loc_chars)
        }));
    }
    if has(&|k| k.attr.netns.is_some()) {
        cols.push(column("NETNS", &|k| {
            let a = &k.attr;
            match (&a.netns_name, a.netns) {
                (Some(n), _) => sanitize::terminal_cell(n, MAX_NAME_CHARS),
                (None, Some(i)) => i.to_string(),
                (None, None) => "-".into(),
            }
        }));
    }
    if has(&|k| k.attr.device.is_some()) {
        cols.push(column("DEVICE", &|k| {
            k.attr
                .device
                .as_deref()
                .map_or("-".into(), |n| sanitize::terminal_cell(n, MAX_NAME_CHARS))
        }));
    }
    if has(&|k| k.attr.protocol.is_some()) {
        cols.push(column("PROTO", &|k| {
            k.attr
                .protocol
                .as_deref()
                .map_or("-".into(), |n| sanitize::terminal_cell(n, MAX_NAME_CHARS))
        }));
    }
    if has(&|k| k.attr.port.is_some()) {
        let mut c = column("PORT", &|k| {
            k.attr.port.map_or("-".into(), |p| p.to_string())
        });
        c.right = true;
        cols.push(c);
    }
    if has(&|k| k.attr.culprit.is_some()) {
        cols.push(column("WHO", &|k| {
            (k.attr.culprit.as_ref()).map_or("-".into(), |c| {
                sanitize::terminal_cell(&c.label, crate::culprit::tui::WHO_WIDTH * 2)
            })
        }));
    }
    if has(&|k| k.attr.socket.is_some()) {
        cols.push(column("SOCKET", &|k| {
            let buffer = crate::model::socket::buffer_reason(&k.reason.name);
            (k.attr.socket.as_ref()).map_or("-".into(), |s| {
                sanitize::terminal_cell(&s.cell(buffer), crate::model::socket::MAX_CELL)
            })
        }));
    }
    cols
}

/// A column of numbers after the key columns: right-aligned, at least `min` wide.
pub struct NumberColumn {
    /// Its title.
    pub title: &'static str,
    /// Each row's cell.
    pub cells: Vec<String>,
    /// Its narrowest width.
    pub min: usize,
}

/// Writes a header and one line per key: a column for each dimension the keys have (so no
/// two rows look the same), then `numbers`, fitted to `width` display columns by cutting
/// locations first. Names are escaped for the terminal and cut (see [`write_table`]).
pub fn write_key_table(
    keys: &[&DropKey],
    numbers: &[NumberColumn],
    width: usize,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let mut cols = key_columns(keys, MAX_LOCATION_CHARS);
    let number_widths: Vec<usize> = (numbers.iter())
        .map(|n| {
            (n.cells.iter().map(|c| UnicodeWidthStr::width(c.as_str())))
                .chain([n.title.len(), n.min])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let fixed: usize = number_widths.iter().map(|w| w + 2).sum();
    let total = |cols: &[Column]| cols.iter().map(|c| c.width() + 2).sum::<usize>() + fixed;
    let over = total(&cols).saturating_sub(width);
    if over > 0
        && let Some(i) = cols.iter().position(|c| c.title == "LOCATION")
    {
        let chars = cols[i].width().saturating_sub(over).max(MIN_LOCATION_CHARS);
        cols[i].cells = (keys.iter())
            .map(|k| cut_location(&k.location, chars))
            .collect();
    }
    let widths: Vec<usize> = cols.iter().map(Column::width).collect();
    let mut line = String::new();
    let right = |line: &mut String, text: &str, w: usize| {
        line.extend(std::iter::repeat_n(
            ' ',
            w.saturating_sub(UnicodeWidthStr::width(text)),
        ));
        line.push_str(text);
    };
    let mut write_row = |cell: &dyn Fn(&Column) -> &str,
                         number: &dyn Fn(&NumberColumn) -> &str|
     -> std::io::Result<()> {
        line.clear();
        for (c, &w) in cols.iter().zip(&widths) {
            let text = cell(c);
            if c.right {
                right(&mut line, text, w);
            } else {
                pad(&mut line, text, w);
            }
            line.push_str("  ");
        }
        for (i, (n, &w)) in numbers.iter().zip(&number_widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            right(&mut line, number(n), w);
        }
        writeln!(out, "{}", line.trim_end())
    };
    write_row(&|c| c.title, &|n| n.title)?;
    for i in 0..keys.len() {
        write_row(&|c| c.cells[i].as_str(), &|n| {
            n.cells.get(i).map_or("", String::as_str)
        })?;
    }
    Ok(())
}

/// Longest namespace, interface or protocol name shown in full in the table.
pub const MAX_NAME_CHARS: usize = 40;

/// Writes the report as aligned columns, one for each dimension the counts have (so no two rows
/// look the same), fitted to `width` columns by cutting locations first.
///
/// Names are escaped for the terminal (no control or bidi character reaches it) and cut to
/// [`MAX_REASON_CHARS`] / [`MAX_LOCATION_CHARS`] / [`MAX_NAME_CHARS`] with `…`, so no
/// recording can break the table.
#[cfg(test)]
pub fn write_table(s: &Snapshot, seconds: f64, out: impl Write) -> std::io::Result<()> {
    write_table_fitted(s, seconds, PIPE_WIDTH, out)
}

/// [`write_table`], fitted to `width` display columns.
pub fn write_table_fitted(
    s: &Snapshot,
    seconds: f64,
    width: usize,
    mut out: impl Write,
) -> std::io::Result<()> {
    let rows = sorted(s);
    let keys: Vec<&DropKey> = rows.iter().map(|d| &d.key).collect();
    let share = |d: &DropCount| {
        if s.total > 0 {
            100.0 * d.count as f64 / s.total as f64
        } else {
            0.0
        }
    };
    let numbers = [
        NumberColumn {
            title: "COUNT",
            cells: rows.iter().map(|d| count(d.count)).collect(),
            min: 12,
        },
        NumberColumn {
            title: "SHARE",
            cells: rows.iter().map(|d| format!("{:.1}%", share(d))).collect(),
            min: 6,
        },
    ];
    write_key_table(&keys, &numbers, width, &mut out)?;
    if rows.is_empty() {
        writeln!(out, "(no drops)")?;
    }
    write!(out, "total {} drops in {seconds:.1}s", count(s.total))?;
    if s.overflow > 0 {
        write!(
            out,
            "; OVERFLOW: {} drops did not fit in the keyed map (raise --max-keys)",
            count(s.overflow)
        )?;
    }
    if s.health.recursion_misses > 0 {
        write!(
            out,
            "; MISSED: the kernel skipped {} probe runs (drops not counted)",
            count(s.health.recursion_misses)
        )?;
    }
    writeln!(out)
}
