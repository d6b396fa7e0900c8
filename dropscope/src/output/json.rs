//! The report's JSON schema and how a snapshot fills it (with the tests of the report's
//! writers, text and JSON alike).
use std::collections::HashMap;

use serde::Serialize;

use super::rows::{largest_first, program_rows, sorted};
use crate::{
    explain::{Guide, fill},
    ledger::{
        CounterDelta, KernelView, Ratio, Unseen,
        reconcile::{Headline, LayerTotal, Row},
    },
    model::{DropKey, Sample, Snapshot},
};

/// One row of the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonDrop<'a> {
    /// Reason name, e.g. `NO_SOCKET`.
    pub reason: &'a str,
    /// The kernel's enum value.
    pub reason_code: u32,
    /// Symbolized kernel location.
    pub location: &'a str,
    /// Network namespace inode (null when not grouped by namespace or unknown).
    pub netns: Option<u64>,
    /// Network namespace cookie: which namespace had that inode (an inode freed is given to a
    /// later namespace, a cookie never is). Absent where not known (older recordings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_cookie: Option<u64>,
    /// Its human name (container, pod, unit, `ip netns` name), or null.
    pub netns_name: Option<&'a str>,
    /// Interface name, or null.
    pub device: Option<&'a str>,
    /// L4 protocol (`udp`, `tcp`, `icmp`, `icmpv6` or the number), or null when not IP.
    pub protocol: Option<&'a str>,
    /// Destination port: present only when grouped by port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The socket the drops had reached: present only when grouped by socket and the drops
    /// had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<crate::model::socket::SocketJson<'a>>,
    /// Exact count.
    pub count: u64,
    /// The first few dropped packets of this key (where kept).
    pub samples: Vec<JsonSample>,
    /// What the reason means and what to check: one paragraph of the reason guide.
    pub hint: String,
    /// The guide's check commands for it, filled in with its namespace, device and port
    /// (see `explain::fill`), ready to copy.
    pub check: Vec<String>,
    /// Who dropped them (see `culprit`): absent where not attributed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprit: Option<crate::culprit::Culprit>,
}

/// A sampled packet in the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonSample {
    /// Source address.
    pub src: Option<String>,
    /// Destination address.
    pub dst: Option<String>,
    /// Source port.
    pub sport: Option<u16>,
    /// Destination port.
    pub dport: Option<u16>,
    /// L4 protocol name or number.
    pub protocol: Option<String>,
    /// Length as the kernel saw it.
    pub len: u32,
}

/// The sampled packets of each key, found by hashing the key (not by scanning every key's
/// samples for every row). A key's packets go to its first row only, so no recording can make
/// the report print more packets than it holds.
#[derive(Debug)]
struct SamplesByKey<'a>(HashMap<&'a DropKey, Vec<&'a Sample>>);

impl<'a> SamplesByKey<'a> {
    fn new(s: &'a Snapshot) -> Self {
        let mut by_key: HashMap<&DropKey, Vec<&Sample>> = HashMap::new();
        for k in &s.samples {
            by_key.entry(&k.key).or_default().extend(&k.packets);
        }
        SamplesByKey(by_key)
    }

    fn take(&mut self, key: &DropKey) -> Vec<JsonSample> {
        let packets = self.0.remove(key).unwrap_or_default();
        packets
            .into_iter()
            .map(|p| {
                let h = p.headers();
                JsonSample {
                    src: h.src.map(|a| a.to_string()),
                    dst: h.dst.map(|a| a.to_string()),
                    sport: h.sport,
                    dport: h.dport,
                    protocol: h.protocol.map(crate::model::group::protocol_name),
                    len: p.len,
                }
            })
            .collect()
    }
}

/// The JSON report: `total`, `overflow` and `drops`, plus the window length.
#[derive(Debug, Serialize)]
pub struct JsonReport<'a> {
    /// Every drop counted.
    pub total: u64,
    /// Drops that did not fit in the keyed map (counted, not keyed).
    pub overflow: u64,
    /// Probe runs the kernel skipped (nested on a CPU): drops that could not be counted.
    pub missed: u64,
    /// Exact counts per (reason, location), largest first.
    pub drops: Vec<JsonDrop<'a>>,
    /// Seconds covered.
    pub seconds: f64,
    /// The kernel's own drop counters that grew over the same window, per network namespace
    /// (`null` when counting from a recording, which holds no kernel counters).
    pub kernel_counters: Option<Vec<WithName<CounterDelta>>>,
    /// Drops the kernel counted but the probe did not see (`null` as above). Never part of
    /// `drops` or `total`.
    pub unseen: Option<Vec<WithName<JsonUnseen>>>,
    /// The unseen drops, each once (`null` where `unseen` is): the entries whose `in_total`
    /// is true, added up.
    pub unseen_total: Option<u64>,
    /// Drops per packet the kernel handled, per namespace and device over the same window
    /// (`null` without the kernel's counters; see `ledger::ratio`).
    pub ratio: Option<Vec<WithName<Ratio>>>,
    /// Every layer's drops reconciled with the probe's (`null` without the kernel's counters,
    /// or where unseen is `null`).
    pub ledger: Option<JsonLedger>,
    /// The XDP and tc programs' drop verdicts over the same window, largest first (`null`
    /// without the kernel's counters, while drops are filtered, or where the counters span
    /// more than the window: a recorded window that starts before their first reading). Never
    /// part of `drops`
    /// or `total`: a packet a program dropped may also be in `drops` (freed through
    /// `kfree_skb`), and the ledger counts it once.
    pub programs: Option<Vec<JsonProgramDrop>>,
    /// The drops only a kernel counter saw, as rows like the probe's (reason: the counter,
    /// location: `(counter only)`), largest first (`null` where `unseen` is). Never part of
    /// `drops` or `total`, never a drop a row of `drops` counts, each drop once: they add up
    /// to `unseen_total`.
    pub counter_only: Option<Vec<JsonCounterOnlyDrop>>,
    /// What the reading of the kernel's counters noted: namespaces not read, programs whose
    /// verdicts were not counted, and why (`null` without the kernel's counters). The
    /// ledger's notes are among them; these are here too where there is no ledger.
    pub kernel_notes: Option<Vec<String>>,
    /// The samples not given to a probe's row: those of program rows, given to them by
    /// [`JsonReport::with_kernel`].
    #[serde(skip)]
    samples: SamplesByKey<'a>,
    /// Where its rows were counted: how their commands enter a namespace.
    #[serde(skip)]
    origin: fill::Origin,
}

