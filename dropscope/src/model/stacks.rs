//! The kernel call stacks of a selection: distinct paths and a tree (drop site first), each with
//! its share and estimated count. Stack counts are sampled estimates; only per-key counts are
//! exact.
use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use super::StackCount;

/// Symbolized frames, outermost caller first.
type Frames = Arc<[Arc<str>]>;

/// One distinct kernel stack of the selection, with the reason it ended in.
#[derive(Clone, Debug, PartialEq)]
pub struct StackPath {
    /// The drop reason name.
    pub reason: Arc<str>,
    /// Frames, outermost caller first, the drop site last.
    pub frames: Frames,
    /// Estimated drops through this path (a sampled estimate).
    pub weight: u64,
    /// Stack samples actually captured for this path.
    pub samples: u64,
    /// Percentage of the selection's estimated drops.
    pub share: f64,
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Groups stack counts by (reason, frames), heaviest first. Entries of different locations that
/// share a reason and frames are merged.
pub fn paths<'a>(stacks: impl IntoIterator<Item = &'a StackCount>) -> Vec<StackPath> {
    let mut grouped: HashMap<(&Arc<str>, &Frames), (u64, u64)> = HashMap::new();
    for s in stacks {
        let e = grouped.entry((&s.key.reason.name, &s.frames)).or_default();
        e.0 = e.0.saturating_add(s.weight);
        e.1 = e.1.saturating_add(s.samples);
    }
    let total = grouped.values().fold(0u64, |t, v| t.saturating_add(v.0));
    let mut out: Vec<StackPath> = grouped
        .into_iter()
        .map(|((reason, frames), (weight, samples))| StackPath {
            reason: reason.clone(),
            frames: frames.clone(),
            weight,
            samples,
            share: percent(weight, total),
        })
        .collect();
    out.sort_by(|a, b| {
        b.weight
            .cmp(&a.weight)
            .then_with(|| a.reason.cmp(&b.reason))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    out
}

/// What a tree node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A drop reason: the root of the stacks that ended in it.
    Reason,
    /// A kernel frame.
    Frame,
}

#[derive(Clone, Debug, Default)]
struct Node {
    weight: u64,
    samples: u64,
    children: BTreeMap<Arc<str>, Node>,
}

impl Node {
    /// Children heaviest first, then by name.
    fn sorted_children(&self) -> Vec<(&Arc<str>, &Node)> {
        let mut c: Vec<_> = self.children.iter().collect();
        c.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then_with(|| a.0.cmp(b.0)));
        c
    }
}

/// One line of a flattened [`StackTree`].
#[derive(Clone, Debug, PartialEq)]
pub struct TreeLine {
    /// Indentation level: frames sit one level below their reason and go one level deeper only
    /// where the tree branches, so a long single call chain stays at one level.
    pub depth: usize,
    /// Reason or frame.
    pub kind: NodeKind,
    /// The reason name or symbolized frame.
    pub label: Arc<str>,
    /// Estimated drops through this node (a sampled estimate).
    pub weight: u64,
    /// Samples captured through this node.
    pub samples: u64,
    /// Percentage of the tree's estimated drops.
    pub share: f64,
    /// Whether this line starts a run: a root, a branch, or a node lighter than its parent. The
    /// lines after it, up to the next head, carry the same numbers.
    pub head: bool,
    /// Whether this frame is where a softirq began (see [`softirq_entry`]): the frames between
    /// it and the drop site ran in the softirq, not in the task it interrupted.
    pub softirq: bool,
}

/// Whether `frame` (a symbol, with or without its `+0x..` offset) is where the kernel starts
/// running pending softirqs (`handle_softirqs` since 6.8, `__do_softirq` before).
pub fn softirq_entry(frame: &str) -> bool {
    let name = frame.split_once('+').map_or(frame, |(n, _)| n).trim();
    matches!(name, "handle_softirqs" | "__do_softirq")
}

/// The stacks of a selection as a tree: reason at the root, then frames from the drop site out
/// to the outermost caller (innermost first: what a short screen must show first is where the
/// packet was dropped; stacks branch where different callers reached it).
#[derive(Clone, Debug, Default)]
pub struct StackTree {
    root: Node,
}

