//! What the history must say of the check's network namespace, beyond its counts: its name
//! and its interface's, the kernel's own counters read in it, and who dropped what (an
//! nftables rule, the process holding a full socket). The namespace is made after the
//! service started, as `ip netns add` makes one; each of these needs the service to enter it.
use anyhow::{Context as _, bail, ensure};
use serde_json::Value;

use super::{
    container::Container,
    scenario::{report, wait_for},
};

/// The nftables table made in the namespace (its one rule drops UDP to [`FILTERED_PORT`]).
const TABLE: &str = "dropscope_check";

/// The rule's comment, read back from the culprit.
const COMMENT: &str = "the check refuses this port";

/// The port the rule drops, and the datagrams sent to it: exactly as many NETFILTER_DROP
/// drops, and as many counted by the rule.
const FILTERED_PORT: u16 = 10;
const FILTERED: u64 = 100;

/// The port of a socket that is never read, with the smallest receive buffer, and the
/// datagrams sent to it: all but the few its buffer holds are SOCKET_RCVBUFF drops.
const FULL_PORT: u16 = 11;
const FULL: u64 = 100;

/// The port of a socket that reads all it receives: packets that are no drop, to see the
/// namespace's packet counter grow once the service reads it.
const SINK_PORT: u16 = 12;

/// The process held in the namespace (Debian's perl-base is essential: every machine has
/// it): the full socket and the sink.
fn holder() -> String {
    format!(
        "socket(F, PF_INET, SOCK_DGRAM, 0) and setsockopt(F, SOL_SOCKET, SO_RCVBUF, 1) \
         and bind(F, sockaddr_in({FULL_PORT}, INADDR_LOOPBACK)) or die \"full: $!\"; \
         socket(S, PF_INET, SOCK_DGRAM, 0) and bind(S, sockaddr_in({SINK_PORT}, \
         INADDR_LOOPBACK)) or die \"sink: $!\"; 1 while defined recv(S, my $b, 64, 0)"
    )
}

/// Makes the namespace's rule and its process (the namespace and its `lo` exist), and waits
/// until the process's sockets are bound.
pub fn prepare(c: &Container, netns: &str) -> anyhow::Result<()> {
    let ruleset = format!(
        "table inet {TABLE} {{\n\tchain input {{\n\t\ttype filter hook input priority 0; \
         policy accept;\n\t\tudp dport {FILTERED_PORT} counter drop comment \"{COMMENT}\"\n\
         \t}}\n}}\n"
    );
    c.write("/tmp/dropscope-check.nft", ruleset.as_bytes())?;
    c.run(&[
        "ip",
        "netns",
        "exec",
        netns,
        "nft",
        "-f",
        "/tmp/dropscope-check.nft",
    ])?;
    c.run(&[
        "sh",
        "-c",
        "ip netns exec \"$0\" setsid perl -MSocket -e \"$1\" </dev/null >/dev/null 2>&1 &",
        netns,
        &holder(),
    ])?;
    wait_for("the namespace's process to bind its sockets", || {
        let ss = c.stdout(&["ip", "netns", "exec", netns, "ss", "-Hunl"])?;
        let bound = |port: u16| ss.contains(&format!("127.0.0.1:{port} "));
        Ok((bound(FULL_PORT) && bound(SINK_PORT)).then_some(()))
    })
}

/// Waits until the service has read the namespace's counters once after it was made (its
/// first reading is the baseline of its growth), so that the kernel counts every drop sent
/// after this: a packet to the sink at a time until `/metrics` shows the namespace's packets.
/// Fails at once where the history's notes say the service was refused a reading.
pub fn wait_read(c: &Container, netns: &str, inode: &str) -> anyhow::Result<()> {
    let send = format!("printf x > /dev/udp/127.0.0.1/{SINK_PORT}");
    wait_for("the service to read the new namespace's counters", || {
        c.run(&["ip", "netns", "exec", netns, "bash", "-c", &send])?;
        let refused = refusals(&report(c, &["--format", "json"])?)?;
        ensure!(
            refused.is_empty(),
            "the service was refused what it reads:\n{}",
            refused.join("\n")
        );
        let metrics = c.stdout(&["curl", "-sf", "http://127.0.0.1:9818/metrics"])?;
        Ok((netns_packets(&metrics, &[netns, inode]) > 0).then_some(()))
    })
}