/// One program's drop verdict over the window: a row like the probe's.
#[derive(Debug, Serialize)]
pub struct JsonProgramDrop {
    /// The verdict: `XDP_DROP`, `XDP_ABORTED` or `TC_SHOT`.
    pub reason: String,
    /// The program: `prog <name>#<id> (<hook>)`.
    pub location: String,
    /// The namespace it is attached in.
    pub netns: Option<u64>,
    /// Its name (`host` for the initial one), where known.
    pub netns_name: Option<String>,
    /// The interface it is attached to.
    pub device: Option<String>,
    /// Exact count over the window.
    pub count: u64,
    /// The first frames an XDP program dropped, from their network header (none for tc: a shot
    /// packet is freed through `kfree_skb`, where the probe samples it).
    pub samples: Vec<JsonSample>,
    /// What the verdict means and what to check.
    pub hint: String,
    /// The guide's check commands for it, filled in (as `drops` has them).
    pub check: Vec<String>,
}

/// Drops only a kernel counter saw over the window: a row like the probe's.
#[derive(Debug, Serialize)]
pub struct JsonCounterOnlyDrop {
    /// The counter: `TcpExt:ListenDrops`, `Udp:NoPorts`, ...
    pub reason: String,
    /// Always `(counter only)`.
    pub location: String,
    /// The counter's namespace.
    pub netns: Option<u64>,
    /// Its name (`host` for the initial one), where known.
    pub netns_name: Option<String>,
    /// The counter's interface, for a device's counter.
    pub device: Option<String>,
    /// The protocol its group counts (`tcp` for `TcpExt:`), where it says.
    pub protocol: Option<String>,
    /// What the counter alone counted over the window.
    pub count: u64,
    /// Where the kernel counts it and what to check.
    pub hint: String,
    /// The guide's check commands for it, filled in (as `drops` has them).
    pub check: Vec<String>,
    /// For `TcpExt:ListenDrops` (and `ListenOverflows`): the TCP listeners of its namespace
    /// whose accept queue was full when the counters were last read, with the process holding
    /// each where one was found; empty where none was full then (none is guessed), for other
    /// counters, and when replaying a recording before format 8 (which does not carry them).
    pub listeners: Vec<JsonListener>,
}

/// A TCP listener whose accept queue was full, on a counter-only row.
#[derive(Debug, Serialize)]
pub struct JsonListener {
    /// Local address and port: `127.0.0.1:8080`, `[::]:443`.
    pub addr: String,
    /// Local port.
    pub port: u16,
    /// Connections waiting to be accepted.
    pub accept_queue: u32,
    /// The accept queue's limit (the listener's backlog).
    pub backlog: u32,
    /// The socket's inode number.
    pub inode: u64,
    /// The pid of the process holding it, where one was found.
    pub pid: Option<u32>,
    /// That process's command name (escaped).
    pub comm: Option<String>,
    /// All of it in one line: `listener 127.0.0.1:8080 nginx[812] accept queue 2/1`.
    pub detail: String,
}

impl From<&crate::vocab::reading::Listener> for JsonListener {
    fn from(l: &crate::vocab::reading::Listener) -> Self {
        JsonListener {
            addr: crate::sanitize::terminal(&l.addr).into_owned(),
            port: l.port,
            accept_queue: l.queue,
            backlog: l.backlog,
            inode: l.inode,
            pid: l.process.as_ref().map(|h| h.pid),
            comm: (l.process.as_ref()).map(|h| crate::sanitize::terminal(&h.comm).into_owned()),
            detail: l.describe(),
        }
    }
}

/// The drop ledger in the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonLedger {
    /// Every drop once: `total = with_reason + counter_only + unexplained`.
    pub headline: Headline,
    /// The headline as a sentence.
    pub summary: String,
    /// Per layer and (namespace, device).
    pub layers: Vec<WithName<LayerTotal>>,
    /// Every layer counter that grew.
    pub counters: Vec<WithName<Row>>,
    /// How the matching was limited.
    pub notes: Vec<String>,
}

/// An unseen entry of the JSON report.
#[derive(Debug, Serialize)]
pub struct JsonUnseen {
    /// The counter and what it alone counted.
    #[serde(flatten)]
    pub unseen: Unseen,
    /// Whether `unseen_total` counts it: `false` for a counter whose drops another one counts
    /// too (`TcpExt:ListenOverflows` within `TcpExt:ListenDrops`).
    pub in_total: bool,
}

