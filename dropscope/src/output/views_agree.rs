//! Property: for any snapshot, grouping and filter, every view of the same drops shows the same
//! total: the text report, the JSON report, the TUI's table rows, the metrics' series and the
//! folded stacks (whose weights are the rows' counts).
use std::{sync::Arc, time::Duration};

use proptest::prelude::*;

use super::{json, write_table_fitted};
use crate::model::{
    Attribution, DropCount, DropKey, Reason, Snapshot, StackCount,
    group::{self, Dim, Filter, NetnsFilter},
    table::{SortKey, Tracker},
};

/// A key from small pools, so that keys collide under coarser groupings.
fn key() -> impl Strategy<Value = DropKey> {
    (0..3u32, 0..3usize, 0..3u64, 0..3u32, 0..2usize, 0..3u16).prop_map(
        |(reason, loc, ns, ifindex, proto, port)| DropKey {
            reason: Reason {
                code: reason + 2,
                name: Arc::from(["NO_SOCKET", "NETFILTER_DROP", "IP_NOPROTO"][reason as usize]),
            },
            location: Arc::from(["a+0x1", "b+0x2", "c+0x3"][loc]),
            attr: Attribution {
                netns: Some(4026532000 + ns),
                netns_cookie: None,
                netns_name: Some(Arc::from(format!("ns{ns}"))),
                ifindex: Some(ifindex + 1),
                device: Some(Arc::from(["lo", "eth0", "veth1"][ifindex as usize])),
                protocol: Some(Arc::from(["udp", "tcp"][proto])),
                port: Some(53 + port),
                socket: None,
                culprit: None,
            },
        },
    )
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (
        prop::collection::vec((key(), 1..10_000u64), 0..24),
        0..50u64,
    )
        .prop_map(|(keys, overflow)| {
            let mut merged: std::collections::HashMap<DropKey, u64> = Default::default();
            for (k, n) in keys {
                *merged.entry(k).or_default() += n;
            }
            let drops: Vec<DropCount> = (merged.into_iter())
                .map(|(key, count)| DropCount { key, count })
                .collect();
            let stacks = (drops.iter())
                .map(|d| StackCount {
                    key: d.key.clone(),
                    frames: Arc::from(vec![Arc::from("f"), d.key.location.clone()]),
                    weight: d.count,
                    samples: 1,
                })
                .collect();
            let total = drops.iter().map(|d| d.count).sum::<u64>() + overflow;
            Snapshot {
                elapsed: Duration::from_secs(1),
                total,
                overflow,
                drops,
                stacks,
                ..Snapshot::default()
            }
        })
}

fn filter() -> impl Strategy<Value = Filter> {
    (
        prop::option::of(0..3u64),
        prop::option::of(0..3usize),
        prop::option::of(0..2usize),
    )
        .prop_map(|(ns, dev, reason)| Filter {
            netns: ns.map(|n| NetnsFilter {
                inode: Some(4026532000 + n),
                text: format!("ns{n}"),
            }),
            device: dev.map(|d| ["lo", "eth0", "veth1"][d].to_string()),
            reasons: reason
                .map(|r| vec![["NO_SOCKET", "IP_NOPROTO"][r].to_string()])
                .unwrap_or_default(),
            ..Filter::default()
        })
}

proptest! {
    #[test]
    fn every_view_shows_the_same_total(
        s in snapshot(),
        by in prop::sample::subsequence(Dim::ALL.to_vec(), 0..=6),
        f in filter(),
    ) {
        let v = group::apply(&s, &f, &by);
        prop_assert!(v.invariant_holds());
        let keyed = v.keyed_sum();
        // JSON.
        let j = serde_json::to_value(json(&v, 1.0)).expect("json");
        let rows: u64 = (j["drops"].as_array().expect("drops").iter())
            .map(|d| d["count"].as_u64().expect("count"))
            .sum();
        prop_assert_eq!(rows, keyed);
        prop_assert_eq!(j["total"].as_u64(), Some(v.total));
        // Text: the COUNT column and the total line.
        let mut text = Vec::new();
        write_table_fitted(&v, 1.0, 100, &mut text).expect("table");
        let text = String::from_utf8(text).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        let counted: u64 = lines[1..]
            .iter()
            .take_while(|l| !l.starts_with("total ") && !l.starts_with("(no drops)"))
            .map(|l| {
                let t: Vec<&str> = l.split_whitespace().collect();
                // Counts are written with thousands separators.
                t[t.len() - 2].replace(',', "").parse::<u64>().expect("a count")
            })
            .sum();
        prop_assert_eq!(counted, keyed, "{}", text);
        let total_line = format!("total {} drops", crate::format::count(v.total));
        prop_assert!(text.contains(&total_line), "{}", text);
        // The TUI's table.
        let mut t = Tracker::new();
        t.push(v.clone());
        let shown: u64 = t.rows(SortKey::Count, "").iter().map(|r| r.count).sum();
        prop_assert_eq!(shown, keyed);
        // Folded stacks: a row's stacks weigh its count.
        let folded = crate::flamegraph::folded(&v.stacks);
        let weights: u64 = folded
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(_, w)| w.parse::<u64>().expect("weight"))
            .sum();
        prop_assert_eq!(weights, keyed);
        // Metrics: every series, plus what is summed as other and the overflow.
        #[cfg(feature = "live")]
        {
            let mut series = crate::serve::series::Selection::new(5);
            prop_assert_eq!(series.select(&v).sum(), v.total);
        }
    }
}