impl StackTree {
    /// Builds the tree of the given stack counts (entries with no samples are skipped).
    pub fn build<'a>(stacks: impl IntoIterator<Item = &'a StackCount>) -> Self {
        let mut root = Node::default();
        for s in stacks {
            if s.samples == 0 && s.weight == 0 {
                continue;
            }
            root.weight = root.weight.saturating_add(s.weight);
            root.samples = root.samples.saturating_add(s.samples);
            let mut node = root.children.entry(s.key.reason.name.clone()).or_default();
            node.weight = node.weight.saturating_add(s.weight);
            node.samples = node.samples.saturating_add(s.samples);
            for f in s.frames.iter().rev() {
                node = node.children.entry(f.clone()).or_default();
                node.weight = node.weight.saturating_add(s.weight);
                node.samples = node.samples.saturating_add(s.samples);
            }
        }
        Self { root }
    }

    /// Whether the selection has no stacks at all.
    pub fn is_empty(&self) -> bool {
        self.root.children.is_empty()
    }

    /// Estimated drops of the whole selection (a sampled estimate).
    pub fn total_weight(&self) -> u64 {
        self.root.weight
    }

    /// Stack samples captured in the whole selection.
    pub fn total_samples(&self) -> u64 {
        self.root.samples
    }

    /// The tree as lines, depth first, heaviest children first.
    pub fn lines(&self) -> Vec<TreeLine> {
        let mut out = Vec::new();
        let total = self.root.weight;
        // Explicit stack: (node label, node, depth, kind, head).
        let mut todo: Vec<(&Arc<str>, &Node, usize, NodeKind, bool)> = self
            .root
            .sorted_children()
            .into_iter()
            .rev()
            .map(|(l, n)| (l, n, 0, NodeKind::Reason, true))
            .collect();
        while let Some((label, node, depth, kind, head)) = todo.pop() {
            out.push(TreeLine {
                depth,
                kind,
                label: label.clone(),
                weight: node.weight,
                samples: node.samples,
                share: percent(node.weight, total),
                head,
                softirq: kind == NodeKind::Frame && softirq_entry(label),
            });
            let children = node.sorted_children();
            let branches = children.len() > 1;
            let child_depth = if branches || kind == NodeKind::Reason {
                depth + 1
            } else {
                depth
            };
            for (l, n) in children.into_iter().rev() {
                let head = branches || n.weight != node.weight;
                todo.push((l, n, child_depth, NodeKind::Frame, head));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DropKey, Reason};

    fn sc(reason: &str, frames: &[&str], weight: u64, samples: u64) -> StackCount {
        let frames: Vec<Arc<str>> = frames.iter().map(|f| Arc::from(*f)).collect();
        StackCount {
            key: DropKey {
                reason: Reason {
                    code: 2,
                    name: reason.into(),
                },
                location: frames.last().cloned().unwrap_or_else(|| "?".into()),
                attr: Default::default(),
            },
            frames: frames.into(),
            weight,
            samples,
        }
    }

    #[test]
    fn paths_group_and_share() {
        let stacks = [
            sc("NO_SOCKET", &["a", "b", "udp"], 30, 3),
            sc("NO_SOCKET", &["a", "c", "udp"], 10, 1),
            sc("NO_SOCKET", &["a", "b", "udp"], 20, 2),
        ];
        let p = paths(&stacks);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].weight, p[0].samples), (50, 5));
        assert_eq!(&*p[0].frames[1], "b");
        assert!((p[0].share - 83.333).abs() < 0.01);
        assert!((p[1].share - 16.666).abs() < 0.01);
        assert!(paths(&[]).is_empty());
    }

    #[test]
    fn tree_indents_only_at_branches() {
        let stacks = [
            sc(
                "NO_SOCKET",
                &["entry", "ip_rcv", "udp_rcv", "drop_udp"],
                30,
                3,
            ),
            sc(
                "NO_SOCKET",
                &["entry", "ip_rcv", "tcp_rcv", "drop_tcp"],
                10,
                1,
            ),
            sc("OTHER", &["x", "y"], 60, 1),
        ];
        let t = StackTree::build(&stacks);
        assert_eq!(t.total_weight(), 100);
        assert_eq!(t.total_samples(), 5);
        let lines = t.lines();
        let got: Vec<(usize, &str, u64, bool)> = lines
            .iter()
            .map(|l| (l.depth, &*l.label, l.weight, l.head))
            .collect();
        // The drop site first: the stacks branch at their different drop sites.
        assert_eq!(
            got,
            [
                (0, "OTHER", 60, true),
                (1, "y", 60, false),
                (1, "x", 60, false),
                (0, "NO_SOCKET", 40, true),
                (1, "drop_udp", 30, true),
                (1, "udp_rcv", 30, false),
                (1, "ip_rcv", 30, false),
                (1, "entry", 30, false),
                (1, "drop_tcp", 10, true),
                (1, "tcp_rcv", 10, false),
                (1, "ip_rcv", 10, false),
                (1, "entry", 10, false),
            ]
        );
        assert_eq!(lines[0].kind, NodeKind::Reason);
        assert_eq!(lines[1].kind, NodeKind::Frame);
        assert!((lines[3].share - 40.0).abs() < 1e-9);
        assert!((lines[8].share - 10.0).abs() < 1e-9);
        assert!(lines.iter().all(|l| !l.softirq));
    }

    #[test]
    fn a_prefix_path_makes_a_head() {
        let stacks = [sc("R", &["b", "a"], 5, 1), sc("R", &["c", "b", "a"], 3, 1)];
        let lines = StackTree::build(&stacks).lines();
        let heads: Vec<(&str, bool)> = lines.iter().map(|l| (&*l.label, l.head)).collect();
        assert_eq!(
            heads,
            [("R", true), ("a", false), ("b", false), ("c", true)]
        );
    }

    #[test]
    fn the_frame_a_softirq_began_at_is_marked() {
        assert!(softirq_entry("handle_softirqs+0x1a3") && softirq_entry("__do_softirq"));
        assert!(!softirq_entry("do_softirq") && !softirq_entry("net_rx_action"));
        let stacks = [sc(
            "R",
            &["ksys", "handle_softirqs+0x10", "ip_rcv", "drop"],
            1,
            1,
        )];
        let marked: Vec<String> = (StackTree::build(&stacks).lines().iter())
            .filter(|l| l.softirq)
            .map(|l| l.label.to_string())
            .collect();
        assert_eq!(marked, ["handle_softirqs+0x10"]);
    }

    #[test]
    fn empty_selection_has_an_empty_tree() {
        let t = StackTree::build(&[]);
        assert!(t.is_empty());
        assert!(t.lines().is_empty());
        assert_eq!(t.total_weight(), 0);
    }
}
