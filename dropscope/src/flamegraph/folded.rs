//! Collapsed-stack ("folded") text: writing it from stack counts, checking it when read back
//! (with the same limits), and bounding the rectangles a graph of it draws.
use std::{
    collections::{BTreeMap, HashMap},
    io::Read,
    path::Path,
};

use anyhow::{Context, bail};

use crate::{model::snapshot::StackCount, sanitize};

/// Frame text used where a frame (or reason) has no printable name.
const UNKNOWN_FRAME: &str = "[unknown]";

/// Longest frame (or reason) name written; longer ones are cut with `…`.
pub const MAX_FRAME_CHARS: usize = 256;
/// Most frames written per stack; deeper stacks keep their outermost and innermost frames
/// around a `[N frames cut]` marker.
pub const MAX_DEPTH: usize = 256;
/// Most bytes of folded text: the lightest paths beyond it are merged, per reason, into one
/// `[lighter stacks merged]` line. Bounds the folded file, the SVG and the memory for both.
pub const MAX_FOLDED_BYTES: usize = 16 << 20;

/// The frame standing for the paths merged beyond [`MAX_FOLDED_BYTES`].
const MERGED: &str = "[lighter stacks merged: output limit]";
/// Most rectangles (distinct frames of the merged tree) one SVG draws: the lightest stacks
/// beyond it are drawn as one `[N stacks elided: graph limit]` frame per reason. With frames of
/// at most [`MAX_FRAME_CHARS`] characters this bounds an SVG to about 40 MB.
pub const MAX_RECTANGLES: usize = 20_000;
/// Most frames in one line of folded input (the reason, where it was dropped, then
/// [`MAX_DEPTH`] frames: what [`folded`] writes, its `[N frames cut]` marker included).
const MAX_LINE_FRAMES: usize = MAX_DEPTH + 2;

/// The frame under the reason naming where the drops were counted: `[netns NAME, device DEV]`
/// with the parts the key has (its namespace's name, else its inode); `None` for counts
/// grouped without either.
fn place_frame(stack: &StackCount) -> Option<String> {
    let a = &stack.key.attr;
    let netns = (a.netns_name.as_deref().map(str::to_string))
        .or_else(|| a.netns.map(|n| n.to_string()))
        .map(|n| format!("netns {n}"));
    let device = a.device.as_deref().map(|d| format!("device {d}"));
    let parts: Vec<String> = netns.into_iter().chain(device).collect();
    (!parts.is_empty()).then(|| format!("[{}]", parts.join(", ")))
}

/// The folded path of one stack: reason, where (namespace and device, where the key has
/// them), then frames, sanitized and bounded.
fn path_of(stack: &StackCount, path: &mut String) {
    path.clear();
    if stack.key.reason.name.trim().is_empty() {
        path.push_str(&format!("UNKNOWN({})", stack.key.reason.code));
    } else {
        sanitize::folded_frame(path, &stack.key.reason.name, MAX_FRAME_CHARS);
    }
    if let Some(place) = place_frame(stack) {
        path.push(';');
        sanitize::folded_frame(path, &place, MAX_FRAME_CHARS);
    }
    let frames = &stack.frames;
    if frames.is_empty() {
        path.push(';');
        sanitize::folded_frame(path, &stack.key.location, MAX_FRAME_CHARS);
    }
    let n = frames.len();
    let (head, tail) = if n > MAX_DEPTH {
        (MAX_DEPTH / 2, MAX_DEPTH - MAX_DEPTH / 2 - 1)
    } else {
        (n, 0)
    };
    for frame in &frames[..head] {
        path.push(';');
        sanitize::folded_frame(path, frame, MAX_FRAME_CHARS);
    }
    if tail > 0 {
        path.push_str(&format!(";[{} frames cut]", n - head - tail));
        for frame in &frames[n - tail..] {
            path.push(';');
            sanitize::folded_frame(path, frame, MAX_FRAME_CHARS);
        }
    }
}

