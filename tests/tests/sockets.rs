//! Who dropped it, sockets: a UDP socket with the smallest receive buffer that is never read
//! while datagrams arrive drops them (SOCKET_RCVBUFF); dropscope counts them exactly (against
//! the namespace's own `Udp:RcvbufErrors`) on a row of that socket, named by the process
//! holding it, its protocol, local address and buffer limit. A process holding thousands of
//! sockets is looked through only so far, and says so, while a socket of another process is
//! still named. Where the kernel's `kfree_skb` passes no receiving socket (`rx_sk`, 6.11+),
//! the drops are still counted exactly, on rows that name no socket. Needs root.
use std::time::Duration;

use dropscope_tests::{
    Counting, Netns,
    holder::{Holder, rcvbuf_errors},
    root_test,
    wait::wait_report,
};
use serde_json::Value;

/// Whether the running kernel's `kfree_skb` passes the receiving socket (`rx_sk`, 6.11+), as
/// its tracepoint's format says. Before, a UDP receive drop comes before the datagram is
/// charged to the socket, so no socket is known to name.
fn kernel_passes_rx_sk() -> bool {
    use dropscope::probe::tracefs;
    let _mounted = tracefs::TracefsMount::ensure().expect("tracefs");
    let format = tracefs::kfree_skb_format().expect("the kfree_skb tracepoint's format");
    tracefs::field_offset(&format, "rx_sk").is_some()
}

/// The `SOCKET_RCVBUFF` rows of namespace `ns`: where the kernel passes no `rx_sk`, none may
/// name a socket (nothing tells which socket it was), and their counts are returned summed.
fn unnamed_rcvbuf_drops(report: &Value, ns: &Netns) -> u64 {
    let rows: Vec<&Value> = (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["reason"] == "SOCKET_RCVBUFF" && d["netns_name"] == ns.name.as_str())
        .collect();
    assert!(
        rows.iter().all(|d| d.get("socket").is_none()),
        "no rx_sk, yet a socket named: {rows:#?}"
    );
    rows.iter().filter_map(|d| d["count"].as_u64()).sum()
}

/// The report's rows of socket `inode`.
fn rows_of(report: &Value, inode: u64) -> Vec<&Value> {
    (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["socket"]["inode"].as_u64() == Some(inode))
        .collect()
}

/// Whether a report has the socket `inode`'s row naming process `pid` as its holder.
fn holds(report: &Value, inode: u64, pid: u64) -> bool {
    rows_of(report, inode)
        .iter()
        .any(|d| d["socket"]["holders"][0]["pid"].as_u64() == Some(pid))
}

/// The last (final) report of `report --every --format json`'s lines.
fn last_report(out: &str) -> Value {
    let last = (out.lines().rev())
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report in {out}"));
    serde_json::from_str(last).expect("JSON report")
}

#[test]
fn a_udp_socket_that_never_reads_is_named_by_its_process_and_port() {
    named_by_its_process_and_port(&[]);
}

/// The same through the classic tracepoint (`--probe tracepoint`), which passes the receiving
/// socket as its `rx_sk` field (6.11+): read at the field's offset from the tracefs format.
#[test]
fn the_classic_tracepoint_names_the_receiving_socket_too() {
    named_by_its_process_and_port(&["--probe", "tracepoint"]);
}

/// A socket that never reads, counted with `probe` (extra arguments of `report`): its drops
/// exactly on one row naming it, where the kernel passes the receiving socket.
fn named_by_its_process_and_port(probe: &[&str]) {
    let _serial = root_test();
    let rx_sk = kernel_passes_rx_sk();
    let ns = Netns::new("sock");
    // A report a second: the socket's naming is waited for in them.
    let mut args = vec!["report", "--format", "json", "--every", "1"];
    args.extend_from_slice(probe);
    let mut report = Counting::start(&args);
    let lines = report.stdout_lines();
    let mut holder = Holder::start(&ns, 10, 0);
    let dropped = holder.dropped();
    assert!(dropped > 0, "a socket of buffer {} took all", holder.rcvbuf);
    // Named beside the counting, within a few polls, while the process holds it.
    if rx_sk {
        let pid = u64::from(holder.child.id());
        wait_report(&lines, "the socket named by its process", |r| {
            holds(r, holder.inode, pid)
        });
    }
    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let report = last_report(&out);
    let counted = rcvbuf_errors(&ns);
    assert_eq!(dropped, counted, "the kernel's Udp:RcvbufErrors");
    if !rx_sk {
        // Counted exactly all the same, on no socket's row.
        assert_eq!(unnamed_rcvbuf_drops(&report, &ns), dropped, "{report:#}");
        return;
    }

    let rows = rows_of(&report, holder.inode);
    assert_eq!(rows.len(), 1, "one row for the socket: {rows:#?}");
    let row = rows[0];
    assert_eq!(row["reason"], "SOCKET_RCVBUFF", "{row:#}");
    assert_eq!(row["count"].as_u64(), Some(dropped), "{row:#}");
    let s = &row["socket"];
    let pid = holder.child.id();
    assert_eq!(s["via"], "receiving", "{s:#}");
    assert_eq!(s["sure"], "exact", "{s:#}");
    assert_eq!(
        s["holders"][0]["pid"].as_u64(),
        Some(u64::from(pid)),
        "{s:#}"
    );
    assert_eq!(s["holders"][0]["comm"], "traffic", "{s:#}");
    assert_eq!(s["protocol"], "udp", "{s:#}");
    assert_eq!(s["local"], format!("127.0.0.1:{}", holder.port), "{s:#}");
    assert_eq!(s["rcvbuf"].as_u64(), Some(holder.rcvbuf), "{s:#}");
    assert_eq!(
        s["text"],
        format!(
            "socket: traffic[{pid}] udp 127.0.0.1:{} rcvbuf {}",
            holder.port, holder.rcvbuf
        )
    );
}

