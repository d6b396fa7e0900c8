//! Tests of the SVG outputs: well-formed XML, the frames, the title and the estimate label.
use std::{sync::Arc, time::Duration};

use quick_xml::{XmlVersion, events::Event};

use super::{snapshot::snapshot_svg, *};
use crate::model::snapshot::{DropKey, Reason};

fn stack(reason: &str, frames: &[&str], weight: u64) -> StackCount {
    let frames: Arc<[Arc<str>]> = frames.iter().map(|f| Arc::from(*f)).collect();
    StackCount {
        key: DropKey {
            reason: Reason {
                code: 3,
                name: Arc::from(reason),
            },
            location: frames.last().cloned().unwrap_or_else(|| Arc::from("?")),
            attr: Default::default(),
        },
        frames,
        weight,
        samples: 1,
    }
}

fn info() -> SessionInfo {
    SessionInfo {
        host: "edge-7".into(),
        kernel: "6.8.0-45-generic".into(),
        started_unix_ms: 1_700_000_000_000,
        probe: "tp_btf/kfree_skb".into(),
    }
}

fn meta<'a>(info: &'a SessionInfo, filter: Option<&'a str>) -> GraphMeta<'a> {
    GraphMeta {
        info,
        window: (Duration::from_secs(5), Duration::from_secs(65)),
        filter,
    }
}

fn stacks() -> Vec<StackCount> {
    vec![
        stack(
            "NO_SOCKET",
            &["ip_rcv+0x4f", "udp_rcv+0x1d", "__udp4_lib_rcv+0x5d"],
            120,
        ),
        stack("NO_SOCKET", &["ip_rcv+0x4f", "tcp_v4_rcv+0x8f"], 30),
        stack(
            "NETFILTER_DROP",
            &["ip_rcv+0x4f", "nf_hook_slow+0xa2 <&mod>"],
            50,
        ),
    ]
}

/// What a test needs from an SVG: its title, subtitle and all its text, after parsing it
/// fully as XML (mismatched tags and bad entities fail the test).
struct Svg {
    title: String,
    subtitle: String,
    text: String,
    raw: String,
}

fn parse(bytes: &[u8]) -> Svg {
    let raw = String::from_utf8(bytes.to_vec()).expect("SVG is UTF-8");
    let mut reader = quick_xml::Reader::from_str(&raw);
    reader.config_mut().check_end_names = true;
    let (mut title, mut subtitle, mut text) = (String::new(), String::new(), String::new());
    let mut ids: Vec<Option<String>> = Vec::new();
    let mut saw_svg = false;
    loop {
        let event = reader.read_event().unwrap_or_else(|e| {
            panic!(
                "SVG is not well-formed XML at {}: {e}",
                reader.buffer_position()
            )
        });
        let piece = match &event {
            Event::Start(e) => {
                saw_svg |= e.name().as_ref() == b"svg";
                let id = e.try_get_attribute("id").expect("attribute").map(|a| {
                    a.normalized_value(XmlVersion::Implicit1_0)
                        .expect("attribute value")
                        .into_owned()
                });
                ids.push(id);
                continue;
            }
            Event::End(_) => {
                ids.pop();
                text.push('\n');
                continue;
            }
            Event::Text(t) => t.xml10_content().expect("text").into_owned(),
            Event::GeneralRef(r) => {
                let name = r.decode().expect("reference").into_owned();
                quick_xml::escape::unescape(&format!("&{name};"))
                    .expect("known entity")
                    .into_owned()
            }
            Event::CData(c) => String::from_utf8_lossy(c).into_owned(),
            Event::Eof => break,
            _ => continue,
        };
        match ids.last().cloned().flatten().as_deref() {
            Some("title") => title.push_str(&piece),
            Some("subtitle") => subtitle.push_str(&piece),
            _ => {}
        }
        text.push_str(&piece);
    }
    assert!(saw_svg, "no <svg> element");
    assert!(ids.is_empty(), "unclosed elements");
    Svg {
        title,
        subtitle,
        text,
        raw,
    }
}

fn svg(stacks: &[StackCount], meta: &GraphMeta) -> Svg {
    let mut out = Vec::new();
    write_svg(stacks, meta, &mut out).expect("write_svg");
    parse(&out)
}

