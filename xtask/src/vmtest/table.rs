//! vmtest's kernel × check table: a row per kernel, a column per test binary or check made
//! on the host, then each result's detail and every check left out with its reason.
use std::{fs, path::Path};

/// One kernel's results.
pub struct Row {
    /// The kernel and how it ran (e.g. `6.12.57+deb12-amd64 (TCG, 1 CPU)`).
    pub kernel: String,
    /// The table's columns for this row's suite.
    pub columns: Vec<&'static str>,
    /// (check, passed, detail).
    pub results: Vec<(String, bool, String)>,
    /// Checks or tests not run on this kernel, and why (a column shown as `-`).
    pub skipped: Vec<(String, String)>,
    /// Boot and suite.
    pub seconds: f64,
}

/// The result lines (`<marker> <check>: PASS|FAIL <detail>`) a guest's runner wrote to
/// OUT/results.txt.
pub fn read_results(out: &Path, marker: &str) -> Vec<(String, bool, String)> {
    let text = fs::read_to_string(out.join("results.txt")).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix(marker))
        .filter_map(|l| {
            let (check, rest) = l.trim().split_once(": ")?;
            let (status, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((check.to_string(), status == "PASS", detail.to_string()))
        })
        .collect()
}

/// A result of a check made on the host.
pub fn outcome(check: &str, r: anyhow::Result<String>) -> (String, bool, String) {
    match r {
        Ok(d) => (check.to_string(), true, d),
        Err(e) => (check.to_string(), false, format!("{e:#}")),
    }
}

/// Prints a table per set of columns, then the details and what was left out; returns the
/// number of failures (a column with no result and no reason to be left out is one).
pub fn print(rows: &[Row]) -> usize {
    let mut sets: Vec<&Vec<&str>> = Vec::new();
    for r in rows {
        if !sets.contains(&&r.columns) {
            sets.push(&r.columns);
        }
    }
    for columns in sets {
        let rows: Vec<&Row> = rows.iter().filter(|r| r.columns == *columns).collect();
        print_one(columns, &rows);
    }
    println!();
    rows.iter().map(details).sum()
}

fn print_one(columns: &[&str], rows: &[&Row]) {
    let width = rows
        .iter()
        .map(|r| r.kernel.len())
        .max()
        .unwrap_or(6)
        .max(6);
    println!("\n| {:width$} | {} | time |", "kernel", columns.join(" | "));
    let rules: String = columns
        .iter()
        .map(|c| format!("{}|", "-".repeat(c.len() + 2)))
        .collect();
    println!("|{}|{rules}------|", "-".repeat(width + 2));
    for row in rows {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| format!("{:^w$}", cell(row, c), w = c.len()))
            .collect();
        println!(
            "| {:width$} | {} | {:>3.0}s |",
            row.kernel,
            cells.join(" | "),
            row.seconds
        );
    }
}

fn cell(row: &Row, column: &str) -> &'static str {
    match row.results.iter().find(|(n, _, _)| n == column) {
        Some((_, true, _)) => "pass",
        Some((_, false, _)) => "FAIL",
        None if row.skipped.iter().any(|(s, _)| s == column) => "-",
        None => "none",
    }
}

/// Prints a row's details; returns its failures.
fn details(row: &Row) -> usize {
    let mut failed = 0;
    for c in &row.columns {
        match row.results.iter().find(|(n, _, _)| n == c) {
            Some((_, true, d)) => println!("{} / {c}: pass: {d}", row.kernel),
            Some((_, false, d)) => {
                failed += 1;
                println!("{} / {c}: FAIL: {d}", row.kernel);
            }
            None if row.skipped.iter().any(|(s, _)| s == c) => {}
            None => {
                failed += 1;
                println!(
                    "{} / {c}: FAIL: no result (see the console log)",
                    row.kernel
                );
            }
        }
    }
    for (n, ok, d) in &row.results {
        if !row.columns.contains(&n.as_str()) && !ok {
            failed += 1;
            println!("{} / {n}: FAIL: {d}", row.kernel);
        }
    }
    for (what, why) in &row.skipped {
        println!("{} / {what}: not run: {why}", row.kernel);
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Result lines are read with their status and detail; other lines (a console's kernel
    /// messages) are not results.
    #[test]
    fn result_lines_are_read_with_their_status() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("results.txt"),
            "[ 1.2] virtio: hello\nM counts: PASS 2 passed\nM stacks: FAIL panicked\n",
        )
        .expect("results");
        assert_eq!(
            read_results(dir.path(), "M"),
            [
                ("counts".to_string(), true, "2 passed".to_string()),
                ("stacks".to_string(), false, "panicked".to_string())
            ]
        );
    }

    fn row(results: Vec<(String, bool, String)>, skipped: Vec<(String, String)>) -> Row {
        Row {
            kernel: "k".into(),
            columns: vec!["a", "b"],
            results,
            skipped,
            seconds: 1.0,
        }
    }

    #[test]
    fn a_missing_result_fails_unless_it_was_left_out_with_a_reason() {
        let pass = ("a".to_string(), true, String::new());
        assert_eq!(details(&row(vec![pass.clone()], vec![])), 1);
        let why = vec![("b".to_string(), "no tc here".to_string())];
        assert_eq!(details(&row(vec![pass], why.clone())), 0);
        assert_eq!(cell(&row(vec![], why), "b"), "-");
    }

    #[test]
    fn a_failure_outside_the_columns_counts() {
        let results = vec![
            ("a".to_string(), true, String::new()),
            ("b".to_string(), true, String::new()),
            ("run".to_string(), false, "timed out".to_string()),
        ];
        assert_eq!(details(&row(results, vec![])), 1);
    }
}