/// The datagrams sent after the closed port's: to the rule's port and to the full socket.
pub fn traffic() -> String {
    let datagram = "x".repeat(64);
    format!(
        "for i in $(seq {FILTERED}); do printf x > /dev/udp/127.0.0.1/{FILTERED_PORT}; done; \
         for i in $(seq {FULL}); do printf {datagram} > /dev/udp/127.0.0.1/{FULL_PORT}; done"
    )
}

/// The kernel's notes of a `report --format json` that say a reading was refused (a
/// capability, an address family or a system call the service lacks).
fn refusals(json: &str) -> anyhow::Result<Vec<String>> {
    let v: Value = serde_json::from_str(json).with_context(|| format!("report's JSON: {json}"))?;
    Ok((v["kernel_notes"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        // EPERM, EACCES, EAFNOSUPPORT: what a capability, the system-call filter or the
        // address families refused.
        .filter(|n| {
            ["(os error 1)", "(os error 13)", "(os error 97)"]
                .iter()
                .any(|r| n.contains(r))
        })
        .map(str::to_string)
        .collect())
}

/// The packets of `dropscope_netns_packets_total` for a namespace labelled by any of `labels`
/// (its name, or its inode where no drop has named it yet), 0 if there is no such series.
fn netns_packets(metrics: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("dropscope_netns_packets_total{netns_name=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter(|(label, _)| labels.contains(label))
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The growth of kernel counter `counter` in namespace `inode` in a `report --format json`
/// (0 where it did not grow), failing if the row does not carry the namespace's name.
pub fn counter(json: &str, netns: &str, inode: &str, counter: &str) -> anyhow::Result<u64> {
    let v: Value = serde_json::from_str(json).with_context(|| format!("report's JSON: {json}"))?;
    let mut total = 0;
    for row in v["kernel_counters"].as_array().into_iter().flatten() {
        if row["counter"] != counter || row["netns"].as_u64() != inode.parse().ok() {
            continue;
        }
        ensure!(
            row["netns_name"] == netns,
            "the kernel counter {counter} of namespace {inode} is not named {netns}: {row}"
        );
        total += row["delta"]
            .as_u64()
            .context("a kernel counter without delta")?;
    }
    Ok(total)
}

/// Whether every socket of the namespace's rows has been looked up (its holder found or not).
pub fn looked_up(json: &str, inode: &str) -> anyhow::Result<bool> {
    Ok(rows_in(json, inode)?
        .iter()
        .all(|r| !(r["socket"]["text"].as_str()).is_some_and(|t| t.contains("not looked up yet"))))
}

/// The drops rows of a `report --format json` in namespace `inode`.
fn rows_in(json: &str, inode: &str) -> anyhow::Result<Vec<Value>> {
    let v: Value = serde_json::from_str(json).with_context(|| format!("report's JSON: {json}"))?;
    let rows = v["drops"].as_array().context("no drops in the report")?;
    Ok((rows.iter())
        .filter(|r| r["netns"].as_u64() == inode.parse().ok())
        .cloned()
        .collect())
}

/// What the history says of the namespace over the window of the drops (`drops` of them to
/// the closed port): every row named (the namespace as `ip netns` named it, the interface
/// `lo`), the kernel's counters read there counting the same drops, the rule that dropped
/// the filtered datagrams and the process holding the full socket. Returns what it found, in
/// a line.
pub fn check(json: &str, netns: &str, inode: &str, drops: u64) -> anyhow::Result<String> {
    let rows = rows_in(json, inode)?;
    ensure!(!rows.is_empty(), "no row of namespace {inode}:\n{json}");
    for r in &rows {
        ensure!(
            r["netns_name"] == netns && r["device"] == "lo",
            "a row of namespace {inode} is not named {netns} on lo (the service names no \
             namespace or interface): {r}"
        );
    }
    let count = |reason: &str| -> u64 {
        (rows.iter())
            .filter(|r| r["reason"] == reason)
            .filter_map(|r| r["count"].as_u64())
            .sum()
    };
    let no_ports = counter(json, netns, inode, "Udp:NoPorts")?;
    ensure!(
        count("NO_SOCKET") == drops && no_ports == drops,
        "{} NO_SOCKET drops and Udp:NoPorts grew by {no_ports} in namespace {inode}, not \
         {drops} each (the service read none of its counters)",
        count("NO_SOCKET")
    );
    let filtered = count("NETFILTER_DROP");
    ensure!(
        filtered == FILTERED,
        "{filtered} NETFILTER_DROP drops, not {FILTERED}"
    );
    for r in rows.iter().filter(|r| r["reason"] == "NETFILTER_DROP") {
        let culprit = &r["culprit"];
        let rule = (culprit["who"].as_array().into_iter().flatten())
            .find(|w| w["kind"] == "rule" && w["table"] == TABLE && w["comment"] == COMMENT);
        ensure!(
            culprit["certainty"] == "exact" && rule.is_some(),
            "the NETFILTER_DROP row does not name the rule in {TABLE} for sure (the service \
             read no ruleset): {r}"
        );
    }
    let full = count("SOCKET_RCVBUFF");
    let rcvbuf = counter(json, netns, inode, "Udp:RcvbufErrors")?;
    ensure!(
        (1..=FULL).contains(&full) && rcvbuf == full,
        "{full} SOCKET_RCVBUFF drops and Udp:RcvbufErrors grew by {rcvbuf}: not the same, \
         or not 1 to {FULL}"
    );
    let mut holders = Vec::new();
    for r in rows.iter().filter(|r| r["reason"] == "SOCKET_RCVBUFF") {
        let mut who = r["culprit"]["who"].as_array().into_iter().flatten();
        let held = who.find_map(|w| {
            let perl = (w["processes"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .find(|p| p.starts_with("perl["));
            (w["kind"] == "socket" && w["local"] == format!("127.0.0.1:{FULL_PORT}"))
                .then_some(perl)?
        });
        let Some(held) = held else {
            bail!(
                "the SOCKET_RCVBUFF row does not name the socket 127.0.0.1:{FULL_PORT} and \
                 its process perl (the service found no holder): {r}"
            );
        };
        holders.push(held.to_string());
    }
    Ok(format!(
        "rows named {netns} on lo; NO_SOCKET {drops} and Udp:NoPorts {no_ports}; \
         NETFILTER_DROP {filtered} by the rule in table {TABLE}; SOCKET_RCVBUFF {full} and \
         Udp:RcvbufErrors {rcvbuf}, the socket held by {}",
        holders.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The namespace's rows, counters and culprits as the check's history gave them.
    fn report(name: &str, device: &str, no_ports: u64, certainty: &str, holder: &str) -> String {
        format!(
            r#"{{"total":1138,"drops":[
            {{"reason":"NO_SOCKET","netns":4026532253,"netns_name":"{name}","device":"{device}",
              "count":1000}},
            {{"reason":"NETFILTER_DROP","netns":4026532253,"netns_name":"{name}",
              "device":"{device}","count":100,"culprit":{{"certainty":"{certainty}","who":[
              {{"kind":"rule","family":"inet","table":"{TABLE}","chain":"input",
                "comment":"{COMMENT}","counted":100}}]}}}},
            {{"reason":"SOCKET_RCVBUFF","netns":4026532253,"netns_name":"{name}",
              "device":"{device}","count":38,"socket":{{"text":"socket: {holder}"}},
              "culprit":{{"certainty":"exact","who":[{{"kind":"socket",
              "local":"127.0.0.1:11","processes":["{holder}"]}}]}}}},
            {{"reason":"NOT_SPECIFIED","netns":4026531833,"count":1}}],
            "kernel_counters":[
            {{"netns":4026532253,"counter":"Udp:NoPorts","delta":{no_ports},
              "netns_name":"{name}"}},
            {{"netns":4026532253,"counter":"Udp:RcvbufErrors","delta":38,
              "netns_name":"{name}"}}],
            "kernel_notes":[]}}"#
        )
    }

    #[test]
    fn the_namespace_must_be_named_counted_by_the_kernel_and_its_culprits_found() {
        let ok = report("drops", "lo", 1000, "exact", "perl[212]");
        let found = check(&ok, "drops", "4026532253", 1000).expect("the check's own history");
        assert!(
            found.contains(
                "SOCKET_RCVBUFF 38 and Udp:RcvbufErrors 38, the socket held by perl[212]"
            ),
            "{found}"
        );
        assert!(looked_up(&ok, "4026532253").expect("json"));
        // What the unit without CAP_SYS_ADMIN gave: no name, the interface's index.
        let unnamed = ok.replace(r#""netns_name":"drops""#, r#""netns_name":null"#);
        assert!(check(&unnamed, "drops", "4026532253", 1000).is_err());
        let by_index = report("drops", "if1", 1000, "exact", "perl[212]");
        assert!(check(&by_index, "drops", "4026532253", 1000).is_err());
        let uncounted = report("drops", "lo", 990, "exact", "perl[212]");
        assert!(check(&uncounted, "drops", "4026532253", 1000).is_err());
        let no_ruleset = report("drops", "lo", 1000, "unknown", "perl[212]");
        assert!(check(&no_ruleset, "drops", "4026532253", 1000).is_err());
        let no_holder = report("drops", "lo", 1000, "exact", "not looked up yet");
        assert!(check(&no_holder, "drops", "4026532253", 1000).is_err());
        assert!(!looked_up(&no_holder, "4026532253").expect("json"));
        assert!(check(&ok, "drops", "4026532253", 999).is_err());
        assert!(check(&ok, "drops", "4026532999", 1000).is_err());
    }

    #[test]
    fn kernel_counters_are_summed_per_namespace_and_must_carry_its_name() {
        let ok = report("drops", "lo", 1000, "exact", "perl[212]");
        assert_eq!(
            counter(&ok, "drops", "4026532253", "Udp:NoPorts").expect("json"),
            1000
        );
        assert_eq!(
            counter(&ok, "drops", "4026531833", "Udp:NoPorts").expect("json"),
            0
        );
        let unnamed = ok.replace(r#""netns_name":"drops"}"#, r#""netns_name":null}"#);
        assert!(counter(&unnamed, "drops", "4026532253", "Udp:NoPorts").is_err());
    }

    #[test]
    fn refused_readings_are_found_in_the_notes() {
        let notes = r#"{"kernel_notes":["netns 4026532182: entering /proc/self/ns/net: Operation not permitted (os error 1)",
            "netns 9: links not read: Address family not supported by protocol (os error 97)",
            "netns 9: ethtool: Operation not supported (os error 95)"]}"#;
        assert_eq!(refusals(notes).expect("json").len(), 2);
        assert!(refusals(r#"{"kernel_notes":[]}"#).expect("json").is_empty());
        assert!(refusals("{}").expect("json").is_empty());
    }

    #[test]
    fn a_namespace_s_packets_are_read_by_its_name_or_inode() {
        let m = "dropscope_netns_packets_total{netns_name=\"host\"} 340\n\
                 dropscope_netns_packets_total{netns_name=\"4026532813\"} 18\n\
                 dropscope_netns_packets_total 7\n";
        assert_eq!(netns_packets(m, &["drops", "4026532813"]), 18);
        assert_eq!(netns_packets(m, &["drops", "4026532253"]), 0);
        assert_eq!(netns_packets(m, &["host"]), 340);
    }

    #[test]
    fn the_traffic_reaches_the_rule_s_port_and_the_full_socket() {
        let t = traffic();
        assert!(t.contains(&format!(
            "seq {FILTERED}); do printf x > /dev/udp/127.0.0.1/10;"
        )));
        assert!(t.contains(&format!(
            "printf {} > /dev/udp/127.0.0.1/11",
            "x".repeat(64)
        )));
        assert!(holder().contains("sockaddr_in(11, INADDR_LOOPBACK)"));
        assert!(holder().contains("sockaddr_in(12, INADDR_LOOPBACK)"));
    }
}
