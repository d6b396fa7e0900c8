//! `report --pcap` and `record --pcap`: the sampled packets of real drops land in a pcapng file that tshark reads,
//! with the right addresses and ports, at most 8 per key, owner-only. Needs root and tshark.
use std::{os::unix::fs::PermissionsExt as _, process::Command};

use dropscope_tests::{Counting, Netns, dropscope_bin, root_test, run};

#[test]
fn report_writes_the_sampled_packets_as_pcapng() {
    let _serial = root_test();
    let a = Netns::new("pcap-a");
    let b = Netns::new("pcap-b");
    let va = format!("pa{}", std::process::id() % 100_000);
    run(Command::new("ip").args([
        "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", "pb", "netns",
        &b.name,
    ]));
    for ns in [&a, &b] {
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
    }
    a.exec(&["ip", "addr", "add", "10.78.0.1/24", "dev", &va]);
    b.exec(&["ip", "addr", "add", "10.78.0.2/24", "dev", "pb"]);
    a.exec(&["ip", "link", "set", &va, "up"]);
    b.exec(&["ip", "link", "set", "pb", "up"]);

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("drops.pcapng");
    let file_s = file.to_str().expect("utf-8 path");
    let by = "reason,location,netns,device,protocol,port";
    // Two keys in B: 20 datagrams to closed port 9, 5 to closed port 7.
    let traffic = dropscope_tests::traffic_bin();
    let traffic = traffic.to_str().expect("utf-8");
    // Pinned to one CPU: a key's packets are sampled on the CPU that counted its first drop.
    let drops = || {
        a.exec(&[
            "taskset",
            "-c",
            "0",
            traffic,
            "udp-to",
            "10.78.0.2",
            "9",
            "20",
        ]);
        a.exec(&[
            "taskset",
            "-c",
            "0",
            traffic,
            "udp-to",
            "10.78.0.2",
            "7",
            "5",
        ]);
    };
    let counting = Counting::start(&[
        "report", "--format", "json", "--by", by, "--netns", &b.name, "--pcap", file_s,
    ]);
    drops();
    let report: serde_json::Value =
        serde_json::from_str(&counting.interrupt()).expect("JSON report");
    assert_eq!(report["total"].as_u64(), Some(25), "{report:#}");
    check_pcap(&file, &b.name);

    // The same drops again, recorded.
    let recorded = dir.path().join("rec.pcapng");
    let rec = dir.path().join("rec.ds");
    let recording = Counting::start(&[
        "record",
        "-o",
        rec.to_str().expect("utf-8 path"),
        "--by",
        by,
        "--netns",
        &b.name,
        "--pcap",
        recorded.to_str().expect("utf-8 path"),
    ]);
    drops();
    recording.interrupt();
    check_pcap(&recorded, &b.name);

    // An existing file is not replaced without --force (checked before counting).
    let before = std::fs::read(&file).expect("read pcap");
    let again = Command::new(dropscope_bin())
        .args(["report", "--duration", "1", "--pcap", file_s])
        .output()
        .expect("run dropscope");
    assert!(!again.status.success(), "replaced an existing file");
    assert_eq!(std::fs::read(&file).expect("still there"), before);
}

/// The file holds the 13 sampled packets from A to B (8 of the 20 to port 9, all 5 to port 7)
/// and is owner-only; every packet is on B's interface `pb`, described with namespace `netns`,
/// with a comment naming its drop (reason, location, namespace), in nanoseconds.
fn check_pcap(file: &std::path::Path, netns: &str) {
    let file_s = file.to_str().expect("utf-8 path");
    let mode = std::fs::metadata(file)
        .expect("pcap written")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "owner-only");
    let out = run(Command::new("tshark").args([
        "-r",
        file_s,
        "-T",
        "fields",
        "-e",
        "ip.src",
        "-e",
        "ip.dst",
        "-e",
        "udp.dstport",
        "-e",
        "frame.interface_name",
        "-e",
        "frame.interface_description",
        "-e",
        "frame.comment",
        "-e",
        "frame.time_epoch",
    ]));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let text = format!("{text}(in {file_s})");
    let packets: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.contains('\t'))
        .map(|l| l.split('\t').collect())
        .collect();
    for p in &packets {
        assert_eq!(p[..2], ["10.78.0.1", "10.78.0.2"], "{text}");
        assert_eq!(p[3], "pb", "the device the packet was dropped on: {text}");
        assert!(
            p[4].starts_with("pb (ifindex ") && p[4].contains(&format!(" in netns {netns} (")),
            "the interface names its namespace: {text}"
        );
        // NO_SOCKET at __udp4_lib_rcv+0x..., netns NAME (inode), device pb, udp port 9
        assert!(
            p[5].starts_with("NO_SOCKET at __udp4_lib_rcv+0x")
                && p[5].contains(&format!(", netns {netns} ("))
                && p[5].ends_with(&format!(", device pb, udp port {}", p[2])),
            "the comment names the drop: {text}"
        );
        // Nanosecond resolution (the samples' milliseconds).
        let decimals = p[6].split('.').nth(1).unwrap_or_default();
        assert_eq!(decimals.len(), 9, "{text}");
        assert!(decimals.ends_with("000000"), "{text}");
    }
    let to = |port: &str| packets.iter().filter(|p| p[2] == port).count();
    assert_eq!(to("9"), 8, "at most 8 per key, and 20 were dropped: {text}");
    assert_eq!(to("7"), 5, "all 5 of the smaller key: {text}");
    assert_eq!(packets.len(), 13, "{text}");
}