/// A kernel counter's entry with the name of its namespace beside the inode.
#[derive(Debug, Serialize)]
pub struct WithName<T> {
    /// The entry.
    #[serde(flatten)]
    pub item: T,
    /// The namespace's name (container, pod, `ip netns` name, `host`), where one is known.
    pub netns_name: Option<String>,
}

impl JsonReport<'_> {
    /// Adds the kernel counters and unseen drops of the same window.
    pub fn with_kernel(mut self, k: &KernelView) -> Self {
        let name = |netns: u64| {
            if netns == k.initial_netns {
                Some("host".to_string())
            } else {
                k.names.get(&netns).cloned()
            }
        };
        self.kernel_counters = Some(
            (k.counters.iter())
                .map(|c| WithName {
                    netns_name: name(c.netns),
                    item: c.clone(),
                })
                .collect(),
        );
        self.ratio = Some(
            (k.ratios.iter())
                .map(|r| WithName {
                    netns_name: if r.netns == 0 {
                        Some("all".into())
                    } else {
                        name(r.netns)
                    },
                    item: r.clone(),
                })
                .collect(),
        );
        self.ledger = k.ledger.as_ref().map(|l| JsonLedger {
            headline: l.headline,
            summary: l.headline.sentence(),
            layers: (l.layers.iter())
                .map(|t| WithName {
                    netns_name: name(t.netns),
                    item: t.clone(),
                })
                .collect(),
            counters: (l.counters.iter())
                .map(|r| WithName {
                    netns_name: name(r.netns),
                    item: r.clone(),
                })
                .collect(),
            notes: l.notes.clone(),
        });
        self.kernel_notes = Some(k.errors.clone());
        let samples = &mut self.samples;
        let mut ways = fill::Ways::new(Some(k.initial_netns), self.origin).named(&k.names);
        self.programs = k.programs.is_some().then(|| {
            program_rows(k)
                .into_iter()
                .map(|d| JsonProgramDrop {
                    samples: samples.take(&d.key),
                    reason: d.key.reason.name.to_string(),
                    location: d.key.location.to_string(),
                    netns: d.key.attr.netns,
                    netns_name: d.key.attr.netns.and_then(name),
                    device: d.key.attr.device.as_deref().map(str::to_string),
                    count: d.count,
                    hint: Guide::builtin().hint(&d.key.reason.name),
                    check: ways.checks(&d.key),
                })
                .collect()
        });
        self.counter_only = k.counter_only.as_ref().map(|rows| {
            largest_first(rows)
                .into_iter()
                .map(|d| JsonCounterOnlyDrop {
                    reason: d.key.reason.name.to_string(),
                    location: d.key.location.to_string(),
                    netns: d.key.attr.netns,
                    netns_name: d.key.attr.netns.and_then(name),
                    device: d.key.attr.device.as_deref().map(str::to_string),
                    protocol: d.key.attr.protocol.as_deref().map(str::to_string),
                    count: d.count,
                    hint: Guide::builtin().hint(&d.key.reason.name),
                    check: ways.checks(&d.key),
                    listeners: k.listeners_of(&d.key).iter().map(Into::into).collect(),
                })
                .collect()
        });
        self.unseen = k.unseen.as_ref().map(|u| {
            (u.iter().zip(k.unseen_summed()))
                .map(|(c, in_total)| WithName {
                    netns_name: name(c.netns),
                    item: JsonUnseen {
                        unseen: c.clone(),
                        in_total,
                    },
                })
                .collect()
        });
        self.unseen_total = k.unseen_total();
        self
    }
}

/// Builds the JSON report of a snapshot covering `seconds`.
pub fn json(s: &Snapshot, seconds: f64) -> JsonReport<'_> {
    json_from(s, seconds, fill::Origin::Live)
}

