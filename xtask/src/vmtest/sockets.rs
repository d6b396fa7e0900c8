//! The guest suite's socket check: a never-read UDP socket with the smallest receive buffer,
//! held by a traffic process while `report` counts its drops. Where the kernel passes the
//! receiving socket (`rx_sk`, 6.11+), the drops must be on that socket's row, named by the
//! process (`traffic[PID] udp 127.0.0.1:PORT`); before, no row may name a socket (the receive
//! drop comes before the skb is charged to the socket, so nothing tells which it was). Which
//! the kernel does is read from its tracepoint's format (the `rx_sk` field). The count is
//! exact either way.
use std::{path::Path, time::Duration};

use anyhow::{Context as _, ensure};
use serde_json::Value;

/// Datagrams sent to the socket.
const SENT: u64 = 300;

/// Runs the check with `dropscope` and `traffic`; its detail line.
pub fn check(dropscope: &Path, traffic: &Path) -> anyhow::Result<String> {
    let ns = dropscope_tests::Netns::create(&format!("vmtest-sock-{}", std::process::id()))?;
    let c = dropscope_tests::Counting::try_start(
        dropscope,
        &[
            "report",
            "--format",
            "json",
            "--no-stacks",
            "--netns",
            &ns.name,
        ],
        Duration::from_secs(120),
    )?;
    // Held 10 s after the drops: dropscope looks it up within a few polls.
    let out = ns.try_traffic(
        traffic,
        &["rcvbuf-hold", &SENT.to_string(), "10", "0"],
        Duration::from_secs(120),
    )?;
    let report = c.try_interrupt(Duration::from_secs(60))?;
    let report: Value = serde_json::from_str(&report).context("report JSON")?;
    let mut lines = out.lines();
    let first: Vec<&str> = lines.next().context("no socket line")?.split(' ').collect();
    let (inode, port): (u64, &str) = (first.get(1).context("inode")?.parse()?, first[2]);
    let dropped: u64 = (lines.next().and_then(|l| l.strip_prefix("dropped ")))
        .context("no dropped line")?
        .parse()?;
    let rows: Vec<&Value> = (report["drops"].as_array().context("drops")?.iter())
        .filter(|d| d["reason"] == "SOCKET_RCVBUFF")
        .collect();
    let counted: u64 = rows.iter().filter_map(|d| d["count"].as_u64()).sum();
    ensure!(
        counted == dropped,
        "counted {counted}, dropped {dropped}: {rows:?}"
    );
    let rx_sk = kernel_passes_rx_sk()?;
    let shown: Vec<String> = (rows.iter())
        .map(|d| {
            d["socket"]["text"]
                .as_str()
                .unwrap_or("no socket")
                .to_string()
        })
        .collect();
    if rx_sk {
        let row = (rows.iter())
            .find(|d| d["socket"]["inode"].as_u64() == Some(inode))
            .with_context(|| format!("no row of socket {inode}: {shown:?}"))?;
        let text = row["socket"]["text"].as_str().unwrap_or("");
        ensure!(
            text.starts_with("socket: traffic[")
                && text.contains(&format!(" udp 127.0.0.1:{port}")),
            "socket {inode} shown as {text:?}"
        );
    } else {
        ensure!(
            rows.iter().all(|d| d.get("socket").is_none()),
            "the kernel passes no rx_sk, yet a socket is named: {shown:?}"
        );
    }
    Ok(format!(
        "exact: SOCKET_RCVBUFF={counted}; {} shows {shown:?}",
        if rx_sk { "rx_sk" } else { "no rx_sk" }
    ))
}

/// Whether the running kernel's `kfree_skb` passes the receiving socket (`rx_sk`, 6.11+): its
/// tracepoint's format has the field (tracefs is mounted by the guest's init, or by an earlier
/// check's dropscope).
fn kernel_passes_rx_sk() -> anyhow::Result<bool> {
    let format = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .find_map(|d| {
            std::fs::read_to_string(Path::new(d).join("events/skb/kfree_skb/format")).ok()
        })
        .context("no kfree_skb tracepoint format (tracefs not mounted)")?;
    Ok(has_rx_sk(&format))
}

/// Whether a `kfree_skb` tracepoint format declares the `rx_sk` field.
fn has_rx_sk(format: &str) -> bool {
    format
        .lines()
        .any(|l| l.trim_start().starts_with("field:") && l.contains(" rx_sk;"))
}

#[cfg(test)]
mod tests {
    /// A field declares `rx_sk` (6.11+); the name elsewhere, as in a print format, does not.
    #[test]
    fn rx_sk_is_read_from_the_fields_not_the_print_format() {
        let old = "\tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;\n\
                   \tfield:unsigned short protocol;\toffset:24;\tsize:2;\tsigned:0;\n\
                   print fmt: \"skbaddr=%p rx_sk=%p\", REC->rx_sk\n";
        let new = "\tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;\n\
                   \tfield:void * rx_sk;\toffset:24;\tsize:8;\tsigned:0;\n";
        assert!(!super::has_rx_sk(old));
        assert!(super::has_rx_sk(new));
    }
}