/// TCP segments whose payload lies in page fragments (loopback hands them on as the sender
/// built them), dropped by a firewall rule: a sample holds the packet's linear bytes only. Every
/// captured byte past the IP and TCP headers is payload (`A`), never the head's slack or the
/// kernel's `skb_shared_info` (page pointers), in the pcapng and in the recording's samples.
#[test]
fn samples_of_paged_packets_hold_only_packet_bytes() {
    let _serial = root_test();
    let ns = Netns::new("pcap-paged");
    let port = "5599";
    ns.exec(&["nft", "add", "table", "inet", "dspaged"]);
    ns.exec(&[
        "nft",
        "add chain inet dspaged input { type filter hook input priority 0 ; }",
    ]);
    ns.exec(&[
        "nft",
        &format!("add rule inet dspaged input tcp dport {port} meta length > 1000 drop"),
    ]);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("paged.pcapng");
    let rec = dir.path().join("paged.dsrec");
    let recording = Counting::start(&[
        "record",
        "-o",
        rec.to_str().expect("utf-8 path"),
        "--by",
        "reason,location,netns,protocol,port",
        "--netns",
        &ns.name,
        "--pcap",
        file.to_str().expect("utf-8 path"),
    ]);
    ns.traffic(&["tcp-payload", port, "8"]);
    recording.interrupt();

    let packets = pcapng_packets(&std::fs::read(&file).expect("pcap written"));
    assert!(!packets.is_empty(), "no packet sampled");
    let mut payload_bytes = 0;
    for p in &packets {
        assert!(p.len() >= 40, "shorter than IPv4 + TCP headers: {p:02x?}");
        assert_eq!(p[0] >> 4, 4, "IPv4: {p:02x?}");
        assert_eq!(p[9], 6, "TCP: {p:02x?}");
        let ihl = usize::from(p[0] & 0xf) * 4;
        assert_eq!(
            u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]),
            5599,
            "{p:02x?}"
        );
        let thl = usize::from(p[ihl + 12] >> 4) * 4;
        let payload = p.get(ihl + thl..).unwrap_or_default();
        assert!(
            payload.iter().all(|&b| b == b'A'),
            "bytes past the TCP header that are not the packet's payload: {payload:02x?}"
        );
        payload_bytes += payload.len();
    }
    eprintln!(
        "{} packets sampled, {payload_bytes} payload bytes captured",
        packets.len()
    );

    // The recording's samples are the same bytes: its replay writes the same pcapng.
    let replayed = dir.path().join("replayed.pcapng");
    run(Command::new(dropscope_bin()).args([
        "report",
        "--input",
        rec.to_str().expect("utf-8 path"),
        "--pcap",
        replayed.to_str().expect("utf-8 path"),
    ]));
    let again = pcapng_packets(&std::fs::read(&replayed).expect("pcap from the recording"));
    assert_eq!(
        again, packets,
        "the recording holds other bytes than the live pcapng"
    );
}

/// The packet data of every Enhanced Packet Block of a little-endian pcapng file.
fn pcapng_packets(file: &[u8]) -> Vec<Vec<u8>> {
    let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().expect("4 bytes"));
    let mut packets = Vec::new();
    let mut at = 0;
    while at + 12 <= file.len() {
        let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
        assert!(
            len >= 12 && at + len <= file.len(),
            "a malformed block at {at}"
        );
        if kind == 6 {
            let caplen = u32_at(at + 20) as usize;
            packets.push(file[at + 28..at + 28 + caplen].to_vec());
        }
        at += len;
    }
    packets
}
