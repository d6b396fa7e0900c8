//! What `cargo xtask systemd` does in the container, step by step, as a new user would: each
//! step fails with what it saw.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};

use super::{container::Container, named};
use crate::dist::unit::UNIT;

/// The history's directory as users name it: with `DynamicUser=`, a link to
/// [`PRIVATE_HISTORY`].
const HISTORY: &str = "/var/lib/dropscope";

/// Where systemd keeps the history of a `DynamicUser=` service.
const PRIVATE_HISTORY: &str = "/var/lib/private/dropscope";

/// The network namespace made in the container for the drops, after the service started.
const NETNS: &str = "drops";

/// Datagrams sent to a closed UDP port: exactly as many NO_SOCKET drops (from 1,000 to
/// 999,999: `check_diff` writes it with its thousands separator).
const DROPS: u64 = 1000;

/// The unit's `--retain-size` (1 GiB): the most its history may take.
const RETAIN_SIZE: u64 = 1 << 30;

/// How long the service runs before the drops: the quiet window `diff` compares them with is
/// at most this long.
const QUIET: Duration = Duration::from_secs(20);

/// The bound on anything waited for (the service's start, the history holding the drops):
/// far above what each took here (seconds), so only a defect reaches it.
const LIMIT: Duration = Duration::from_secs(90);