/// Collapsed-stack lines `REASON;[netns N, device D];outer;...;drop_site weight`, one per
/// distinct path.
///
/// The drop reason is the root frame, so a graph splits first by reason, then by the
/// namespace and device the key has (two namespaces' drops are two towers, not one). Lines are sorted by
/// path, identical paths are merged (their weights summed, saturating), stacks of zero weight
/// are left out, and every frame is sanitized ([`sanitize::folded_frame`]: `;` becomes `:`,
/// whitespace one space, controls and bidi characters visibly escaped, at most
/// [`MAX_FRAME_CHARS`]). A stack without frames is drawn as its drop location alone. Stacks
/// deeper than [`MAX_DEPTH`] are cut in the middle with a marker, and the text stays within
/// about [`MAX_FOLDED_BYTES`]: the heaviest paths are kept, the rest merged per reason. The
/// weights are sampled estimates.
pub fn folded(stacks: &[StackCount]) -> String {
    let mut order: Vec<&StackCount> = stacks.iter().filter(|s| s.weight > 0).collect();
    order.sort_by_key(|s| std::cmp::Reverse(s.weight));
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    let mut bytes = 0usize;
    let mut path = String::new();
    for stack in order {
        path_of(stack, &mut path);
        if let Some(weight) = merged.get_mut(path.as_str()) {
            *weight = weight.saturating_add(stack.weight);
            continue;
        }
        if bytes.saturating_add(path.len() + 22) > MAX_FOLDED_BYTES {
            // Over the limit: the weight goes to its reason's merged line.
            let reason = path.split(';').next().unwrap_or(UNKNOWN_FRAME);
            path = format!("{reason};{MERGED}");
            if let Some(weight) = merged.get_mut(path.as_str()) {
                *weight = weight.saturating_add(stack.weight);
                continue;
            }
        }
        bytes += path.len() + 22;
        merged.insert(path.clone(), stack.weight);
    }
    let mut out = String::with_capacity(merged.keys().map(|p| p.len() + 12).sum());
    for (path, weight) in &merged {
        out.push_str(path);
        out.push(' ');
        out.push_str(&weight.to_string());
        out.push('\n');
    }
    out
}

/// Folded text checked line by line, with its total weight.
#[derive(Debug)]
pub(super) struct CheckedFolded {
    /// The valid stack lines, trimmed, one per line.
    pub text: String,
    /// Sum of the counts (checked: at most 2^63 - 1).
    pub total: u64,
}

/// Reads a folded file (a baseline) of at most [`MAX_FOLDED_BYTES`]: a larger input (or one
/// that never ends, such as `/dev/zero`) is refused without being read further.
pub fn read_folded(path: &Path) -> anyhow::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FOLDED_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() > MAX_FOLDED_BYTES {
        bail!(
            "larger than {} MiB, the limit of folded input (a folded file of a recording stays \
             within it)",
            MAX_FOLDED_BYTES >> 20
        );
    }
    String::from_utf8(bytes).context("not UTF-8 text")
}

/// Checks folded text read from elsewhere (a baseline file, say) before it is drawn.
///
/// Blank lines and lines starting with `#` are skipped. Every other line must be
/// `frame;frame;... count`, the count a non-negative integer (a fractional part is truncated,
/// as inferno does). `what` names the input in the error. Each line gets the limits of a
/// recording's stacks: frames sanitized and cut as [`folded`] does (what it wrote comes back
/// unchanged), lines deeper than a stack [`folded`] writes cut in the middle, at most
/// [`MAX_FOLDED_BYTES`] in all.
pub(super) fn check_folded(input: &str, what: &str) -> anyhow::Result<CheckedFolded> {
    if input.len() > MAX_FOLDED_BYTES {
        bail!(
            "{what}: larger than {} MiB, the limit of folded input",
            MAX_FOLDED_BYTES >> 20
        );
    }
    let mut text = String::with_capacity(input.len());
    let mut total = 0u64;
    for (i, line) in input.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((stack, count)) = parse_line(line) else {
            let shown: String = line.chars().take(80).collect();
            bail!(
                "{what}, line {}: expected folded stacks (`frame;frame;... count`), got {shown:?}",
                i + 1
            );
        };
        // Inferno adds the counts up and subtracts them (differential graphs) as 64-bit
        // signed numbers: a larger sum, only possible in a crafted input, is refused.
        total = total
            .checked_add(count)
            .filter(|&t| t <= i64::MAX as u64)
            .ok_or_else(|| {
                anyhow::anyhow!("{what}: the counts add up to more than 2^63, too much to draw")
            })?;
        bounded_line(&mut text, stack);
        text.push(' ');
        text.push_str(&count.to_string());
        text.push('\n');
    }
    Ok(CheckedFolded { text, total })
}