/// Builds the JSON report of a snapshot covering `seconds`, counted where `origin` says (its
/// commands enter a recording's namespaces by their recorded names only).
pub fn json_from(s: &Snapshot, seconds: f64, origin: fill::Origin) -> JsonReport<'_> {
    let mut samples = SamplesByKey::new(s);
    let mut ways = fill::Ways::new(s.kernel.as_ref().map(|k| k.initial_netns), origin);
    let mut culprits = crate::culprit::culprits(s);
    JsonReport {
        total: s.total,
        overflow: s.overflow,
        missed: s.health.recursion_misses,
        drops: sorted(s)
            .into_iter()
            .map(|d| JsonDrop {
                reason: &d.key.reason.name,
                reason_code: d.key.reason.code,
                location: &d.key.location,
                netns: d.key.attr.netns,
                netns_cookie: d.key.attr.netns_cookie,
                netns_name: d.key.attr.netns_name.as_deref(),
                device: d.key.attr.device.as_deref(),
                protocol: d.key.attr.protocol.as_deref(),
                port: d.key.attr.port,
                socket: (d.key.attr.socket.as_ref())
                    .map(|s| crate::model::socket::SocketJson::new(s, &d.key.reason.name)),
                count: d.count,
                samples: samples.take(&d.key),
                hint: Guide::builtin().hint(&d.key.reason.name),
                check: ways.checks(&d.key),
                culprit: culprits.remove(&d.key),
            })
            .collect(),
        seconds,
        kernel_counters: None,
        unseen: None,
        unseen_total: None,
        ratio: None,
        ledger: None,
        programs: None,
        counter_only: None,
        kernel_notes: None,
        samples,
        origin,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{DropCount, DropKey, Reason};
    use crate::{
        output::{kernel_text::*, rows::*, table::*},
        sanitize,
    };

    fn snap() -> Snapshot {
        let d = |code, name: &str, loc: &str, count| DropCount {
            key: crate::fixtures::key(code, name, loc),
            count,
        };
        let drops = vec![
            d(3, "NO_SOCKET", "__udp4_lib_rcv+0x1", 5),
            d(7, "IP_NOPROTO", "ip_local_deliver_finish+0x2", 10),
        ];
        crate::fixtures::snap(3, drops, 2)
    }

    #[test]
    fn json_has_total_overflow_and_sorted_drops() {
        let s = snap();
        let v = serde_json::to_value(json(&s, 3.0)).expect("json");
        assert_eq!(v["total"], 17);
        assert_eq!(v["overflow"], 2);
        assert_eq!(v["drops"][0]["reason"], "IP_NOPROTO");
        assert_eq!(v["drops"][0]["reason_code"], 7);
        assert_eq!(v["drops"][0]["count"], 10);
        assert_eq!(v["drops"][1]["location"], "__udp4_lib_rcv+0x1");
        assert!(
            v["drops"][1]["hint"]
                .as_str()
                .is_some_and(|h| h.contains("no socket matched")),
            "{v:#}"
        );
        assert!(v["kernel_counters"].is_null() && v["unseen"].is_null());
    }

    fn kernel() -> KernelView {
        KernelView {
            programs: Some(Vec::new()),
            counter_only: None,
            listeners: Default::default(),
            initial_netns: 1,
            counters: vec![CounterDelta {
                netns: 9,
                counter: "TcpExt:ListenDrops".into(),
                delta: 40,
                reasons: vec!["TCP_LISTEN_OVERFLOW"],
            }],
            unseen: Some(vec![Unseen {
                netns: 9,
                counter: "TcpExt:ListenDrops".into(),
                count: 38,
            }]),
            filter: None,
            errors: Vec::new(),
            names: [(9, "web1".to_string())].into(),
            ratios: Vec::new(),
            ledger: None,
        }
    }

    #[test]
    fn json_carries_kernel_counters_and_unseen_apart_from_drops() {
        let s = snap();
        let v = serde_json::to_value(json(&s, 3.0).with_kernel(&kernel())).expect("json");
        assert_eq!(v["kernel_counters"][0]["counter"], "TcpExt:ListenDrops");
        assert_eq!(v["kernel_counters"][0]["netns"], 9);
        assert_eq!(v["kernel_counters"][0]["delta"], 40);
        assert_eq!(v["kernel_counters"][0]["reasons"][0], "TCP_LISTEN_OVERFLOW");
        assert_eq!(v["unseen"][0]["count"], 38);
        assert_eq!(v["kernel_counters"][0]["netns_name"], "web1");
        assert_eq!(v["unseen"][0]["netns_name"], "web1");
        assert_eq!(
            v["total"], 17,
            "unseen drops are not added to the exact counts"
        );
        assert_eq!(v["drops"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn table_section_labels_unseen_rows() {
        let mut out = Vec::new();
        write_kernel(&kernel(), &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("TcpExt:ListenDrops"), "{text}");
        assert!(
            text.contains("UNSEEN: counted by the kernel, not seen by the probe"),
            "{text}"
        );
        assert!(text.contains("38"), "{text}");
        assert!(text.contains("9 (web1)"), "{text}");
        let mut out = Vec::new();
        write_kernel(&KernelView::default(), &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("no drop counter grew") && !text.contains("UNSEEN"),
            "{text}"
        );
        let filtered = KernelView {
            unseen: None,
            filter: Some("netns foo".into()),
            ..kernel()
        };
        let mut out = Vec::new();
        write_kernel(&filtered, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("not computed: only drops of netns foo"),
            "{text}"
        );
        assert!(!text.contains("UNSEEN"), "{text}");
        let v = serde_json::to_value(json(&snap(), 3.0).with_kernel(&filtered)).expect("json");
        assert!(
            v["unseen"].is_null() && v["kernel_counters"].is_array(),
            "{v:#}"
        );
    }

    #[test]
    fn unseen_totals_count_a_refused_syn_once_in_text_json_and_ledger() {
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        let g = reading.netns.entry(1).or_default();
        g.insert("TcpExt:ListenDrops".into(), 144);
        g.insert("TcpExt:ListenOverflows".into(), 144);
        let k = crate::ledger::view(&reading, &Snapshot::default(), None);
        let mut out = Vec::new();
        write_kernel(&k, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("probe (not in the counts above): 144 drops"),
            "{text}"
        );
        let overflows = (text.lines())
            .rfind(|l| l.contains("TcpExt:ListenOverflows"))
            .expect("an unseen row");
        assert!(overflows.contains("part of another counter"), "{text}");
        let v =
            serde_json::to_value(json(&Snapshot::default(), 3.0).with_kernel(&k)).expect("json");
        assert_eq!(v["unseen_total"], 144, "{v:#}");
        assert_eq!(v["ledger"]["headline"]["counter_only"], 144, "{v:#}");
        let in_total: Vec<_> = (v["unseen"].as_array().expect("unseen").iter())
            .map(|u| (u["counter"].as_str(), u["in_total"].as_bool()))
            .collect();
        assert_eq!(
            in_total,
            [
                (Some("TcpExt:ListenDrops"), Some(true)),
                (Some("TcpExt:ListenOverflows"), Some(false))
            ]
        );
    }

    #[test]
    fn a_ratio_without_packets_reads_no_ratio() {
        let k = KernelView {
            ratios: vec![Ratio {
                netns: 9,
                device: Some("ux3v0".into()),
                direction: crate::model::kernel::Direction::Tx,
                drops: 406,
                packets: 0,
                ratio: None,
            }],
            ..kernel()
        };
        let mut out = Vec::new();
        write_kernel(&k, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(line_of(&text, "ux3v0").contains("no ratio"), "{text}");
        assert!(text.contains("drops / packets sent"), "{text}");
        assert!(!text.contains('%'), "{text}");
    }

    fn line_of<'a>(text: &'a str, needle: &str) -> &'a str {
        (text.lines())
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in {text}"))
    }

    #[test]
    fn kernel_sections_show_no_invisible_character() {
        let odd = "Dev:eth0\u{34f}:RxDrop";
        let k = KernelView {
            counters: vec![CounterDelta {
                netns: 9,
                counter: odd.into(),
                delta: 40,
                reasons: vec!["CPU_BACKLOG"],
            }],
            unseen: Some(vec![Unseen {
                netns: 9,
                counter: odd.into(),
                count: 38,
            }]),
            names: [(9, "web\u{200b}".to_string())].into(),
            ..kernel()
        };
        let mut out = Vec::new();
        write_kernel(&k, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(sanitize::terminal(&text), text.replace('\n', "\\n"));
        assert!(text.contains("Dev:eth0\\u{34f}:RxDrop"), "{text}");
    }

    #[test]
    fn counter_only_drops_are_rows_of_their_own_in_json_and_text() {
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        let g = reading.netns.entry(9).or_default();
        g.insert("TcpExt:ListenDrops".into(), 44);
        g.insert("TcpExt:ListenOverflows".into(), 44);
        // 4 refused at the final ACK, seen by the probe: the row is the other 40.
        let mut s = one("TCP_LISTEN_OVERFLOW", "tcp_check_req+0x1");
        s.drops[0].count = 4;
        s.drops[0].key.attr.netns = Some(9);
        s.drops[0].key.attr.netns_name = Some("app".into());
        s.total = 4;
        let k = crate::ledger::view(&reading, &s, None);
        let v = serde_json::to_value(json(&s, 1.0).with_kernel(&k)).expect("json");
        let rows = v["counter_only"].as_array().expect("counter_only rows");
        // ListenOverflows lies within ListenDrops: one row, never two.
        assert_eq!(rows.len(), 1, "{rows:#?}");
        let r = &rows[0];
        assert_eq!(
            (&r["reason"], &r["location"], &r["netns"], &r["netns_name"]),
            (
                &"TcpExt:ListenDrops".into(),
                &"(counter only)".into(),
                &9.into(),
                &"app".into()
            ),
            "{r:#}"
        );
        assert_eq!((&r["count"], &v["unseen_total"]), (&40.into(), &40.into()));
        assert!(
            r["hint"]
                .as_str()
                .is_some_and(|h| h.contains("tcp_listendrop"))
        );
        // The probe's total stays its own.
        assert_eq!(v["total"], 4);
        let mut out = Vec::new();
        write_counter_only(&k, PIPE_WIDTH, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        let row = line_of(&text, "TcpExt:ListenDrops");
        assert!(
            row.contains("(counter only)") && row.contains("40"),
            "{text}"
        );
        assert!(!text.contains("ListenOverflows"), "{text}");
        // Filtered counts: no unseen, no rows.
        let filtered = crate::ledger::view(&reading, &s, Some("reason NO_SOCKET".into()));
        let v = serde_json::to_value(json(&s, 1.0).with_kernel(&filtered)).expect("json");
        assert!(v["counter_only"].is_null(), "{v:#}");
    }

    #[test]
    fn a_listen_drops_row_names_the_full_listeners_of_its_namespace() {
        use crate::vocab::{reading::Listener, socket::Holder};
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        (reading.netns.entry(9).or_default()).insert("TcpExt:ListenDrops".into(), 40);
        (reading.netns.entry(9).or_default()).insert("Udp:NoPorts".into(), 3);
        let full = Listener {
            addr: "127.0.0.1:8080".into(),
            port: 8080,
            queue: 2,
            backlog: 1,
            inode: 777,
            process: Some(Holder {
                pid: 812,
                comm: "ngi\u{1b}[2Jnx".into(),
            }),
        };
        let orphan = Listener {
            addr: "[::]:22".into(),
            port: 22,
            inode: 778,
            process: None,
            ..full.clone()
        };
        reading.listeners.insert(9, vec![full, orphan]);
        // Another namespace's listener is not this row's.
        let other = reading.listeners[&9][0].clone();
        reading.listeners.insert(5, vec![other]);
        let s = Snapshot::default();
        let k = crate::ledger::view(&reading, &s, None);
        let v = serde_json::to_value(json(&s, 1.0).with_kernel(&k)).expect("json");
        let rows = v["counter_only"].as_array().expect("counter_only rows");
        let row = (rows.iter())
            .find(|r| r["reason"] == "TcpExt:ListenDrops")
            .expect("the row");
        let l = row["listeners"].as_array().expect("listeners");
        assert_eq!(l.len(), 2, "{row:#}");
        assert_eq!(
            (&l[0]["addr"], &l[0]["port"], &l[0]["pid"], &l[0]["comm"]),
            (
                &"127.0.0.1:8080".into(),
                &8080.into(),
                &812.into(),
                &"ngi\\u{1b}[2Jnx".into()
            ),
            "{row:#}"
        );
        assert_eq!(
            (&l[0]["accept_queue"], &l[0]["backlog"]),
            (&2.into(), &1.into())
        );
        assert_eq!(
            l[0]["detail"],
            "listener 127.0.0.1:8080 ngi\\u{1b}[2Jnx[812] accept queue 2/1"
        );
        assert!(l[1]["pid"].is_null() && l[1]["comm"].is_null(), "{row:#}");
        // Other counters' rows name none.
        let udp = (rows.iter()).find(|r| r["reason"] == "Udp:NoPorts");
        assert_eq!(udp.expect("the row")["listeners"], serde_json::json!([]));
        let mut out = Vec::new();
        write_counter_only(&k, PIPE_WIDTH, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains(
                "TcpExt:ListenDrops netns 9: listener 127.0.0.1:8080 ngi\\u{1b}[2Jnx[812] accept \
                 queue 2/1"
            ),
            "{text}"
        );
        assert!(
            text.contains("listener [::]:22 socket 778 (no process found) accept queue 2/1"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
        assert_eq!(text.matches("listener ").count(), 2, "{text}");
    }

    #[test]
    fn program_verdicts_are_rows_of_their_own_in_json_and_text() {
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        let g = reading.netns.entry(9).or_default();
        g.insert("Xdp:vb:xdpdrv:ds_drop#42:drop".into(), 500);
        g.insert("Tc:vb:tcx-ingress:ds_shot#43:shot".into(), 7);
        let mut s = one("TC_INGRESS", "tcx_run+0x1");
        s.drops[0].count = 7;
        s.drops[0].key.attr.netns = Some(9);
        s.drops[0].key.attr.netns_name = Some("web1".into());
        s.drops[0].key.attr.device = Some("vb".into());
        s.total = 7;
        // A frame the XDP program dropped, sampled: the samples of its row, of no other.
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        frame.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0x1b, 0x59, 0, 8, 0, 0]);
        let counter = "Xdp:vb:xdpdrv:ds_drop#42:drop";
        s.samples.push(crate::model::KeySamples {
            key: crate::model::programs::counter_key(9, counter, 1, None).expect("a key"),
            packets: vec![crate::model::Sample::from_frame(1, 42, &frame)],
        });
        let k = crate::ledger::view(&reading, &s, None);
        let v = serde_json::to_value(json(&s, 1.0).with_kernel(&k)).expect("json");
        let p = &v["programs"];
        assert_eq!(p.as_array().map(Vec::len), Some(2), "{p:#}");
        assert_eq!(
            (&p[0]["samples"][0]["dport"], &p[0]["samples"][0]["len"]),
            (&7001.into(), &28.into()),
            "{p:#}"
        );
        assert_eq!(p[1]["samples"].as_array().map(Vec::len), Some(0), "{p:#}");
        assert_eq!(v["drops"][0]["samples"].as_array().map(Vec::len), Some(0));
        assert_eq!(
            (&p[0]["reason"], &p[0]["location"], &p[0]["count"]),
            (
                &"XDP_DROP".into(),
                &"prog ds_drop#42 (xdpdrv)".into(),
                &500.into()
            )
        );
        assert_eq!(
            (&p[0]["netns"], &p[0]["netns_name"], &p[0]["device"]),
            (&9.into(), &"web1".into(), &"vb".into())
        );
        assert!(
            p[0]["hint"]
                .as_str()
                .is_some_and(|h| h.contains("XDP_DROP"))
        );
        assert_eq!(
            (&p[1]["reason"], &p[1]["count"]),
            (&"TC_SHOT".into(), &7.into())
        );
        // Never in the probe's rows or total; the shot and its free are one drop in the ledger.
        assert_eq!(
            (&v["total"], v["drops"].as_array().map(Vec::len)),
            (&7.into(), Some(1))
        );
        assert_eq!(v["ledger"]["headline"]["total"], 507, "{:#}", v["ledger"]);
        let mut out = Vec::new();
        write_programs(&k, PIPE_WIDTH, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        let at = text
            .find("XDP and tc programs' drop verdicts")
            .expect(&text);
        let drop = text.find("prog ds_drop#42 (xdpdrv)").expect(&text);
        let shot = text.find("prog ds_shot#43 (tcx-ingress)").expect(&text);
        assert!(at < drop && drop < shot, "{text}");
        assert!(text.contains("web1") && text.contains("500"), "{text}");
        // Filtered counts show none (a filter the programs' counts know nothing of).
        let filtered = crate::ledger::view(&reading, &s, Some("reason NO_SOCKET".into()));
        let mut out = Vec::new();
        write_programs(&filtered, PIPE_WIDTH, &mut out).expect("write");
        assert!(out.is_empty());
    }

    #[test]
    fn the_ledger_is_a_json_object_and_a_text_section() {
        let mut reading = crate::model::KernelReading {
            initial_netns: 1,
            ..Default::default()
        };
        let g = reading.netns.entry(9).or_default();
        g.insert("Qdisc:va:tbf 1::drops".into(), 40);
        g.insert("Link:va:rx_missed_errors".into(), 10);
        let mut s = one("QDISC_DROP", "__dev_xmit_skb+0x1");
        s.drops[0].count = 40;
        s.drops[0].key.attr.netns = Some(9);
        s.drops[0].key.attr.netns_name = Some("web1".into());
        s.drops[0].key.attr.device = Some("va".into());
        s.total = 40;
        let k = crate::ledger::view(&reading, &s, None);
        let v = serde_json::to_value(json(&s, 1.0).with_kernel(&k)).expect("json");
        let l = &v["ledger"];
        assert_eq!(l["headline"]["total"], 50, "{l:#}");
        assert_eq!(l["headline"]["with_reason"], 40);
        assert_eq!(l["headline"]["counter_only"], 10);
        assert_eq!(l["headline"]["unexplained"], 0);
        assert_eq!(
            l["summary"],
            "50 drops: 80.0% with reason and location, 20.0% counted by a layer counter only, \
             0 unexplained"
        );
        let q = (l["counters"].as_array().expect("counters").iter())
            .find(|r| r["layer"] == "qdisc")
            .expect("the qdisc row");
        assert_eq!(
            (
                &q["delta"],
                &q["matched"],
                &q["counter_only"],
                &q["netns_name"]
            ),
            (&40.into(), &40.into(), &0.into(), &"web1".into())
        );
        let mut out = Vec::new();
        write_kernel(&k, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains("DROP LEDGER: 50 drops: 80.0% with reason"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("qdisc") && l.contains("9 (web1) va") && l.contains("40")),
            "{text}"
        );
        // Filtered counts: no ledger, said once in the counters' section.
        let k = crate::ledger::view(&reading, &s, Some("netns web1".into()));
        assert!(k.ledger.is_none());
        let v = serde_json::to_value(json(&s, 1.0).with_kernel(&k)).expect("json");
        assert!(v["ledger"].is_null());
        // A ledger's note is said in the ledger, or without one after the counters: never
        // lost, and never as a counter that could not be read.
        let mut noted = reading.clone();
        let note = format!(
            "{}--from 5s: read first after it",
            crate::model::notes::SINCE_START
        );
        noted.errors.push(note.clone());
        for (filter, in_ledger) in [(None, true), (Some("netns web1".to_string()), false)] {
            let k = crate::ledger::view(&noted, &s, filter);
            assert_eq!(k.ledger.is_some(), in_ledger);
            assert!(k.programs.is_none(), "no program rows for such a window");
            let mut out = Vec::new();
            write_kernel(&k, &mut out).expect("write");
            let text = String::from_utf8(out).expect("utf8");
            assert_eq!(text.matches(note.as_str()).count(), 1, "{text}");
            assert!(
                !text.contains("not read: the kernel's counters are from"),
                "{text}"
            );
            // The JSON report has it in its kernel notes, ledger or not.
            let v = serde_json::to_value(json(&s, 1.0).with_kernel(&k)).expect("json");
            assert!(
                (v["kernel_notes"].as_array().expect("notes")).contains(&note.as_str().into()),
                "{v}"
            );
        }
    }

    fn one(name: &str, location: &str) -> Snapshot {
        Snapshot {
            total: 1,
            drops: vec![DropCount {
                key: DropKey {
                    reason: Reason {
                        code: 1,
                        name: name.into(),
                    },
                    location: location.into(),
                    attr: Default::default(),
                },
                count: 1,
            }],
            ..Default::default()
        }
    }

    fn table(s: &Snapshot) -> String {
        let mut out = Vec::new();
        write_table(s, 1.0, &mut out).expect("write");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn hostile_names_cannot_reach_the_terminal() {
        let text = table(&one(
            "\x1b]0;pwned\x07\x1b]52;c;aGk=\x07\x1b[2J",
            "a\rFAKE ROW 999\u{8}\u{9b}31m\u{202e}x",
        ));
        for c in text.chars() {
            assert!(
                c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
                "{c:?} reached the table: {text:?}"
            );
        }
        assert!(text.contains("\\u{1b}]0;pwned"), "{text}");
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    /// A location cut to fit a narrow table (as `diff`'s, with its extra columns) keeps its
    /// offset: the call site, not only the function.
    #[test]
    fn a_location_cut_to_fit_keeps_its_offset() {
        let key = |loc: &str| DropKey {
            reason: Reason {
                code: 2,
                name: "NOT_SPECIFIED".into(),
            },
            location: loc.into(),
            attr: Default::default(),
        };
        let a = key("skb_release_head_state_and_something_long+0x1a2");
        let b = key("skb_release_head_state_and_something_long+0x3f");
        let numbers: Vec<NumberColumn> = ["BEFORE", "AFTER", "CHANGE", "RATE/s"]
            .into_iter()
            .map(|title| NumberColumn {
                title,
                cells: vec!["1,000".into(); 2],
                min: 12,
            })
            .collect();
        let mut out = Vec::new();
        write_key_table(&[&a, &b], &numbers, 80, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert!(rows[0].contains("…+0x1a2 "), "{text}");
        assert!(rows[1].contains("…+0x3f "), "{text}");
    }

    #[test]
    fn long_names_are_cut_and_never_panic() {
        for len in [65_535, 65_536, 1 << 20] {
            let text = table(&one("R", &"x".repeat(len)));
            let row = text.lines().nth(1).expect("row");
            assert!(row.chars().count() < 200, "{}", row.len());
            assert!(row.contains('…'));
        }
    }

    #[test]
    fn table_lists_rows_and_flags_overflow() {
        let mut out = Vec::new();
        write_table(&snap(), 3.0, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        let lines: Vec<_> = text.lines().collect();
        assert!(lines[0].starts_with("REASON"));
        assert!(lines[1].starts_with("IP_NOPROTO"), "{text}");
        assert!(text.contains("OVERFLOW: 2 drops"), "{text}");
        assert!(text.contains("total 17 drops"), "{text}");
        assert!(!text.contains("MISSED"), "{text}");
        let mut missed = snap();
        missed.health.recursion_misses = 4;
        let mut out = Vec::new();
        write_table(&missed, 3.0, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("MISSED: the kernel skipped 4"), "{text}");
        assert_eq!(json(&missed, 3.0).missed, 4);
    }

    /// Counts read as the TUI shows them: with thousands separators, in the table, its total
    /// and its warnings.
    #[test]
    fn table_counts_have_thousands_separators() {
        let mut big = snap();
        big.drops[0].count = 1_234_567;
        big.total = 1_234_567 + 10 + 20_000;
        big.overflow = 20_000;
        big.health.recursion_misses = 12_345;
        let mut out = Vec::new();
        write_table(&big, 3.0, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains(" 1,234,567 "), "{text}");
        assert!(text.contains("total 1,254,577 drops"), "{text}");
        assert!(text.contains("OVERFLOW: 20,000 drops"), "{text}");
        assert!(text.contains("skipped 12,345 probe runs"), "{text}");
        assert!(!text.contains("1234567"), "{text}");
    }

    /// The snapshot of a crafted recording.
    fn recorded(bytes: &[u8]) -> Snapshot {
        let rec = crate::record::Recording::from_bytes(bytes).expect("open");
        rec.snapshot_at(Duration::MAX).expect("snapshot")
    }

    #[test]
    fn json_gives_each_sampled_packet_once_whatever_the_keys() {
        // 1,000 identical keys, one sampled packet each: every row once got all 1,000.
        let d = crate::record::crafted::Dict {
            strings: vec!["R".into(), "f".into()],
            keys: vec![(2, 0, 1); 1000],
            samples: (0..1000).collect(),
            ..Default::default()
        };
        let s = recorded(&crate::record::crafted::recording(&d, 0));
        let held: usize = s.samples.iter().map(|k| k.packets.len()).sum();
        assert_eq!(held, 1000);
        let report = json(&s, 1.0);
        assert_eq!(report.drops.len(), 1000);
        let given: usize = report.drops.iter().map(|d| d.samples.len()).sum();
        assert_eq!(given, held);
        assert_eq!(report.drops[0].samples[0].dport, Some(53));

        // Distinct keys each get their own packet.
        let s = recorded(&crate::record::crafted::sampled_keys(3000));
        let report = json(&s, 1.0);
        assert!(report.drops.iter().all(|d| d.samples.len() == 1));
        let text = serde_json::to_string(&report).expect("json");
        assert!(text.len() < 3000 * 1024, "{} bytes", text.len());
    }

    #[test]
    fn rows_sort_by_count_then_key_ranking_each_distinct_name_once() {
        let d = |code, name: &str, loc: &str, port, count| DropCount {
            key: DropKey {
                reason: Reason {
                    code,
                    name: name.into(),
                },
                location: loc.into(),
                attr: crate::model::Attribution {
                    port,
                    device: port.map(|p| format!("eth{}", p % 2).into()),
                    ..Default::default()
                },
            },
            count,
        };
        let s = Snapshot {
            drops: vec![
                d(2, "B", "y", Some(3), 5),
                d(2, "B", "x", None, 5),
                d(1, "Z", "z", None, 5),
                d(2, "A", "y", Some(1), 5),
                d(2, "B", "x", Some(2), 5),
                d(9, "Q", "q", None, 7),
                d(2, "B", "x", Some(1), 0),
            ],
            ..Default::default()
        };
        let rows = sorted(&s);
        let mut want: Vec<&DropCount> = s.drops.iter().filter(|d| d.count > 0).collect();
        want.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        assert_eq!(rows, want);

        // Many keys sharing one 64 KiB name: the names ranked are the distinct ones.
        let s = recorded(&crate::record::crafted::shared_name(2000, 64 << 10));
        let rows: Vec<&DropCount> = s.drops.iter().collect();
        assert_eq!(NameRanks::new(&rows).0.len(), 2);
        assert_eq!(sorted(&s).len(), 2000);
        let text = table(&s);
        assert_eq!(text.lines().count(), 2002);
        assert!(text.len() < 2002 * 200, "{} bytes", text.len());
    }

    #[test]
    fn invisible_characters_of_a_recording_are_escaped_in_the_table() {
        let invisible = crate::sanitize::INVISIBLE;
        let d = crate::record::crafted::Dict {
            strings: invisible
                .iter()
                .flat_map(|c| [format!("NO_SOCK{c}ET"), format!("udp_rcv{c}+0x1")])
                .collect(),
            keys: (0..invisible.len() as u64)
                .map(|i| (2, 2 * i, 2 * i + 1))
                .collect(),
            ..Default::default()
        };
        let text = table(&recorded(&crate::record::crafted::recording(&d, 0)));
        for c in invisible {
            assert!(!text.contains(*c), "{c:?} reached the table: {text:?}");
            let escaped = c.escape_unicode().to_string();
            assert!(
                text.contains(&format!("NO_SOCK{escaped}ET")),
                "{c:?}: {text}"
            );
            assert!(
                text.contains(&format!("udp_rcv{escaped}+0x1")),
                "{c:?}: {text}"
            );
        }
        assert_eq!(text.lines().count(), invisible.len() + 2);
    }
}