/// Runs every step against the `.deb` at `deb`.
pub fn run(c: &Container, deb: &Path) -> anyhow::Result<()> {
    let data = std::fs::read(deb).with_context(|| format!("reading {}", deb.display()))?;
    c.write("/tmp/dropscope.deb", &data)?;

    step("dpkg -i: postinst enables and starts the unit");
    let t = Instant::now();
    c.run_timeout(&["dpkg", "-i", "/tmp/dropscope.deb"], LIMIT)?;
    let (_, enabled) = c.status_stdout(&["systemctl", "is-enabled", UNIT])?;
    ensure!(
        enabled.trim() == "enabled",
        "after dpkg -i, {UNIT} is {:?}, not enabled",
        enabled.trim()
    );
    let metrics = wait_for("/metrics on 127.0.0.1:9818", || {
        let (status, m) = c.status_stdout(&["curl", "-sf", "http://127.0.0.1:9818/metrics"])?;
        ensure_active(c)?;
        Ok((status == 0 && m.contains("dropscope_history_segments")).then_some(m))
    })?;
    let up = Instant::now();
    eprintln!(
        "systemd: installed, enabled and serving /metrics in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    ensure!(
        metric(&metrics, "dropscope_history_paused") == Some(0.0),
        "the history is paused:\n{}",
        grep(&metrics, "dropscope_history")
    );
    let link = c.stdout(&["readlink", HISTORY])?;
    ensure!(
        link.trim() == "private/dropscope",
        "{HISTORY} links to {:?}, not private/dropscope",
        link.trim()
    );
    let owner = c.stdout(&["stat", "-c", "%a %u", PRIVATE_HISTORY])?;
    ensure!(
        owner.starts_with("700 ") && !owner.trim().ends_with(" 0"),
        "{PRIVATE_HISTORY} is not 0700 and the service's own user's: {owner}"
    );

    step("a network namespace made now (ip netns add), with an nftables rule and a process");
    c.run(&["ip", "netns", "add", NETNS])?;
    c.run(&["ip", "-n", NETNS, "link", "set", "lo", "up"])?;
    let inode = c
        .stdout(&["stat", "-L", "-c", "%i", &format!("/run/netns/{NETNS}")])?
        .trim()
        .to_string();
    named::prepare(c, NETNS)?;
    let t = Instant::now();
    named::wait_read(c, NETNS, &inode)?;
    eprintln!(
        "systemd: the service read the new namespace's counters {:.1} s after the process \
         in it started",
        t.elapsed().as_secs_f64()
    );

    step("known drops in the namespace, read back from the history");
    // The quiet window diff compares the drops with: the service's first seconds.
    crate::bench::interrupt::sleep(QUIET.saturating_sub(up.elapsed()))?;
    let before = now(c)?;
    let send = format!(
        "for i in $(seq {DROPS}); do printf x > /dev/udp/127.0.0.1/9; done; {}",
        named::traffic()
    );
    c.run_timeout(&["ip", "netns", "exec", NETNS, "bash", "-c", &send], LIMIT)?;
    let filter = [
        "--netns",
        &inode,
        "--reason",
        "NO_SOCKET",
        "--format",
        "json",
    ];
    wait_for("the history to hold the drops", || {
        // Unfiltered: until the namespace's first drop is in, a filter naming it is refused.
        let all = report(c, &["--format", "json"])?;
        let total = drops_in(&all, &inode)?;
        ensure!(
            total <= DROPS,
            "the history holds {total} drops, {DROPS} were made"
        );
        Ok((total == DROPS).then_some(()))
    })?;
    // The window's end after the snapshot that holds them (times are to the second).
    crate::bench::interrupt::sleep(Duration::from_millis(1100))?;
    let after = now(c)?;
    eprintln!(
        "systemd: {DROPS} drops at {} to {} in namespace {inode}",
        before.1, after.1
    );

    step("dropscope history, report --from --to, diff --last --vs, through the link");
    let listing = c.stdout(&["dropscope", "history", HISTORY])?;
    eprintln!("{}", listing.trim_end());
    ensure!(
        listing.contains("seg-"),
        "`dropscope history` lists no segment:\n{listing}"
    );
    let mut args = vec!["--from", &before.1, "--to", &after.1];
    args.extend(filter);
    let filtered = report(c, &args)?;
    let counted = total(&filtered)?;
    ensure!(
        counted == DROPS,
        "report --from {} --to {} counts {counted} drops, not {DROPS}:\n{filtered}",
        before.1,
        after.1
    );
    check_rows(&filtered)?;
    let window = format!("{}s", after.0 - before.0 + 1);
    let diff = c.stdout(&[
        "dropscope",
        "diff",
        "--history",
        HISTORY,
        "--last",
        &window,
        "--vs",
        &window,
        "--at",
        &after.1,
        "--netns",
        &inode,
        "--reason",
        "NO_SOCKET",
    ])?;
    eprintln!("{}", diff.trim_end());
    check_diff(&diff)?;

    step("names, the kernel's counters and who dropped it, from the history");
    // The kernel's counters are read every 10 s: until a reading after the drops is in.
    wait_for("the namespace's kernel counters in the history", || {
        let json = report(c, &["--from", &before.1, "--format", "json"])?;
        let counted = named::counter(&json, NETNS, &inode, "Udp:NoPorts")?;
        ensure!(
            counted <= DROPS,
            "Udp:NoPorts grew by {counted} in namespace {inode}, {DROPS} drops were made"
        );
        Ok((counted == DROPS && named::looked_up(&json, &inode)?).then_some(()))
    })?;
    crate::bench::interrupt::sleep(Duration::from_millis(1100))?;
    let end = now(c)?;
    let json = report(
        c,
        &["--from", &before.1, "--to", &end.1, "--format", "json"],
    )?;
    let found = named::check(&json, NETNS, &inode, DROPS)?;
    eprintln!("systemd: {} to {}: {found}", before.1, end.1);

    step("the history's disk use");
    let du = c.stdout(&["du", "-sb", PRIVATE_HISTORY])?;
    let bytes: u64 = du
        .split_whitespace()
        .next()
        .and_then(|b| b.parse().ok())
        .with_context(|| format!("du says {du}"))?;
    let metrics = c.stdout(&["curl", "-sf", "http://127.0.0.1:9818/metrics"])?;
    eprintln!(
        "systemd: {PRIVATE_HISTORY} takes {bytes} bytes after {:.0} s; /metrics says:\n{}",
        up.elapsed().as_secs_f64(),
        grep(&metrics, "dropscope_history_")
    );

    ensure!(
        metric(&metrics, "dropscope_history_bytes").is_some_and(|m| m > 0.0 && m <= bytes as f64)
            && bytes <= RETAIN_SIZE,
        "the history takes {bytes} bytes: more than /metrics says or than --retain-size"
    );

    step("dpkg -r stops the unit (prerm), dpkg --purge forgets it (postrm)");
    // The package's binary, kept to read the history once the package is gone.
    c.run(&["cp", "/usr/bin/dropscope", "/tmp/dropscope"])?;
    let t = Instant::now();
    c.run_timeout(&["dpkg", "-r", "dropscope"], LIMIT)?;
    eprintln!(
        "systemd: dpkg -r took {:.1} s (the unit stopped)",
        t.elapsed().as_secs_f64()
    );
    let (_, active) = c.status_stdout(&["systemctl", "is-active", UNIT])?;
    ensure!(
        active.trim() == "inactive",
        "after dpkg -r, {UNIT} is {:?}, not inactive",
        active.trim()
    );
    let (status, _) = c.status_stdout(&["test", "-e", "/usr/bin/dropscope"])?;
    ensure!(
        status != 0,
        "/usr/bin/dropscope is still there after dpkg -r"
    );
    // Stopped by SIGTERM, the writer ended its segment cleanly (its end marker written).
    let listing = c.stdout(&["/tmp/dropscope", "history", HISTORY])?;
    ensure!(
        listing.contains("seg-") && !listing.contains("unfinished") && !listing.contains("cut"),
        "after dpkg -r, the history is not there or its segment is not finished:\n{listing}"
    );
    c.run_timeout(&["dpkg", "--purge", "dropscope"], LIMIT)?;
    let (_, state) = c.status_stdout(&["systemctl", "is-enabled", UNIT])?;
    ensure!(
        !matches!(state.trim(), "enabled" | "masked" | "disabled"),
        "after dpkg --purge, {UNIT} is {:?}",
        state.trim()
    );
    let (left, _) = c.status_stdout(&[
        "sh",
        "-c",
        &format!(
            "ls /etc/systemd/system/*/{UNIT} /etc/systemd/system/{UNIT} \
             /var/lib/systemd/deb-systemd-helper-enabled/{UNIT} 2>/dev/null"
        ),
    ])?;
    ensure!(
        left != 0,
        "dpkg --purge left the unit's links or state behind"
    );
    let kept = c.stdout(&["ls", PRIVATE_HISTORY])?;
    ensure!(
        kept.contains("seg-"),
        "dpkg --purge removed the history: {kept:?}"
    );
    Ok(())
}

