//! Sampled drop stacks from the real kernel: the expected path is there, the estimate agrees
//! with the exact count, the SVG is well-formed, and a single rare drop has its stack.
//! Needs root.
use dropscope_tests::{Counting, Netns, root_test};

/// Parses folded lines `frame;frame;... weight` into (frames, weight).
fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (stack, w) = l.rsplit_once(' ').expect("folded line");
            (
                stack.split(';').map(str::to_string).collect(),
                w.parse().expect("weight"),
            )
        })
        .collect()
}

#[test]
fn folded_stacks_show_the_udp_receive_path_and_agree_with_the_count() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let folded = dir.path().join("drops.folded");
    let ns = Netns::new("stacks");
    let c = Counting::start(&[
        "flamegraph",
        "--format",
        "folded",
        "--offsets",
        "-o",
        folded.to_str().expect("utf-8"),
    ]);
    ns.traffic(&["udp", "9", "20000"]);
    ns.traffic(&["raw", "253", "1"]);
    c.interrupt();
    let stacks = parse_folded(&std::fs::read_to_string(&folded).expect("folded file"));

    let udp: Vec<_> = stacks
        .iter()
        .filter(|(f, _)| f[0] == "NO_SOCKET" && f.iter().any(|x| x.starts_with("__udp4_lib_rcv+")))
        .collect();
    assert!(
        !udp.is_empty(),
        "no NO_SOCKET stack through __udp4_lib_rcv: {stacks:?}"
    );
    assert!(
        udp.iter()
            .any(|(f, _)| f.iter().any(|x| x.starts_with("udp_sendmsg+"))),
        "the sender's path is missing: {udp:?}"
    );
    // Each sample weighs its period, so the estimate is within a sampling period or two per
    // CPU of the exact count: allow 10%.
    let est: u64 = udp.iter().map(|(_, w)| w).sum();
    assert!(
        (18_000..=22_000).contains(&est),
        "estimate {est} for 20000 drops"
    );

    // A single rare drop still has its stack (captured on the key's first drop).
    let rare: Vec<_> = stacks
        .iter()
        .filter(|(f, _)| f[0] == "IP_NOPROTO")
        .collect();
    assert_eq!(rare.len(), 1, "{stacks:?}");
    assert_eq!(rare[0].1, 1, "{rare:?}");
    assert!(
        rare[0].0.iter().any(|x| x.starts_with("ip_local_deliver")),
        "{rare:?}"
    );
}

#[test]
fn the_svg_is_well_formed_and_holds_the_frames() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("drops.svg");
    let ns = Netns::new("svg");
    let c = Counting::start(&[
        "flamegraph",
        "--offsets",
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    ns.traffic(&["udp", "9", "500"]);
    c.interrupt();
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(text.contains("NO_SOCKET"), "the reason is not in the graph");
    assert!(
        text.contains("__udp4_lib_rcv+"),
        "the drop site is not in the graph"
    );
    // Well-formed XML, all the way through.
    let mut reader = quick_xml::Reader::from_str(&text);
    let mut elements = 0;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Start(_) | quick_xml::events::Event::Empty(_)) => {
                elements += 1
            }
            Ok(_) => {}
            Err(e) => panic!("the SVG is not XML at {}: {e}", reader.buffer_position()),
        }
    }
    assert!(elements > 10, "an SVG of {elements} elements");
}

/// A recording's stacks carry their rows' names as its counts do: `flamegraph --input FILE
/// --netns NAME` finds the stacks of drops in namespace NAME, and their frame names the
/// namespace and device. (A stack is first seen before names are found, beside the counting;
/// it used to keep the key as first seen, unnamed, so it vanished under `--netns`.)
#[test]
fn recorded_stacks_are_found_by_their_namespaces_name() {
    let _serial = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = dir.path().join("ns.dsrec");
    let ns = Netns::new("stacks-rec");
    let c = Counting::start(&[
        "record",
        "--netns",
        &ns.name,
        "-o",
        rec.to_str().expect("utf-8"),
    ]);
    ns.traffic(&["udp", "9", "500"]);
    // Ended once a frame written down has the drops under the namespace's name (found beside
    // the counting while it records).
    dropscope_tests::wait::wait_recorded(dir.path(), "the drops recorded with their name", |r| {
        (r["drops"].as_array().into_iter().flatten())
            .filter(|d| d["netns_name"] == ns.name.as_str())
            .map(|d| d["count"].as_u64().unwrap_or(0))
            .sum::<u64>()
            >= 500
    });
    c.interrupt();
    let out = dropscope_tests::run(
        std::process::Command::new(dropscope_tests::dropscope_bin()).args([
            "flamegraph",
            "--input",
            rec.to_str().expect("utf-8"),
            "--netns",
            &ns.name,
            "--format",
            "folded",
            "-o",
            "-",
        ]),
    );
    let stacks = parse_folded(&String::from_utf8_lossy(&out.stdout));
    let frame = format!("[netns {}, device lo]", ns.name);
    let ours: u64 = (stacks.iter())
        .filter(|(f, _)| f[0] == "NO_SOCKET" && f.get(1) == Some(&frame))
        .map(|(_, w)| w)
        .sum();
    // Each sample weighs its period: within 10% of the exact count.
    assert!(
        (450..=550).contains(&ours),
        "stacks of {frame} weigh {ours} for 500 drops: {stacks:?}"
    );
}
