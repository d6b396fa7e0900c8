//! The guest suite's socket check: a never-read UDP socket with the smallest receive buffer,
//! held by a traffic process while `report` counts its drops. Where the kernel passes the
//! receiving socket (`rx_sk`, 6.11+), the drops must be on that socket's row, named by the
//! process (`traffic[PID] udp 127.0.0.1:PORT`); before, what the rows show is reported (the
//! receive drop comes before the skb is charged to the socket, so no socket is expected). The
//! count is exact either way.
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
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
    let mut v = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let rx_sk = (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 11);
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
    }
    Ok(format!(
        "exact: SOCKET_RCVBUFF={counted}; {} shows {shown:?}",
        if rx_sk { "rx_sk" } else { "no rx_sk" }
    ))
}