#[test]
fn svg_is_xml_with_frames_reasons_title_and_estimate_label() {
    let info = info();
    let svg = svg(&stacks(), &meta(&info, Some("reason=NO_SOCKET")));
    for frame in [
        "NO_SOCKET",
        "NETFILTER_DROP",
        "ip_rcv+0x4f",
        "__udp4_lib_rcv+0x5d",
        "tcp_v4_rcv+0x8f",
        "nf_hook_slow+0xa2 <&mod>",
    ] {
        assert!(svg.text.contains(frame), "missing frame {frame}");
    }
    for part in [
        "edge-7",
        "6.8.0-45-generic",
        "+0:05",
        "+1:05",
        "filter: reason=NO_SOCKET",
    ] {
        assert!(
            svg.title.contains(part),
            "title {:?} lacks {part}",
            svg.title
        );
    }
    assert!(
        svg.subtitle.contains("estimate"),
        "subtitle {:?}",
        svg.subtitle
    );
    assert!(svg.text.contains("drops (est.)"), "count name missing");
    // Weights are the estimates: 120 of 200 in the UDP path.
    assert!(
        svg.text
            .contains("__udp4_lib_rcv+0x5d (120 drops (est.), 60.00%)"),
        "weights"
    );
    // Inferno's search and zoom script is there.
    assert!(
        svg.raw.contains("<script") && svg.raw.contains("search"),
        "no script"
    );
}

#[test]
fn title_without_filter_or_host() {
    let info = SessionInfo::default();
    let mut m = meta(&info, None);
    m.window = (Duration::ZERO, Duration::from_millis(3_723_500));
    let svg = svg(&stacks(), &m);
    assert!(!svg.title.contains("filter"), "{:?}", svg.title);
    assert!(svg.title.contains("unknown host"), "{:?}", svg.title);
    assert!(
        svg.title.contains("+0:00 → +1:02:03.500"),
        "{:?}",
        svg.title
    );
    assert!(svg.subtitle.contains("estimate") && !svg.subtitle.contains("Session start"));

    let long = "x".repeat(200);
    let svg = self::svg(&stacks(), &meta(&info, Some(&long)));
    assert!(
        svg.title.ends_with(&format!("filter: {}…", "x".repeat(59))),
        "{:?}",
        svg.title
    );
}

#[test]
fn empty_view_is_an_error_and_writes_nothing() {
    let info = info();
    let mut out = Vec::new();
    let err = write_svg(&[stack("R", &["f"], 0)], &meta(&info, None), &mut out)
        .expect_err("nothing to draw");
    assert!(err.to_string().contains("no sampled stacks"), "{err}");
    assert!(out.is_empty());
}

#[test]
fn diff_is_xml_differs_from_plain_and_shows_new_frames() {
    let info = info();
    let m = meta(&info, None);
    let before = folded(&stacks());
    let mut after_stacks = stacks();
    after_stacks[0].weight = 10;
    after_stacks.push(stack("OTHERHOST", &["ip_rcv+0x4f", "ip_rcv_core+0x1b"], 70));
    let after = folded(&after_stacks);

    let mut out = Vec::new();
    write_diff_svg(&before, &after, &m, &mut out).expect("diff");
    let diff = parse(&out);
    assert!(
        diff.text.contains("ip_rcv_core+0x1b"),
        "frame only in after is missing"
    );
    assert!(diff.text.contains("OTHERHOST"));
    assert!(diff.title.contains("vs baseline"), "{:?}", diff.title);
    assert!(diff.subtitle.contains("estimate"));
    let plain = svg(&after_stacks, &m);
    assert_ne!(diff.raw, plain.raw);
    // Widths are the after counts (160 in all); tooltips add the change in points of the total.
    for tip in [
        "ip_rcv_core+0x1b (70 drops (est.), 43.75%; +43.75%)",
        "__udp4_lib_rcv+0x5d (10 drops (est.), 6.25%; -68.75%)",
        "tcp_v4_rcv+0x8f (30 drops (est.), 18.75%; 0.00%)",
    ] {
        assert!(diff.text.contains(tip), "missing {tip}");
    }
}