/// Sockets one process opens before its dropping socket: past the scan's bound per process
/// (16,384 descriptors).
const CROWD: usize = 17_000;

#[test]
fn a_process_with_thousands_of_sockets_is_bounded_said_so_and_crowds_out_no_other() {
    let _serial = root_test();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit we own.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0, "getrlimit");
    assert!(
        limit.rlim_max as usize > CROWD + 64,
        "this test opens {CROWD} sockets in one process: raise the hard RLIMIT_NOFILE \
         (now {})",
        limit.rlim_max
    );
    let ns = Netns::new("sockcrowd");
    // A report a second: the sockets' lookups are waited for in them.
    let mut report = Counting::start(&["report", "--format", "json", "--every", "1"]);
    let lines = report.stdout_lines();
    let mut crowded = Holder::start(&ns, 10, CROWD);
    let mut plain = Holder::start(&ns, 10, 0);
    let dropped = (crowded.dropped(), plain.dropped());
    if kernel_passes_rx_sk() {
        let pid = u64::from(plain.child.id());
        wait_report(&lines, "both sockets looked up", |r| {
            holds(r, plain.inode, pid)
                && rows_of(r, crowded.inode)
                    .iter()
                    .any(|d| d["socket"]["sure"] == "unknown")
        });
    }
    // Never a hang: the report ends when asked, its bounded lookups or not.
    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let report = last_report(&out);
    assert_eq!(dropped.0 + dropped.1, rcvbuf_errors(&ns));

    let rows = rows_of(&report, crowded.inode);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        rows[0]["count"].as_u64(),
        Some(dropped.0),
        "exact all the same"
    );
    let s = &rows[0]["socket"];
    assert_eq!(s["sure"], "unknown", "{s:#}");
    let why = s["why"].as_str().expect("why");
    assert!(
        why.contains("more than 16384 descriptors")
            && why.contains(&crowded.child.id().to_string()),
        "{why}"
    );
    assert!(
        s["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("socket: unknown ("))
    );

    let rows = rows_of(&report, plain.inode);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["count"].as_u64(), Some(dropped.1));
    let s = &rows[0]["socket"];
    assert_eq!(s["sure"], "exact", "{s:#}");
    assert_eq!(
        s["holders"][0]["pid"].as_u64(),
        Some(u64::from(plain.child.id()))
    );
}

/// Sockets made in bulk take at most a quarter of the keyed map: with `--max-keys 64`, 40
/// short-lived sockets that each drop are keyed up to their share, the rest counted together on
/// a row of their own; nothing overflows, and every drop is counted.
#[test]
fn sockets_made_in_bulk_take_at_most_their_share_of_the_keys() {
    let _serial = root_test();
    let rx_sk = kernel_passes_rx_sk();
    let ns = Netns::new("sockbulk");
    let report = Counting::start(&["report", "--format", "json", "--max-keys", "64"]);
    let dropped: u64 = (0..40)
        .map(|_| {
            ns.traffic(&["rcvbuf", "5"])
                .parse::<u64>()
                .expect("a count")
        })
        .sum();
    std::thread::sleep(Duration::from_secs(2));
    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let report: Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(dropped, rcvbuf_errors(&ns), "the kernel's Udp:RcvbufErrors");
    assert_eq!(report["overflow"].as_u64(), Some(0), "no key crowded out");

    let rows: Vec<&Value> = (report["drops"].as_array().expect("drops").iter())
        .filter(|d| d["reason"] == "SOCKET_RCVBUFF")
        .collect();
    let counted: u64 = rows.iter().filter_map(|d| d["count"].as_u64()).sum();
    assert_eq!(counted, dropped, "every drop counted: {rows:#?}");
    if !rx_sk {
        // No socket is keyed, so none takes a share.
        assert_eq!(unnamed_rcvbuf_drops(&report, &ns), dropped, "{report:#}");
        return;
    }
    let ncpus = aya::util::nr_cpus().expect("CPUs") as u32;
    let share = dropscope_common::socket_keys_per_cpu(64, ncpus) * ncpus;
    let keyed = (rows.iter())
        .filter(|d| {
            let inode = d["socket"]["inode"].as_u64();
            inode.is_some_and(|i| i != 0 && i != u64::from(u32::MAX))
        })
        .count();
    assert!(
        keyed as u32 <= share,
        "{keyed} sockets keyed, share {share}"
    );
    let beyond: Vec<&&Value> = (rows.iter())
        .filter(|d| d["socket"]["inode"].as_u64() == Some(u64::from(u32::MAX)))
        .collect();
    assert!(
        !beyond.is_empty(),
        "40 sockets, a share of {share}: {rows:#?}"
    );
    for d in beyond {
        let why = d["socket"]["why"].as_str().expect("why");
        assert!(why.contains("beyond the quarter of the keyed map"), "{why}");
    }
}
