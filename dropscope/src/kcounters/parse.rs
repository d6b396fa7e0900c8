//! Parsers of the kernel's counter files: `/proc/net/snmp` and `/proc/net/netstat` (pairs of
//! header and value lines), `/proc/net/snmp6` (a name and a value per line),
//! `/proc/net/softnet_stat` (hex columns per CPU) and `/proc/net/dev`.

use crate::vocab::counter::Counter;
pub use crate::vocab::counter::Counters;

/// Adds the counters of an SNMP-style file that `keep` wants: `Group: Name1 Name2` followed
/// by `Group: v1 v2`. Malformed lines are skipped (the file is the kernel's; nothing here can
/// fail). A name is built once in a reused buffer and copied only when kept: of the few hundred
/// counters of `snmp` and `netstat`, a reading keeps a few dozen.
pub fn snmp(text: &str, out: &mut Counters, keep: fn(&str) -> bool) {
    let mut name = String::new();
    let mut lines = text.lines();
    while let (Some(head), Some(vals)) = (lines.next(), lines.next()) {
        let (Some((g1, names)), Some((g2, values))) = (head.split_once(':'), vals.split_once(':'))
        else {
            continue;
        };
        if g1 != g2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            // Some values are signed (Tcp:MaxConn is -1); they are not drop counters.
            if keep(joined(&mut name, g1, n))
                && let Ok(v) = v.parse::<u64>()
            {
                out.insert(name.clone(), v);
            }
        }
    }
}

/// `group:name` in `buf` (reused: one allocation for all the names of a file).
fn joined<'a>(buf: &'a mut String, group: &str, name: &str) -> &'a str {
    buf.clear();
    buf.push_str(group);
    buf.push(':');
    buf.push_str(name);
    buf
}

/// Adds the counters of `/proc/net/snmp6` (`Udp6NoPorts 7` per line) as `Udp6:NoPorts`, those
/// `keep` wants (see [`snmp`]).
pub fn snmp6(text: &str, out: &mut Counters, keep: fn(&str) -> bool) {
    let mut key = String::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(name), Some(v)) = (f.next(), f.next()) else {
            continue;
        };
        // The group ends at its "6": Ip6, Icmp6, Udp6, UdpLite6.
        let Some(at) = name.find('6') else { continue };
        let (group, rest) = name.split_at(at + 1);
        if rest.is_empty() {
            continue;
        }
        if keep(joined(&mut key, group, rest))
            && let Ok(v) = v.parse::<u64>()
        {
            out.insert(key.clone(), v);
        }
    }
}

/// The most CPUs whose softnet columns are kept one by one.
pub const MAX_SOFTNET_CPUS: usize = 1024;

/// Adds, per CPU, `Softnet:cpu<N>:dropped`, `time_squeeze` and `flow_limit` (columns 2, 3 and
/// 11 of `/proc/net/softnet_stat`; the CPU is the 13th column where the kernel writes it, else
/// the line's place). Per-CPU counters at zero are left out (a missing counter reads as zero).
/// `Softnet:Dropped`, the machine's backlog drops, is the sum of the CPUs' growth (see
/// [`super::KernelCounters::reading`]: each CPU's 32-bit column wraps on its own, and a CPU
/// taken offline leaves no line); only beyond [`MAX_SOFTNET_CPUS`] is it the sum read here.
pub fn softnet(text: &str, out: &mut Counters) {
    let mut dropped = 0u64;
    let mut lines = 0;
    for (i, line) in text.lines().enumerate() {
        lines = i + 1;
        let cols: Vec<u64> = line
            .split_whitespace()
            .map_while(|v| u64::from_str_radix(v, 16).ok())
            .collect();
        let Some(&d) = cols.get(1) else { continue };
        dropped = dropped.wrapping_add(d);
        if i >= MAX_SOFTNET_CPUS {
            continue;
        }
        let cpu = cols.get(12).copied().unwrap_or(i as u64);
        for (stat, col) in [("dropped", 1), ("time_squeeze", 2), ("flow_limit", 10)] {
            if let Some(&v) = cols.get(col).filter(|v| **v > 0) {
                let cpu = cpu.to_string();
                out.insert(Counter::Softnet { cpu: &cpu, stat }.to_string(), v);
            }
        }
    }
    if lines > MAX_SOFTNET_CPUS {
        out.insert(Counter::SoftnetDropped.to_string(), dropped);
    }
}