#[test]
fn diff_with_no_drops_after_draws_the_baseline() {
    let info = info();
    let before = folded(&stacks());
    let mut out = Vec::new();
    write_diff_svg(&before, "", &meta(&info, None), &mut out).expect("diff");
    let diff = parse(&out);
    assert!(diff.text.contains("__udp4_lib_rcv+0x5d"));
    assert!(
        diff.subtitle.contains("baseline (no drops after)"),
        "{:?}",
        diff.subtitle
    );
}

#[test]
fn diff_rejects_bad_or_empty_input() {
    let info = info();
    let m = meta(&info, None);
    let good = folded(&stacks());
    let err = write_diff_svg("<svg>\n", &good, &m, Vec::new()).expect_err("bad baseline");
    assert!(err.to_string().contains("baseline, line 1"), "{err}");
    let err = write_diff_svg("", "\n# nothing\n", &m, Vec::new()).expect_err("empty");
    assert!(err.to_string().contains("nothing to compare"), "{err}");
}

#[test]
fn synthetic_stacks_render() {
    let info = info();
    let svg = svg(&synthetic_stacks(2_000), &meta(&info, None));
    assert!(svg.text.contains("NO_SOCKET") && svg.text.contains("net_rx_action"));
}

#[test]
fn snapshots_in_the_same_second_get_distinct_complete_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let info = info();
    let m = meta(&info, None);
    let paths: Vec<_> = (0..3)
        .map(|_| {
            snapshot_svg(&stacks(), &m, dir.path(), std::time::SystemTime::now()).expect("snapshot")
        })
        .collect();
    assert_ne!(paths[0], paths[1]);
    assert_ne!(paths[1], paths[2]);
    for path in &paths {
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            name.starts_with("dropscope-flame-") && name.ends_with(".svg"),
            "{name}"
        );
        let stamp = &name["dropscope-flame-".len()..][..15];
        assert!(
            stamp.bytes().enumerate().all(|(i, b)| if i == 8 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }),
            "{name}"
        );
        let bytes = std::fs::read(path).expect("read");
        assert!(parse(&bytes).text.contains("__udp4_lib_rcv+0x5d"));
    }
    // Only the graphs are left: no temporary files.
    let entries = std::fs::read_dir(dir.path()).expect("read_dir").count();
    assert_eq!(entries, paths.len());
}

#[test]
fn snapshot_never_overwrites() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = snapshot::write_new_file(dir.path(), "x", "svg", b"one").expect("first");
    let second = snapshot::write_new_file(dir.path(), "x", "svg", b"two").expect("second");
    assert_eq!(first.file_name().and_then(|n| n.to_str()), Some("x.svg"));
    assert_eq!(second.file_name().and_then(|n| n.to_str()), Some("x-1.svg"));
    assert_eq!(std::fs::read(&first).expect("read"), b"one");
    assert_eq!(std::fs::read(&second).expect("read"), b"two");
}

#[test]
fn snapshot_of_an_empty_view_writes_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let info = info();
    assert!(
        snapshot_svg(
            &[],
            &meta(&info, None),
            dir.path(),
            std::time::SystemTime::now()
        )
        .is_err()
    );
    assert_eq!(std::fs::read_dir(dir.path()).expect("read_dir").count(), 0);
}

#[test]
fn snapshot_into_a_missing_directory_says_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope");
    let info = info();
    let err = snapshot_svg(
        &stacks(),
        &meta(&info, None),
        &missing,
        std::time::SystemTime::now(),
    )
    .expect_err("no dir");
    assert!(format!("{err:#}").contains("nope"), "{err:#}");
}

/// Whether every character of `s` may appear in an XML 1.0 document.
fn all_xml_chars(s: &str) -> bool {
    s.chars().all(|c| {
        matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
    })
}

