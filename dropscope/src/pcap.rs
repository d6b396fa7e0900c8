//! Sampled packets as a pcapng file (`--pcap`), each tied to its drop: one raw-IP interface per
//! (namespace, device) of the keys, named after them, and one enhanced packet block per sampled
//! packet (its first bytes from the network header on) whose comment names the drop's reason,
//! location and namespace. Wireshark and tshark read it.
//!
//! Timestamps are in nanoseconds (`if_tsresol` 9). The samples carry milliseconds since the
//! Unix epoch, so every timestamp is a whole millisecond (`ms × 10⁶` ns).
use std::{
    collections::BTreeMap,
    io::{self, Write},
    sync::Arc,
};

use crate::{
    model::{Attribution, DropKey, KeySamples, Sample},
    sanitize,
};

/// `LINKTYPE_RAW`: packets begin with an IPv4 or IPv6 header.
const LINKTYPE_RAW: u16 = 101;
/// Bytes kept per packet (the probe keeps at most 128).
const SNAPLEN: u32 = 128;
/// Longest name (reason, location, namespace, device) written, in characters: names come from
/// the kernel or a recording and are not trusted.
const MAX_NAME_CHARS: usize = 128;

/// Block types.
const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
/// Option codes: `opt_endofopt`, `opt_comment`, and the interface description's `if_name`,
/// `if_description` and `if_tsresol`.
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;
/// `if_tsresol` 9: timestamps count 10⁻⁹ s.
const NANOSECONDS: u8 = 9;

/// Which interface a key's packets were dropped on: the identity of its namespace and device,
/// as [`Attribution`] compares them (the index where known, else the name).
type IfaceId = (Option<u64>, Option<u32>, Option<Arc<str>>);

fn iface_id(a: &Attribution) -> IfaceId {
    let name = a.ifindex.is_none().then(|| a.device.clone()).flatten();
    (a.netns, a.ifindex, name)
}

/// A name safe to write: controls and invisible characters escaped, bounded.
fn clean(s: &str) -> String {
    sanitize::terminal_cell(s, MAX_NAME_CHARS)
}

/// The namespace as the comments and descriptions name it: its name and inode, or what is
/// known of them; `None` when the counts are not by namespace.
fn netns_text(a: &Attribution) -> Option<String> {
    match (a.netns_name.as_deref(), a.netns) {
        (Some(name), Some(inode)) => Some(format!("{} ({inode})", clean(name))),
        (Some(name), None) => Some(clean(name)),
        (None, Some(inode)) => Some(format!("inode {inode}")),
        (None, None) => None,
    }
}

/// The interface's `if_name`: the device, else its index, else `any` (not counted by device).
fn if_name(a: &Attribution) -> String {
    match (a.device.as_deref(), a.ifindex) {
        (Some(dev), _) => clean(dev),
        (None, Some(i)) => format!("ifindex {i}"),
        (None, None) => "any".into(),
    }
}

/// The interface's `if_description`: device and namespace, or what they are not known for.
fn if_description(a: &Attribution) -> String {
    let dev = match (a.device.as_deref(), a.ifindex) {
        (Some(dev), Some(i)) => format!("{} (ifindex {i})", clean(dev)),
        (Some(dev), None) => clean(dev),
        (None, Some(i)) => format!("ifindex {i}"),
        (None, None) => "any device".into(),
    };
    match netns_text(a) {
        Some(ns) => format!("{dev} in netns {ns}"),
        None => format!("{dev} in any netns"),
    }
}

/// A packet's comment: reason, location, and the namespace, device, protocol and port its
/// drops are counted by (those of them the key has).
fn comment(k: &DropKey) -> String {
    let a = &k.attr;
    let mut out = format!("{} at {}", clean(&k.reason.name), clean(&k.location));
    if let Some(ns) = netns_text(a) {
        out.push_str(&format!(", netns {ns}"));
    }
    if let Some(dev) = a.device.as_deref() {
        out.push_str(&format!(", device {}", clean(dev)));
    }
    if let Some(p) = a.protocol.as_deref() {
        out.push_str(&format!(", {}", clean(p)));
    }
    if let Some(p) = a.port {
        out.push_str(&format!(" port {p}"));
    }
    out
}