/// Appends a folded stack with every frame sanitized and cut (one character more than
/// [`MAX_FRAME_CHARS`]: the `…` of a frame [`folded`] cut), and at most [`MAX_LINE_FRAMES`]
/// frames around a `[N frames cut]` marker.
fn bounded_line(out: &mut String, stack: &str) {
    let n = stack.split(';').count();
    let (head, tail) = if n > MAX_LINE_FRAMES {
        (
            MAX_LINE_FRAMES / 2,
            MAX_LINE_FRAMES - MAX_LINE_FRAMES / 2 - 1,
        )
    } else {
        (n, 0)
    };
    for (i, frame) in stack.split(';').enumerate() {
        if i == head && tail > 0 {
            out.push_str(&format!(";[{} frames cut]", n - head - tail));
        }
        if i >= head && i < n - tail {
            continue;
        }
        if i > 0 {
            out.push(';');
        }
        sanitize::folded_frame(out, frame, MAX_FRAME_CHARS + 1);
    }
}

/// Checked folded text with at most `max` rectangles: the distinct frames of the tree its
/// paths make, as the graph draws them. The heaviest stacks are kept whole; the weight of the
/// others goes to one `[N stacks elided: graph limit]` frame under their reason (or under a
/// root frame of that name, when even that would not fit). Every line of `text` must be
/// `path count`, as [`check_folded`] gives.
pub(super) fn limit_rectangles(text: &str, max: usize) -> String {
    let mut lines: Vec<(&str, u64)> = text
        .lines()
        .filter_map(|l| {
            let (path, count) = l.rsplit_once(' ')?;
            Some((path, count.parse().ok()?))
        })
        .collect();
    lines.sort_by_key(|&(_, w)| std::cmp::Reverse(w));
    // The tree so far: (parent, frame) -> node; the root's children have parent 0.
    let mut nodes: HashMap<(u32, &str), u32> = HashMap::new();
    // One node is kept for the root frame of the stacks elided under no reason, and one per
    // reason (up to a quarter of the nodes) for the frame of the stacks elided under it.
    let room = max.saturating_sub(1);
    let reasons = lines
        .iter()
        .map(|(p, _)| p.split(';').next().unwrap_or(UNKNOWN_FRAME))
        .collect::<std::collections::HashSet<_>>()
        .len();
    let room_whole = room.saturating_sub(reasons.min(max / 4));
    let mut kept = Vec::with_capacity(lines.len());
    // Per reason (or `None`: at the root): how many stacks were elided, and their weight.
    let mut elided: BTreeMap<Option<&str>, (usize, u64)> = BTreeMap::new();
    let mut elide = |reason, weight| {
        let e: &mut (usize, u64) = elided.entry(reason).or_default();
        *e = (e.0 + 1, e.1.saturating_add(weight));
    };
    for (path, weight) in lines {
        let mut parent = 0;
        let mut frames = path.split(';');
        let mut new = 0;
        for frame in frames.by_ref() {
            match nodes.get(&(parent, frame)) {
                Some(&id) => parent = id,
                None => {
                    new = 1;
                    break;
                }
            }
        }
        new += frames.count();
        if nodes.len() + new <= room_whole {
            let mut parent = 0;
            for frame in path.split(';') {
                let next = nodes.len() as u32 + 1;
                parent = *nodes.entry((parent, frame)).or_insert(next);
            }
            kept.push((path, weight));
            continue;
        }
        let reason = path.split(';').next().unwrap_or(UNKNOWN_FRAME);
        if nodes
            .get(&(0, reason))
            .is_some_and(|&id| nodes.contains_key(&(id, ELIDED_NODE)))
        {
            elide(Some(reason), weight);
            continue;
        }
        // A new reason's elided frame needs its reason's node (unless drawn) and its own.
        let need = 1 + usize::from(!nodes.contains_key(&(0, reason)));
        if nodes.len() + need <= room {
            let next = nodes.len() as u32 + 1;
            let id = *nodes.entry((0, reason)).or_insert(next);
            let next = nodes.len() as u32 + 1;
            nodes.insert((id, ELIDED_NODE), next);
            elide(Some(reason), weight);
        } else {
            elide(None, weight);
        }
    }
    let mut out = String::with_capacity(kept.iter().map(|(p, _)| p.len() + 22).sum());
    for (path, weight) in kept {
        out.push_str(path);
        out.push(' ');
        out.push_str(&weight.to_string());
        out.push('\n');
    }
    for (reason, (n, weight)) in elided {
        if let Some(reason) = reason {
            out.push_str(reason);
            out.push(';');
        }
        out.push_str(&format!("[{n} stacks elided: graph limit] {weight}\n"));
    }
    out
}