#[test]
fn hostile_host_kernel_and_frames_still_give_valid_xml() {
    let info = SessionInfo {
        host: "h\x1b]0;x\x07\u{1}\u{202e}".into(),
        kernel: "k\u{0}\u{b}\u{fffe}".into(),
        ..info()
    };
    let hostile = vec![stack(
        "R\u{ffff}",
        &["a\u{fffe}b", "c\x1b[2Jd", "<&\"'>"],
        5,
    )];
    let s = svg(&hostile, &meta(&info, Some("f\u{8}\u{202e}")));
    assert!(all_xml_chars(&s.raw), "invalid XML characters in the SVG");
    assert!(!s.raw.contains('\u{202e}'));
    assert!(s.title.contains("h\\u{1b}]0;x\\u{7}"), "{}", s.title);
    assert!(s.text.contains("a\\u{fffe}b"), "{}", s.text);
}

#[test]
fn weights_near_2_pow_64_are_refused_not_wrapped() {
    let info = info();
    let big = vec![
        stack("R", &["a"], u64::MAX / 2),
        stack("R", &["b"], u64::MAX / 2),
        stack("S", &["c"], 10),
    ];
    let err = write_svg(&big, &meta(&info, None), Vec::new()).expect_err("refused");
    assert!(err.to_string().contains("2^63"), "{err}");
    let folded_big = folded(&big);
    let err = write_diff_svg(&folded_big, "R;a 1\n", &meta(&info, None), Vec::new())
        .expect_err("refused");
    assert!(err.to_string().contains("2^63"), "{err}");
}

#[test]
fn long_names_and_deep_stacks_are_bounded_with_markers() {
    // One 64 KiB name used as 1,000 frames: a 435-byte recording once made a 65 MB SVG.
    let name = "x".repeat(64 << 10);
    let frames: Vec<&str> = (0..1000).map(|_| name.as_str()).collect();
    let deep = vec![stack("R", &frames, 7)];
    let text = folded(&deep);
    assert!(text.len() < 100_000, "{} bytes of folded text", text.len());
    assert!(text.contains("[745 frames cut]"), "no depth marker");
    assert!(text.contains('…'), "no truncation marker");
    let mut out = Vec::new();
    write_svg(&deep, &meta(&info(), None), &mut out).expect("svg");
    assert!(out.len() < 1 << 20, "{} bytes of SVG", out.len());
    parse(&out);
}

#[test]
fn many_stacks_stay_within_the_folded_budget() {
    // 300 distinct stacks of 256 frames of 256-character names: about 20 MB unbounded.
    let name = "y".repeat(256);
    let stacks: Vec<StackCount> = (0..300u64)
        .map(|i| {
            let frames: Vec<String> = (0..256).map(|d| format!("{i}_{d}{name}")).collect();
            let refs: Vec<&str> = frames.iter().map(String::as_str).collect();
            stack("R", &refs, 1000 - i)
        })
        .collect();
    let text = folded(&stacks);
    assert!(
        text.len() <= folded::MAX_FOLDED_BYTES + 200,
        "{} bytes",
        text.len()
    );
    assert!(text.contains("[lighter stacks merged: output limit]"));
    // Nothing is lost: the merged line carries the rest of the weight.
    let sum: u64 = text
        .lines()
        .map(|l| {
            l.rsplit_once(' ')
                .expect("count")
                .1
                .parse::<u64>()
                .expect("u64")
        })
        .sum();
    assert_eq!(sum, (0..300u64).map(|i| 1000 - i).sum::<u64>());
}

/// `n` stacks of `depth` frames, none shared (each stack's frames are its own): `n × depth`
/// rectangles unbounded.
fn wide_stacks(n: u64, depth: u64) -> Vec<StackCount> {
    (0..n)
        .map(|i| {
            let frames: Vec<String> = (0..depth).map(|d| format!("f{i}x{d}")).collect();
            let refs: Vec<&str> = frames.iter().map(String::as_str).collect();
            stack("R", &refs, 1000 + i)
        })
        .collect()
}

fn rectangles(svg: &[u8]) -> usize {
    String::from_utf8_lossy(svg).matches("<rect").count()
}