fn step(what: &str) {
    eprintln!("systemd: -- {what}");
}

/// Fails unless the unit is active (or still starting).
fn ensure_active(c: &Container) -> anyhow::Result<()> {
    let (_, active) = c.status_stdout(&["systemctl", "is-active", UNIT])?;
    if !matches!(active.trim(), "active" | "activating") {
        bail!("{UNIT} is {:?}", active.trim());
    }
    Ok(())
}

/// Calls `probe` until it returns a value, failing past [`LIMIT`] or on its error.
pub(super) fn wait_for<T>(
    what: &str,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(v) = probe().with_context(|| format!("waiting for {what}"))? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("waited {} s for {what}", LIMIT.as_secs());
        }
        crate::bench::interrupt::sleep(Duration::from_millis(250))?;
    }
}

/// `dropscope report --input` the history, with `args`: its standard output.
pub(super) fn report(c: &Container, args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec!["dropscope", "report", "--input", HISTORY];
    all.extend(args);
    c.stdout(&all)
}

/// The container's clock now: Unix seconds and the RFC 3339 stamp of that second (UTC).
fn now(c: &Container) -> anyhow::Result<(u64, String)> {
    let out = c.stdout(&["date", "-u", "+%s %Y-%m-%dT%H:%M:%SZ"])?;
    let (secs, stamp) = out.trim().split_once(' ').context("date's output")?;
    Ok((secs.parse().context("date +%s")?, stamp.to_string()))
}

/// The `total` of a `report --format json`.
fn total(json: &str) -> anyhow::Result<u64> {
    let v: serde_json::Value =
        serde_json::from_str(json).with_context(|| format!("report's JSON: {json}"))?;
    v["total"]
        .as_u64()
        .with_context(|| format!("no total in the report: {json}"))
}

/// The NO_SOCKET drops of a `report --format json` in the network namespace `inode`.
fn drops_in(json: &str, inode: &str) -> anyhow::Result<u64> {
    let v: serde_json::Value =
        serde_json::from_str(json).with_context(|| format!("report's JSON: {json}"))?;
    let rows = v["drops"].as_array().context("no drops in the report")?;
    Ok(rows
        .iter()
        .filter(|r| r["reason"] == "NO_SOCKET" && r["netns"].as_u64() == inode.parse().ok())
        .filter_map(|r| r["count"].as_u64())
        .sum())
}