/// Appends one option (code, length, value padded to 4 bytes).
fn option(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    // Every value written is bounded far below 64 KiB (names are cut to MAX_NAME_CHARS).
    let len = value.len().min(usize::from(u16::MAX - 3));
    buf.extend_from_slice(&code.to_le_bytes());
    buf.extend_from_slice(&(len as u16).to_le_bytes());
    buf.extend_from_slice(&value[..len]);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// Ends an option list.
fn end_of_options(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&OPT_END.to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes());
}

/// Writes every sampled packet of `samples`, oldest first, as pcapng; returns how many.
///
/// Each (namespace, device) of the keys is one interface (in key order), and each packet sits
/// on its key's interface with a comment naming its drop.
pub fn write(samples: &[KeySamples], mut out: impl Write) -> io::Result<usize> {
    // Interfaces in the order of their identity; each named by the first key seen with it.
    let mut ifaces: BTreeMap<IfaceId, (u32, &Attribution)> = BTreeMap::new();
    for k in samples.iter().filter(|k| !k.packets.is_empty()) {
        ifaces
            .entry(iface_id(&k.key.attr))
            .or_insert((0, &k.key.attr));
    }
    for (i, (id, _)) in ifaces.values_mut().enumerate() {
        *id = i as u32;
    }
    let mut packets: Vec<(&Sample, u32, String)> = Vec::new();
    for k in samples {
        if k.packets.is_empty() {
            continue;
        }
        let iface = ifaces.get(&iface_id(&k.key.attr)).map_or(0, |(id, _)| *id);
        let note = comment(&k.key);
        packets.extend(k.packets.iter().map(|p| (p, iface, note.clone())));
    }
    packets.sort_by_key(|(p, iface, _)| (p.unix_ms, *iface));
    // Section header: byte-order magic, version 1.0, section length unknown.
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut out, SHB, &shb)?;
    for (_, attr) in ifaces.values() {
        // Interface description: raw IP, snap length, names, nanosecond timestamps.
        let mut idb = Vec::new();
        idb.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        idb.extend_from_slice(&0u16.to_le_bytes());
        idb.extend_from_slice(&SNAPLEN.to_le_bytes());
        option(&mut idb, IF_NAME, if_name(attr).as_bytes());
        option(&mut idb, IF_DESCRIPTION, if_description(attr).as_bytes());
        option(&mut idb, IF_TSRESOL, &[NANOSECONDS]);
        end_of_options(&mut idb);
        block(&mut out, IDB, &idb)?;
    }
    for (p, iface, note) in &packets {
        let data = &p.bytes[..p.bytes.len().min(SNAPLEN as usize)];
        // Original length: the whole packet from its network header, at least what was kept.
        let orig = (p.len as usize).max(data.len()) as u32;
        let nanos = p.unix_ms.saturating_mul(1_000_000);
        let mut epb = Vec::with_capacity(32 + data.len() + note.len());
        epb.extend_from_slice(&iface.to_le_bytes());
        epb.extend_from_slice(&((nanos >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(nanos as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&orig.to_le_bytes());
        epb.extend_from_slice(data);
        epb.resize(epb.len().next_multiple_of(4), 0);
        option(&mut epb, OPT_COMMENT, note.as_bytes());
        end_of_options(&mut epb);
        block(&mut out, EPB, &epb)?;
    }
    out.flush()?;
    Ok(packets.len())
}

/// One block: type, total length, body (already 4-byte aligned), total length again.
fn block(out: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    out.write_all(&kind.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&total.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn key(reason: &str, netns: Option<(u64, &str)>, dev: Option<(u32, &str)>) -> DropKey {
        DropKey {
            attr: Attribution {
                netns: netns.map(|n| n.0),
                netns_cookie: None,
                netns_name: netns.map(|n| n.1.into()),
                ifindex: dev.map(|d| d.0),
                device: dev.map(|d| d.1.into()),
                protocol: Some("udp".into()),
                port: Some(9),
                socket: None,
                culprit: None,
            },
            ..crate::fixtures::key(3, reason, "__udp4_lib_rcv+0x4bc")
        }
    }

    /// A 29-byte UDP datagram to port 9, its first `n` bytes kept.
    fn packet(n: usize, ms: u64) -> Sample {
        let mut b = vec![
            0x45, 0, 0, 29, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x9c, 0x40, 0, 9,
            0, 9, 0, 0, b'x',
        ];
        b.truncate(n);
        Sample {
            unix_ms: ms,
            len: 29,
            l3proto: 0x0800,
            bytes: b.into(),
        }
    }

    /// The blocks of `out`: (type, body), checking that each length is a multiple of 4 and
    /// repeated at the block's end.
    fn blocks(out: &[u8]) -> Vec<(u32, &[u8])> {
        let word = |i: usize| u32::from_le_bytes(out[i..i + 4].try_into().expect("4 bytes"));
        let mut at = 0;
        let mut all = Vec::new();
        while at < out.len() {
            let (kind, len) = (word(at), word(at + 4) as usize);
            assert_eq!(len % 4, 0);
            assert_eq!(word(at + len - 4) as usize, len);
            all.push((kind, &out[at + 8..at + len - 4]));
            at += len;
        }
        assert_eq!(at, out.len());
        all
    }

    /// The options of a block, from `at` in its body: (code, value) up to `opt_endofopt`.
    fn options(body: &[u8], mut at: usize) -> Vec<(u16, Vec<u8>)> {
        let half = |i: usize| u16::from_le_bytes([body[i], body[i + 1]]);
        let mut out = Vec::new();
        loop {
            let (code, len) = (half(at), usize::from(half(at + 2)));
            if code == OPT_END {
                assert_eq!(at + 4, body.len(), "options end the block");
                return out;
            }
            out.push((code, body[at + 4..at + 4 + len].to_vec()));
            at += 4 + len.next_multiple_of(4);
        }
    }

    /// Two namespaces, three interfaces (one key without a device), and a fourth key on the
    /// first interface: each interface is described once, each packet sits on its key's
    /// interface with its key's comment, oldest first, timestamps in nanoseconds.
    fn two_namespaces() -> Vec<KeySamples> {
        let a = (4026532001, "dsA");
        let b = (4026532002, "dsB");
        vec![
            KeySamples {
                key: key("NO_SOCKET", Some(b), Some((3, "vb"))),
                packets: vec![packet(29, 2_000), packet(3, 1_000)],
            },
            KeySamples {
                key: key("NETFILTER_DROP", Some(b), Some((3, "renamed-vb"))),
                packets: vec![packet(29, 1_500)],
            },
            KeySamples {
                key: key("NO_SOCKET", Some(a), Some((1, "lo"))),
                packets: vec![packet(29, 3_000)],
            },
            KeySamples {
                key: key("NO_SOCKET", Some(a), None),
                packets: vec![packet(29, 4_000)],
            },
            KeySamples {
                key: key("IP_NOPROTO", Some(a), Some((2, "eth0"))),
                packets: vec![],
            },
        ]
    }

    #[test]
    fn one_interface_per_namespace_and_device_and_a_comment_per_packet() {
        let mut out = Vec::new();
        assert_eq!(write(&two_namespaces(), &mut out).expect("write"), 5);
        let blocks = blocks(&out);
        let kinds: Vec<u32> = blocks.iter().map(|b| b.0).collect();
        assert_eq!(kinds, [SHB, IDB, IDB, IDB, EPB, EPB, EPB, EPB, EPB]);
        let ifaces: Vec<Vec<(u16, Vec<u8>)>> =
            blocks[1..4].iter().map(|(_, b)| options(b, 8)).collect();
        let text = |v: &[u8]| String::from_utf8(v.to_vec()).expect("utf-8");
        // In identity order: dsA without a device, dsA's lo, dsB's interface 3 (named as its
        // first key names it).
        let names: Vec<(String, String, Vec<u8>)> = ifaces
            .iter()
            .map(|o| {
                assert_eq!(o.len(), 3);
                assert_eq!(
                    (o[0].0, o[1].0, o[2].0),
                    (IF_NAME, IF_DESCRIPTION, IF_TSRESOL)
                );
                (text(&o[0].1), text(&o[1].1), o[2].1.clone())
            })
            .collect();
        assert_eq!(
            names,
            [
                (
                    "any".into(),
                    "any device in netns dsA (4026532001)".into(),
                    vec![9]
                ),
                (
                    "lo".into(),
                    "lo (ifindex 1) in netns dsA (4026532001)".into(),
                    vec![9]
                ),
                (
                    "vb".into(),
                    "vb (ifindex 3) in netns dsB (4026532002)".into(),
                    vec![9]
                ),
            ]
        );
        let word = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        let packets: Vec<(u32, u64, u32, String)> = blocks[4..]
            .iter()
            .map(|(_, b)| {
                let ts = (u64::from(word(b, 4)) << 32) | u64::from(word(b, 8));
                let caplen = word(b, 12);
                let opts = options(b, 20 + (caplen as usize).next_multiple_of(4));
                assert_eq!(opts.len(), 1);
                assert_eq!(opts[0].0, OPT_COMMENT);
                (word(b, 0), ts, caplen, text(&opts[0].1))
            })
            .collect();
        let udp = ", udp port 9";
        assert_eq!(
            packets,
            [
                (
                    2,
                    1_000_000_000,
                    3,
                    format!(
                        "NO_SOCKET at __udp4_lib_rcv+0x4bc, netns dsB (4026532002), device vb{udp}"
                    )
                ),
                (
                    2,
                    1_500_000_000,
                    29,
                    format!(
                        "NETFILTER_DROP at __udp4_lib_rcv+0x4bc, netns dsB (4026532002), \
                         device renamed-vb{udp}"
                    )
                ),
                (
                    2,
                    2_000_000_000,
                    29,
                    format!(
                        "NO_SOCKET at __udp4_lib_rcv+0x4bc, netns dsB (4026532002), device vb{udp}"
                    )
                ),
                (
                    1,
                    3_000_000_000,
                    29,
                    format!(
                        "NO_SOCKET at __udp4_lib_rcv+0x4bc, netns dsA (4026532001), device lo{udp}"
                    )
                ),
                (
                    0,
                    4_000_000_000,
                    29,
                    format!("NO_SOCKET at __udp4_lib_rcv+0x4bc, netns dsA (4026532001){udp}")
                ),
            ]
        );
    }

    /// Counts by reason and location only: one interface for every packet, comments without a
    /// namespace.
    #[test]
    fn counts_not_by_namespace_have_one_interface() {
        let mut k = key("NO_SOCKET", None, None);
        k.attr = Attribution::default();
        let samples = [KeySamples {
            key: k,
            packets: vec![packet(29, 1)],
        }];
        let mut out = Vec::new();
        assert_eq!(write(&samples, &mut out).expect("write"), 1);
        let blocks = blocks(&out);
        assert_eq!(blocks.len(), 3);
        let o = options(blocks[1].1, 8);
        assert_eq!(o[0].1, b"any");
        assert_eq!(o[1].1, b"any device in any netns");
        let caplen = 29usize.next_multiple_of(4);
        let c = options(blocks[2].1, 20 + caplen);
        assert_eq!(c[0].1, b"NO_SOCKET at __udp4_lib_rcv+0x4bc");
    }

    /// Names from a crafted recording reach no comment or interface raw: controls and bidi
    /// overrides are escaped and long names cut.
    #[test]
    fn hostile_names_are_escaped_and_bounded() {
        let long = "x".repeat(100_000);
        let mut k = key(
            "NO_SOCKET",
            Some((1, "evil\u{1b}[31m\u{202e}")),
            Some((2, &long)),
        );
        k.location = "loc\r\n".into();
        let samples = [KeySamples {
            key: k,
            packets: vec![packet(29, 1)],
        }];
        let mut out = Vec::new();
        write(&samples, &mut out).expect("write");
        assert!(out.len() < 4096, "{} bytes", out.len());
        let blocks = blocks(&out);
        let mut texts: Vec<String> = options(blocks[1].1, 8)
            .into_iter()
            .chain(options(blocks[2].1, 20 + 29usize.next_multiple_of(4)))
            .filter(|(code, _)| *code != IF_TSRESOL)
            .map(|(_, v)| String::from_utf8(v).expect("utf-8"))
            .collect();
        assert_eq!(texts.len(), 3);
        let comment = texts.pop().expect("comment");
        for t in texts.iter().chain([&comment]) {
            assert!(!t.contains(['\u{1b}', '\u{202e}', '\r', '\n']), "{t:?}");
            assert!(t.chars().count() < 600, "{t:?}");
        }
        assert!(
            texts[0].starts_with("xxx") && texts[0].ends_with('…'),
            "{texts:?}"
        );
        assert!(comment.contains("evil\\u{1b}[31m\\u{202e}"), "{comment}");
        assert!(comment.contains("loc\\r\\n"), "{comment}");
    }

    /// tshark (where installed) reads the interfaces' names and descriptions, each packet's
    /// interface and comment, and nanosecond timestamps.
    #[test]
    fn tshark_reads_interfaces_comments_and_nanoseconds() {
        if Command::new("tshark").arg("--version").output().is_err() {
            eprintln!("tshark not installed: skipped");
            return;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("t.pcapng");
        let mut out = Vec::new();
        write(&two_namespaces(), &mut out).expect("write");
        std::fs::write(&file, out).expect("write file");
        let fields = [
            "frame.interface_id",
            "frame.interface_name",
            "frame.interface_description",
            "frame.comment",
            "frame.time_epoch",
            "udp.dstport",
        ];
        let mut cmd = Command::new("tshark");
        cmd.arg("-r").arg(&file).args(["-T", "fields"]);
        for f in fields {
            cmd.args(["-e", f]);
        }
        let run = cmd.output().expect("run tshark");
        assert!(run.status.success(), "{run:?}");
        let text = String::from_utf8(run.stdout).expect("utf-8");
        let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(rows.len(), 5, "{text}");
        let b = "netns dsB (4026532002)";
        assert_eq!(
            rows[0][..4],
            [
                "2",
                "vb",
                "vb (ifindex 3) in netns dsB (4026532002)",
                &format!("NO_SOCKET at __udp4_lib_rcv+0x4bc, {b}, device vb, udp port 9")[..],
            ],
            "{text}"
        );
        assert!(rows[1][3].starts_with("NETFILTER_DROP at "), "{text}");
        assert_eq!(rows[1][1], "vb", "{text}");
        assert_eq!(rows[3][..2], ["1", "lo"], "{text}");
        assert_eq!(rows[4][..2], ["0", "any"], "{text}");
        // Nanosecond resolution: nine decimals, the sample's millisecond.
        assert_eq!(rows[0][4], "1.000000000", "{text}");
        assert_eq!(rows[1][4], "1.500000000", "{text}");
        // The 3-byte packet has no UDP header; the others do.
        assert_eq!(rows[1][5], "9", "{text}");
    }
}