#[test]
fn svgs_are_bounded_by_rectangles_and_say_what_they_elided() {
    // 2,000 stacks of 100 frames of their own: 200,000 rectangles (a 90 KB recording once
    // drew 2.56 million, 474 MB of SVG).
    let stacks = wide_stacks(2000, 100);
    let mut out = Vec::new();
    write_svg(&stacks, &meta(&info(), None), &mut out).expect("svg");
    let rects = rectangles(&out);
    assert!(rects <= MAX_RECTANGLES + 2, "{rects} rectangles");
    assert!(out.len() < MAX_RECTANGLES * 2048, "{} bytes", out.len());
    let svg = parse(&out);
    // The heaviest stacks are drawn whole (199 of 100 frames fit in 20,000 rectangles), the
    // rest as one frame that says so.
    assert!(svg.text.contains("[1801 stacks elided: graph limit]"));
    assert!(svg.text.contains("f1999x99") && !svg.text.contains("f0x0"));
}

#[test]
fn the_rectangle_limit_keeps_every_weight() {
    let text: String = (0..50)
        .map(|i| format!("R{};a{i};b{i} {}\n", i % 3, i + 1))
        .collect();
    let limited = folded::limit_rectangles(&text, 40);
    let sum = |t: &str| -> u64 {
        t.lines()
            .map(|l| {
                l.rsplit_once(' ')
                    .expect("count")
                    .1
                    .parse::<u64>()
                    .expect("u64")
            })
            .sum()
    };
    assert_eq!(sum(&limited), sum(&text));
    let tree: std::collections::HashSet<String> = limited
        .lines()
        .flat_map(|l| {
            let path = l.rsplit_once(' ').expect("count").0;
            let frames: Vec<&str> = path.split(';').collect();
            (1..=frames.len())
                .map(|n| frames[..n].join(";"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(tree.len() <= 40, "{} rectangles", tree.len());
    assert!(limited.contains("R0;[") && limited.contains("stacks elided: graph limit]"));
    assert_eq!(folded::limit_rectangles(&text, 1000), {
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_by_key(|l| {
            std::cmp::Reverse(
                l.rsplit_once(' ')
                    .map(|(_, c)| c.parse::<u64>().unwrap_or(0)),
            )
        });
        lines.iter().map(|l| format!("{l}\n")).collect::<String>()
    });
}

#[test]
fn a_baseline_is_read_bounded_and_drawn_with_the_limits_of_a_recording() {
    // /dev/zero never ends: once read until memory ran out.
    let err = read_folded(std::path::Path::new("/dev/zero")).expect_err("refused");
    assert!(err.to_string().contains("larger than 16 MiB"), "{err}");

    // 3,000 lines of 100 frames of their own, 2 MB: once a 298 MB SVG.
    let baseline = folded(&wide_stacks(3000, 100));
    assert!(baseline.len() > 2_000_000, "{}", baseline.len());
    // Nothing dropped after: the baseline's widths are drawn, every frame of it.
    let mut out = Vec::new();
    write_diff_svg(&baseline, "", &meta(&info(), None), &mut out).expect("diff");
    let rects = rectangles(&out);
    assert!(rects <= MAX_RECTANGLES + 2, "{rects} rectangles");
    assert!(out.len() < MAX_RECTANGLES * 2048, "{} bytes", out.len());
    parse(&out);

    // Frames and depth get the limits of folded output: a baseline line of 100,000 frames of
    // 10,000 characters is cut like a recording's stack.
    let long = "z".repeat(10_000);
    let line = format!("R;{} 5\n", vec![long.as_str(); 100].join(";"));
    let checked = folded::check_folded(&line, "baseline").expect("valid");
    assert!(
        checked.text.len() < 100 * 300,
        "{} bytes",
        checked.text.len()
    );
    let deep = format!("R;{} 5\n", vec!["f"; 100_000].join(";"));
    let checked = folded::check_folded(&deep, "baseline").expect("valid");
    // The reason, the frame naming where, and MAX_DEPTH frames: as long as a line `folded`
    // writes may be.
    assert_eq!(checked.text.split(';').count(), folded::MAX_DEPTH + 2);
    assert!(checked.text.contains("frames cut]"));
    // What `folded` writes comes back unchanged.
    let ours = folded(&wide_stacks(3, 300));
    assert_eq!(
        folded::check_folded(&ours, "ours").expect("valid").text,
        ours
    );
}