/// A metric's value (the first series of that name).
fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let value = rest
            .strip_prefix(' ')
            .or_else(|| rest.split_once("} ").map(|(_, v)| v))?;
        value.trim().parse().ok()
    })
}

/// The lines of `text` starting with `prefix`.
fn grep(text: &str, prefix: &str) -> String {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every row of the report is the drops made, at the place the kernel drops them: its name
/// read from /proc/kallsyms (the service's CAP_SYSLOG), never `[unknown]`.
fn check_rows(json: &str) -> anyhow::Result<()> {
    let v: serde_json::Value = serde_json::from_str(json).context("report's JSON")?;
    let rows = v["drops"].as_array().context("no drops in the report")?;
    ensure!(!rows.is_empty(), "the report has no row:\n{json}");
    for row in rows {
        let location = row["location"].as_str().unwrap_or_default();
        ensure!(
            row["reason"] == "NO_SOCKET" && location.starts_with("__udp4_lib_rcv+"),
            "a row of the report is not NO_SOCKET at __udp4_lib_rcv (location {location:?}): \
             {row}"
        );
    }
    Ok(())
}

/// The diff of the window with the drops against the quiet one before it: nothing then, every
/// drop now, the key marked new.
fn check_diff(diff: &str) -> anyhow::Result<()> {
    let line = |prefix: &str| {
        diff.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_default()
    };
    let drops = format!(", {},{:03} drops (", DROPS / 1000, DROPS % 1000);
    ensure!(
        line("base: ").contains(", 0 drops (")
            && line("new: ").contains(&drops)
            && line("NO_SOCKET ").contains(" new "),
        "diff does not show the window before with no drop and the window after with \
         {DROPS}, the key new:\n{diff}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `diff --history` printed in the check (the base window quiet, the drops new).
    const DIFF: &str = "\
REASON     LOCATION              NETNS       DEVICE  PROTO    BASE/s     NEW/s   RATIO         P       CHANGE
NO_SOCKET  __udp4_lib_rcv+0x4bc  4026532253  if1     udp         0.0       285     new  4.9e-269   regression
base: /var/lib/dropscope 2026-11-28 03:58:30 to 2026-11-28 03:58:33, 3s, 0 drops (0.0/s), 0 packets received
new: /var/lib/dropscope 2026-11-28 03:58:33 to 2026-11-28 03:58:36, 3.5s, 1,000 drops (285/s), 0 packets received
";

    #[test]
    fn the_diff_check_takes_the_drops_as_new_and_nothing_else() {
        check_diff(DIFF).expect("the check's own diff");
        let base_had_drops = DIFF.replace(", 0 drops (0.0/s)", ", 3 drops (1.0/s)");
        assert!(check_diff(&base_had_drops).is_err());
        let fewer = DIFF.replace("1,000 drops", "999 drops");
        assert!(check_diff(&fewer).is_err());
        let not_new = DIFF.replace("     new  ", "   284.0  ");
        assert!(check_diff(&not_new).is_err());
    }

    #[test]
    fn rows_must_be_the_drops_made_with_their_location_named() {
        let row = |location: &str| {
            format!(
                r#"{{"total":1000,"drops":[{{"reason":"NO_SOCKET","location":"{location}",
                "netns":4026532253,"count":1000}}]}}"#
            )
        };
        check_rows(&row("__udp4_lib_rcv+0x4bc")).expect("named");
        assert!(check_rows(&row("[unknown]")).is_err());
        assert!(check_rows(r#"{"total":0,"drops":[]}"#).is_err());
        assert_eq!(drops_in(&row("x"), "4026532253").expect("json"), 1000);
        assert_eq!(drops_in(&row("x"), "4026531833").expect("json"), 0);
        assert_eq!(total(&row("x")).expect("json"), 1000);
    }

    #[test]
    fn metrics_are_read_by_name_with_or_without_labels() {
        let m = "# HELP x\ndropscope_history_bytes 3869\n\
                 dropscope_drops_total{reason=\"NO_SOCKET\"} 7\ndropscope_history_bytes_x 1\n";
        assert_eq!(metric(m, "dropscope_history_bytes"), Some(3869.0));
        assert_eq!(metric(m, "dropscope_drops_total"), Some(7.0));
        assert_eq!(metric(m, "dropscope_history_paused"), None);
    }
}