/// Adds `Dev:<name>:RxDrop` and `Dev:<name>:TxDrop` from `/proc/net/dev` (its 4th and 12th
/// numbers: the receive and transmit drop columns), and `RxPackets` / `TxPackets` (its 2nd and
/// 10th: packets received and sent). Names are escaped (`\u{1b}`, `\u{34f}`: see
/// [`crate::sanitize::kernel_name`]).
pub fn dev(text: &str, out: &mut Counters) {
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        // Interface names may hold control and invisible characters: escaped for every sink.
        let name = crate::sanitize::kernel_name(name.trim()).into_owned();
        let nums: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        if name.is_empty() || nums.len() < 12 {
            continue;
        }
        for (stat, i) in [
            ("RxPackets", 1),
            ("RxDrop", 3),
            ("TxPackets", 9),
            ("TxDrop", 11),
        ] {
            out.insert(Counter::Dev { dev: &name, stat }.to_string(), nums[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_pairs_become_group_name() {
        let mut c = Counters::new();
        snmp(
            "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 100\n\
             Tcp: RtoAlgorithm MaxConn InCsumErrors\nTcp: 1 -1 3\n\
             Udp: InDatagrams NoPorts\nUdp: 10 7\n",
            &mut c,
            |_| true,
        );
        assert_eq!(c["Ip:InReceives"], 100);
        assert_eq!(c["Udp:NoPorts"], 7);
        assert_eq!(c["Tcp:InCsumErrors"], 3);
        assert!(!c.contains_key("Tcp:MaxConn"));
    }

    #[test]
    fn mismatched_or_odd_lines_are_skipped() {
        let mut c = Counters::new();
        snmp(
            "TcpExt: A B\nIpExt: 1 2\nTcpExt: ListenDrops\n",
            &mut c,
            |_| true,
        );
        assert!(c.is_empty(), "{c:?}");
    }

    #[test]
    fn snmp6_names_gain_a_colon_after_their_group() {
        let mut c = Counters::new();
        snmp6(
            "Ip6InReceives \t12\nUdp6NoPorts   \t7\nUdpLite6NoPorts 1\nIcmp6InMsgs 3\nIcmp6OutType133 4\nbad\n",
            &mut c,
            |_| true,
        );
        assert_eq!(c["Udp6:NoPorts"], 7);
        assert_eq!(c["UdpLite6:NoPorts"], 1);
        assert_eq!(c["Ip6:InReceives"], 12);
        assert_eq!(c["Icmp6:OutType133"], 4);
        assert_eq!(c.len(), 5);
    }

    #[test]
    fn only_wanted_counters_are_added() {
        let mut c = Counters::new();
        snmp("Udp: InDatagrams NoPorts\nUdp: 10 7\n", &mut c, |n| {
            n == "Udp:NoPorts"
        });
        snmp6("Udp6NoPorts 3\nUdp6InDatagrams 9\n", &mut c, |n| {
            n.ends_with("NoPorts")
        });
        assert_eq!(
            c.into_iter().collect::<Vec<_>>(),
            [
                ("Udp6:NoPorts".to_string(), 3),
                ("Udp:NoPorts".to_string(), 7)
            ]
        );
    }

    #[test]
    fn softnet_reads_each_cpus_columns() {
        let mut c = Counters::new();
        softnet(
            "0000a000 00000002 00000000 00000000\n0000b000 00000010 00000001 00000000\n",
            &mut c,
        );
        assert_eq!(c["Softnet:cpu0:dropped"], 2);
        assert_eq!(c["Softnet:cpu1:dropped"], 16);
        assert_eq!(c["Softnet:cpu1:time_squeeze"], 1);
        assert_eq!(c.len(), 3, "the sum is made of the CPUs' growth: {c:?}");
        // The kernel's own CPU column (offline CPUs leave no line).
        let mut c = Counters::new();
        let line = |cpu: u32| {
            format!("00000001 00000003 00000004 0 0 0 0 0 0 0 00000005 0 {cpu:08x} 0 0\n")
        };
        softnet(&(line(0) + &line(3)), &mut c);
        assert_eq!(c["Softnet:cpu3:dropped"], 3);
        assert_eq!(c["Softnet:cpu3:time_squeeze"], 4);
        assert_eq!(c["Softnet:cpu3:flow_limit"], 5);
        // Beyond the CPUs kept one by one, the sum as read.
        let mut c = Counters::new();
        softnet(&line(1).repeat(MAX_SOFTNET_CPUS + 1), &mut c);
        assert_eq!(c["Softnet:Dropped"], 3 * (MAX_SOFTNET_CPUS as u64 + 1));
    }

    #[test]
    fn dev_takes_the_drop_columns() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n    lo:  100 2 0 5 0 0 0 0  100 2 0 0 0 0 0 0\n  eth0: 9000 90 1 7 0 0 0 3 8000 80 0 4 0 0 0 0\n";
        let mut c = Counters::new();
        dev(text, &mut c);
        assert_eq!(c["Dev:lo:RxDrop"], 5);
        assert_eq!(c["Dev:eth0:RxDrop"], 7);
        assert_eq!(c["Dev:eth0:TxDrop"], 4);
        let mut c = Counters::new();
        dev("a\nb\n x\x1b[2J: 1 2 3 4 5 6 7 8 9 10 11 12\n", &mut c);
        assert!(c.contains_key("Dev:x\\u{1b}[2J:RxDrop"), "{c:?}");
    }

    #[test]
    fn dev_names_are_escaped_with_the_terminals_rule() {
        let mut c = Counters::new();
        dev(
            "a\nb\n eth0\u{34f}: 1 2 3 4 5 6 7 8 9 10 11 12\n a\\b: 1 2 3 4 5 6 7 8 9 10 11 12\n",
            &mut c,
        );
        assert!(c.contains_key("Dev:eth0\\u{34f}:RxDrop"), "{c:?}");
        // A backslash is escaped too: no name can pass for another's escape.
        assert!(c.contains_key("Dev:a\\\\b:RxDrop"), "{c:?}");
        assert!(
            c.keys().all(|k| crate::sanitize::terminal(k) == k.as_str()),
            "{c:?}"
        );
    }
}