/// The key of an elided frame in the tree while it is built (its text names the count later).
const ELIDED_NODE: &str = "[stacks elided: graph limit]";

/// Splits a folded line into its stack and count.
fn parse_line(line: &str) -> Option<(&str, u64)> {
    let (stack, count) = line.rsplit_once(|c: char| c.is_ascii_whitespace())?;
    let stack = stack.trim_end();
    let whole = match count.split_once('.') {
        Some((whole, frac)) if frac.bytes().all(|b| b.is_ascii_digit()) => whole,
        Some(_) => return None,
        None => count,
    };
    if stack.is_empty() || whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stack, whole.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::snapshot::{DropKey, Reason};

    fn stack(reason: &str, frames: &[&str], weight: u64) -> StackCount {
        let frames: Arc<[Arc<str>]> = frames.iter().map(|f| Arc::from(*f)).collect();
        StackCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: Arc::from(reason),
                },
                location: frames
                    .last()
                    .cloned()
                    .unwrap_or_else(|| Arc::from("site+0x1")),
                attr: Default::default(),
            },
            frames,
            weight,
            samples: 1,
        }
    }

    #[test]
    fn reason_is_root_and_frames_keep_their_order() {
        let out = folded(&[stack(
            "NO_SOCKET",
            &["ip_rcv", "udp_rcv", "__udp4_lib_rcv"],
            7,
        )]);
        assert_eq!(out, "NO_SOCKET;ip_rcv;udp_rcv;__udp4_lib_rcv 7\n");
    }

    /// Two namespaces' drops of one reason and path are two towers, each under a frame naming
    /// its namespace and device; counts without them keep the reason as the only root frame.
    #[test]
    fn namespace_and_device_are_a_frame_under_the_reason() {
        let in_ns = |name: Option<&str>, inode: u64, dev: Option<&str>, w: u64| {
            let mut s = stack("NO_SOCKET", &["ip_rcv", "__udp4_lib_rcv"], w);
            s.key.attr.netns = Some(inode);
            s.key.attr.netns_name = name.map(Arc::from);
            s.key.attr.device = dev.map(Arc::from);
            s
        };
        let out = folded(&[
            in_ns(Some("docker:web"), 4026532500, Some("eth0"), 7),
            in_ns(None, 4026532600, Some("eth0"), 5),
            in_ns(Some("host"), 4026531840, None, 2),
        ]);
        assert_eq!(
            out,
            "NO_SOCKET;[netns 4026532600, device eth0];ip_rcv;__udp4_lib_rcv 5\n\
             NO_SOCKET;[netns docker:web, device eth0];ip_rcv;__udp4_lib_rcv 7\n\
             NO_SOCKET;[netns host];ip_rcv;__udp4_lib_rcv 2\n"
        );
    }

    #[test]
    fn identical_paths_merge_and_lines_are_sorted() {
        let out = folded(&[
            stack("NO_SOCKET", &["b", "c"], 3),
            stack("NETFILTER_DROP", &["a", "nf_hook_slow"], 5),
            stack("NO_SOCKET", &["b", "c"], 4),
            stack("NO_SOCKET", &["a"], 1),
        ]);
        assert_eq!(
            out,
            "NETFILTER_DROP;a;nf_hook_slow 5\nNO_SOCKET;a 1\nNO_SOCKET;b;c 7\n"
        );
    }

    #[test]
    fn same_frames_under_different_reasons_stay_apart() {
        let out = folded(&[stack("A", &["f"], 1), stack("B", &["f"], 2)]);
        assert_eq!(out, "A;f 1\nB;f 2\n");
    }

    #[test]
    fn weights_sum_and_saturate() {
        let out = folded(&[stack("R", &["f"], u64::MAX - 1), stack("R", &["f"], 5)]);
        assert_eq!(out, format!("R;f {}\n", u64::MAX));
    }

    #[test]
    fn zero_weights_are_left_out() {
        assert_eq!(folded(&[stack("R", &["f"], 0)]), "");
        assert_eq!(
            folded(&[stack("R", &["f"], 0), stack("R", &["g"], 2)]),
            "R;g 2\n"
        );
        assert_eq!(folded(&[]), "");
    }

    #[test]
    fn frames_are_sanitized() {
        let out = folded(&[stack(
            " NO;SOCKET\n",
            &[
                "a;b",
                "line\nbreak",
                "tab\there  ",
                "  ",
                "\r\n",
                "x [mod] ",
            ],
            1,
        )]);
        assert_eq!(
            out,
            "NO:SOCKET;a:b;line break;tab here;[unknown];[unknown];x [mod] 1\n"
        );
        for line in out.lines() {
            let (stack, count) = parse_line(line).expect("sanitized line parses");
            assert_eq!(count, 1);
            assert!(stack.split(';').all(|f| !f.is_empty() && f.trim() == f));
        }
    }

    #[test]
    fn empty_reason_names_use_the_code_and_empty_stacks_use_the_location() {
        let out = folded(&[stack("", &[], 4)]);
        assert_eq!(out, "UNKNOWN(2);site+0x1 4\n");
    }

    #[test]
    fn check_folded_accepts_folded_output_and_sums_it() {
        let text = "R;a;b 3\n\n# comment\nR;a 2.0\n  R;c   5  \n";
        let checked = check_folded(text, "baseline").expect("valid");
        assert_eq!(checked.total, 10);
        assert_eq!(checked.text, "R;a;b 3\nR;a 2\nR;c 5\n");
    }

    #[test]
    fn check_folded_names_the_bad_line() {
        let err = check_folded("R;a 1\n<svg>\n", "baseline").expect_err("invalid");
        let msg = err.to_string();
        assert!(msg.contains("baseline, line 2"), "{msg}");
        for bad in ["R;a", "R;a x", "R;a -1", "R;a 1.x", " 5"] {
            assert!(
                check_folded(bad, "in").is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    /// The folded output of a fixed input, against `testdata/folded.golden`.
    /// Set `DROPSCOPE_BLESS=1` to rewrite the golden file after an intended change.
    #[test]
    fn folded_golden() {
        let stacks = [
            stack(
                "NO_SOCKET",
                &["entry", "ip_rcv", "udp_rcv", "__udp4_lib_rcv+0x5d [kernel]"],
                40,
            ),
            stack(
                "NO_SOCKET",
                &["entry", "ip_rcv", "udp_rcv", "__udp4_lib_rcv+0x5d [kernel]"],
                2,
            ),
            stack(
                "NO_SOCKET",
                &["entry", "ip_rcv", "tcp_v4_rcv+0x8f [kernel]"],
                9,
            ),
            stack(
                "NETFILTER_DROP",
                &["entry", "ip_rcv", "nf_hook_slow+0xa2 [kernel]"],
                1000,
            ),
            stack(
                "NETFILTER_DROP",
                &["entry", "ip_rcv", "nf_hook_slow+0xa2 [kernel]"],
                0,
            ),
            stack(
                "OTHERHOST",
                &[
                    "entry",
                    "ip_rcv_core;weird\nname",
                    "ip_rcv_core+0x1 [kernel]",
                ],
                1,
            ),
            stack(
                "NOT_SPECIFIED",
                &["virtnet_poll [virtio_net]", "kfree_skb"],
                17,
            ),
        ];
        let got = folded(&stacks);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/flamegraph/testdata/folded.golden");
        if std::env::var_os("DROPSCOPE_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, &got).expect("write golden file");
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("read {}: {e} (run with DROPSCOPE_BLESS=1)", path.display())
        });
        assert_eq!(
            got, want,
            "folded output changed; run with DROPSCOPE_BLESS=1 if intended"
        );
    }
}
