//! Fuzzes the recording decoder: opening, indexing, iterating and seeking must never panic,
//! hang or allocate without bound, whatever the bytes; valid recordings must round-trip.
//! Then the output side: what decodes is reported (table and JSON), folded and drawn (SVG), and
//! what each writes must stay within its stated bound (`record::budget::report_bound`, the
//! folded limit, `flamegraph::MAX_RECTANGLES` × `OUTPUT_PER_RECTANGLE`).
//!
//! A counting global allocator checks the reader's memory budget: reading one input (opening
//! it and decoding its snapshots one at a time) must never hold more than
//! `record::budget::MEMORY_BUDGET` bytes of heap more than before it started.
//!
//! The first input byte picks a mode:
//! - 0: the rest is a file, opened as is;
//! - 1: the rest is a file whose frame checksums are fixed up first, so that mutations reach
//!   the payload decoders instead of stopping at the checksum;
//! - 2: the rest drives a generator of snapshots, which are encoded, checked to read back
//!   identical (up to order), then damaged by a few edits (checksums fixed) and decoded again;
//!   its readings of the kernel carry cookies, namespace names, rulesets, attached programs and listeners, so
//!   kernel, kernel delta, attribution and attribution delta frames are all written, read
//!   back and damaged.
#![no_main]

use std::{sync::Arc, time::Duration};

use dropscope::{
    cli::Format,
    cmd::report::write_report,
    culprit::{
        programs::{Attached, TcFilter},
        ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict},
    },
    explain::fill::Origin,
    flamegraph::{self, GraphMeta, MAX_RECTANGLES},
    model::{
        Attribution, DropCount, DropKey, Health, KernelReading, KeySamples, Reason, Sample,
        SessionInfo, Snapshot, StackCount,
    },
    record::{
        Recording,
        budget::{OUTPUT_PER_RECTANGLE, OUTPUT_PER_ROW, report_bound},
        encode,
    },
    vocab::{
        reading::Listener,
        socket::{About, Found, Holder, Socket, Via},
    },
};
use libfuzzer_sys::fuzz_target;

#[path = "common/mod.rs"]
mod common;
use common::{Bytes, FILE_HEADER, FRAME_HEADER, fix_checksums, within_budget};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            exercise(rest, None);
        }
        1 => {
            let mut b = rest.to_vec();
            fix_checksums(&mut b);
            exercise(&b, None);
        }
        _ => {
            generated(rest);
        }
    }
});

/// Opens `bytes` and uses everything a consumer can, within the memory budget; `expect`: the
/// snapshots it must read back (up to order). Returns how many snapshots decoded.
fn exercise(bytes: &[u8], expect: Option<&[Snapshot]>) -> Option<usize> {
    within_budget(|| read(bytes, expect))
}

/// Puts drops and stacks in a canonical order.
fn normal(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    s.drops.sort_by(|a, b| a.key.cmp(&b.key));
    s.stacks
        .sort_by(|a, b| (&a.key, &a.frames).cmp(&(&b.key, &b.frames)));
    s.samples.sort_by(|a, b| a.key.cmp(&b.key));
    s
}

fn read(bytes: &[u8], expect: Option<&[Snapshot]>) -> Option<usize> {
    let rec = Recording::from_bytes(bytes).ok()?;
    assert!(rec.len() <= bytes.len() / FRAME_HEADER);
    let _ = (rec.info(), rec.duration(), rec.warnings(), rec.finished());
    // One snapshot at a time, as replay does: the budget covers one decoded snapshot.
    let mut decoded = 0;
    let mut last = None;
    for s in rec.snapshots().map_while(Result::ok) {
        assert!(s.elapsed <= rec.duration());
        if let Some(want) = expect {
            // The generated keys and stacks are distinct, so only their order may differ.
            assert_eq!(normal(&s), normal(&want[decoded]));
        }
        decoded += 1;
        last = Some(s);
    }
    if let Some(s) = last {
        outputs(&rec, &s);
    }
    let step = (rec.len() / 4).max(1);
    for f in rec.frames().iter().step_by(step) {
        let _ = rec.snapshot_at(f.elapsed);
        let _ = rec.snapshot_at(f.elapsed + Duration::from_nanos(1));
    }
    let _ = rec.snapshot_at(Duration::ZERO);
    let _ = rec.snapshot_at(Duration::MAX);
    Some(decoded)
}

/// Recordings whose keys and stacks reference more bytes of names than this are not rendered:
/// their output is bounded too, but would only make the fuzzer slow.
const MAX_RENDERED_NAMES: u64 = 4 << 20;

/// Reports, folds and draws `s`, checking that each output stays within its bound.
fn outputs(rec: &Recording, s: &Snapshot) {
    if rec.referenced_bytes() > MAX_RENDERED_NAMES {
        return;
    }
    let rows = s.drops.len() + s.samples.len() + s.stacks.len();
    let bound = report_bound(rec.referenced_bytes(), rows);
    for format in [Format::Table, Format::Json] {
        let mut out = Vec::new();
        write_report(s, 1.0, format, (false, Origin::Recorded), None, &mut out)
            .expect("report into memory");
        assert!(
            out.len() as u64 <= bound,
            "{format:?} report of {} bytes, beyond its bound of {bound}",
            out.len()
        );
    }
    let folded = flamegraph::folded(&s.stacks);
    let folded_bound = flamegraph::MAX_FOLDED_BYTES as u64 + OUTPUT_PER_ROW * rows as u64;
    assert!(
        folded.len() as u64 <= folded_bound,
        "{} bytes folded",
        folded.len()
    );
    let meta = GraphMeta {
        info: rec.info(),
        window: (Duration::ZERO, s.elapsed),
        filter: None,
    };
    let mut svg = Vec::new();
    if flamegraph::write_svg(&s.stacks, &meta, &mut svg).is_ok() {
        let svg_bound = MAX_RECTANGLES as u64 * OUTPUT_PER_RECTANGLE + (64 << 10);
        assert!(svg.len() as u64 <= svg_bound, "{} bytes of SVG", svg.len());
        let rects = svg.windows(5).filter(|w| w == b"<rect").count();
        assert!(rects <= MAX_RECTANGLES + 2, "{rects} rectangles");
    }
}

/// A key's socket, found (with up to 9 holders: more than a recording names) or not.
fn socket(src: &mut Bytes<'_>, pick: &dyn Fn(u8) -> Arc<str>) -> Socket {
    let b = src.byte();
    let about = if b & 1 == 0 {
        About::Unknown { why: pick(b >> 1) }
    } else {
        About::Exact(Found {
            holders: (0..b % 10)
                .map(|i| Holder {
                    pid: src.u64() as u32,
                    comm: pick(i).to_string(),
                })
                .collect(),
            more_holders: u32::from(src.byte()),
            protocol: (b & 2 != 0).then(|| pick(b >> 2)),
            local: (b & 4 != 0).then(|| pick(b >> 3)),
            rcvbuf: (b & 8 != 0).then(|| src.u64() as u32),
        })
    };
    Socket {
        via: if b & 16 == 0 {
            Via::Receiving
        } else {
            Via::Owner
        },
        inode: src.u64() as u32,
        about,
    }
}

/// Gives `r` rulesets, attached programs and full listeners (sometimes none) from `src`.
fn attribution(src: &mut Bytes<'_>, pick: &dyn Fn(u8) -> Arc<str>, r: &mut KernelReading) {
    let b = src.byte();
    r.attributed = b & 1 != 0;
    for _ in 0..(b >> 1) % 3 {
        let ns = src.u64();
        let id = ChainId {
            family: src.byte(),
            table: pick(src.byte()).to_string(),
            chain: pick(src.byte()).to_string(),
        };
        let c = src.byte();
        let window = RulesWindow {
            generation: src.u64() as u32,
            chains: (0..c % 3)
                .map(|i| Chain {
                    id: id.clone(),
                    hook: (c & 4 != 0).then(|| pick(i).to_string()),
                    priority: (c & 8 != 0).then(|| src.u64() as i32),
                    policy_drop: c & 16 != 0,
                })
                .collect(),
            rules: (0..src.byte() % 4)
                .map(|i| Grown {
                    rule: Rule {
                        id: id.clone(),
                        handle: src.u64(),
                        position: u32::from(i) + 1,
                        verdict: [Verdict::Drop, Verdict::Reject, Verdict::Map][usize::from(i % 3)],
                        packets: (c & 32 != 0).then(|| src.u64()),
                        comment: (c & 64 != 0).then(|| pick(i).to_string()),
                        exprs: pick(i + 1).to_string(),
                    },
                    grew: (c & 128 != 0).then(|| src.u64()),
                })
                .collect(),
            whole: c & 1 != 0,
            late: c & 2 != 0,
            changed: c & 4 != 0,
            notes: (0..c % 2).map(|i| pick(i).to_string()).collect(),
        };
        r.rules.insert(ns, window);
        if c & 8 != 0 {
            let a = Attached {
                device: pick(c).to_string(),
                hook: pick(c >> 1).to_string(),
                prog: src.u64() as u32,
                name: pick(c >> 2).to_string(),
                filter: (c & 32 != 0).then_some(TcFilter {
                    pref: src.u64() as u16,
                    handle: src.u64() as u32,
                }),
            };
            r.attached.insert(ns, vec![a]);
        }
        if c & 16 != 0 {
            let l = Listener {
                addr: pick(c).to_string(),
                port: src.u64() as u16,
                queue: src.u64() as u32,
                backlog: src.u64() as u32,
                inode: src.u64(),
                process: (c & 32 != 0).then(|| Holder {
                    pid: src.u64() as u32,
                    comm: pick(c >> 3).to_string(),
                }),
            };
            r.listeners.insert(src.u64(), vec![l]);
        }
    }
}

fn generated(data: &[u8]) -> Option<()> {
    let mut src = Bytes(data);
    let names: Vec<Arc<str>> = ["NO_SOCKET", "", "f+0x1 [mod]", "ünïcode", "x"]
        .iter()
        .map(|&s| Arc::from(s))
        .collect();
    let pick = |b: u8| names[b as usize % names.len()].clone();
    let keys: Vec<DropKey> = (0..6u8)
        .map(|i| DropKey {
            reason: Reason {
                code: u32::from(src.byte()) * 1000,
                name: pick(i),
            },
            location: pick(i / 2 + 1),
            attr: {
                let b = src.byte();
                Attribution {
                    netns: (b & 1 != 0).then(|| src.u64()),
                    netns_name: (b & 2 != 0).then(|| pick(b >> 5)),
                    device: (b & 4 != 0).then(|| pick(b >> 4)),
                    protocol: (b & 8 != 0).then(|| pick(b >> 3)),
                    port: (b & 16 != 0).then(|| src.u64() as u16),
                    ifindex: (b & 32 != 0).then(|| src.u64() as u32),
                    netns_cookie: (b & 64 != 0).then(|| src.u64()),
                    socket: (b & 128 != 0).then(|| Arc::new(socket(&mut src, &pick))),
                    culprit: None,
                }
            },
        })
        .collect();
    // Each key's sampled packets (1 to 3), shown from a frame on, as the collector keeps them.
    let packets: Vec<(u8, Vec<Sample>)> = (0..6)
        .map(|_| {
            let from = src.byte() % 48;
            let n = 1 + src.byte() % 3;
            let p = (0..n)
                .map(|_| Sample {
                    unix_ms: src.u64(),
                    len: src.u64() as u32,
                    l3proto: src.u64() as u16,
                    bytes: (0..src.byte() % 130).map(|_| src.byte()).collect(),
                })
                .filter(|p| p.bytes.len() <= 128)
                .collect();
            (from, p)
        })
        .collect();
    let n = src.byte() % 40;
    let mut elapsed = Duration::ZERO;
    let mut snaps = Vec::new();
    let mut reading: Option<Arc<KernelReading>> = None;
    let mut readings = 0u64;
    for frame in 0..n {
        elapsed += Duration::from_nanos(src.u64()).min(Duration::from_secs(100));
        let mask = src.byte();
        let drops = (0..6)
            .filter(|i| mask & 1 << i != 0)
            .map(|i| DropCount {
                key: keys[i].clone(),
                count: src.u64(),
            })
            .collect();
        let stacks = (0..2)
            .filter(|i| mask & 1 << (6 + i) != 0)
            .map(|i| StackCount {
                key: keys[i * 3].clone(),
                frames: (0..=i + (src.byte() % 3) as usize)
                    .map(|j| pick(j as u8))
                    .collect(),
                weight: src.u64(),
                samples: src.u64(),
            })
            .collect();
        let samples = (keys.iter().zip(&packets))
            .filter(|(_, (from, p))| *from <= frame && !p.is_empty())
            .map(|(key, (_, p))| KeySamples {
                key: key.clone(),
                packets: p.clone(),
            })
            .collect();
        let b = src.byte();
        // Now and then a new reading of the kernel's counters (its time new, as live), carried
        // by the snapshots after it.
        if b & 8 != 0 {
            readings += 1;
            let mut r = KernelReading {
                unix_ms: readings,
                initial_netns: src.u64(),
                ..Default::default()
            };
            for _ in 0..src.byte() % 4 {
                let ns = src.u64();
                let devices = src.byte() & 1 != 0;
                for j in 0..src.byte() % 32 {
                    r.netns
                        .entry(ns)
                        .or_default()
                        .insert(format!("Dev:if{j}:RxPackets").into(), src.u64());
                    if devices {
                        let d = r.devices.entry(ns).or_default();
                        d.insert(u32::from(j) + 1, format!("if{j}"));
                    }
                }
            }
            r.netns.retain(|_, g| !g.is_empty());
            let netns = &r.netns;
            r.devices.retain(|ns, _| netns.contains_key(ns));
            // The namespaces' cookies (never 0), and who could have dropped (an attribution
            // frame where that changed).
            for _ in 0..src.byte() % 3 {
                r.cookies.insert(src.u64(), src.u64().max(1));
            }
            // The namespaces' names (kept as data: any text, never empty).
            for _ in 0..src.byte() % 3 {
                let name = format!("n{}", pick(src.byte()));
                r.names.insert(src.u64(), name.into());
            }
            attribution(&mut src, &pick, &mut r);
            reading = Some(Arc::new(r));
        } else if let Some(prev) = reading.as_ref().filter(|_| b & 16 != 0) {
            // The same reading, one count brought up to date (as programs' verdicts are
            // between readings): written as a kernel delta frame.
            let mut r = KernelReading::clone(prev);
            if let Some(v) = r.netns.values_mut().flat_map(|g| g.values_mut()).next() {
                *v = v.saturating_add(1 + u64::from(src.byte()));
            }
            // Rules' counters grew too (an attribution delta frame, or a whole one where a
            // counter appeared), a window's flags changed, or a cookie changed (a kernel
            // delta's cookies).
            let g = src.byte();
            if g & 1 != 0 {
                let every = usize::from(g >> 4) + 1;
                for rule in (r.rules.values_mut().flat_map(|w| w.rules.iter_mut())).step_by(every) {
                    let by = src.u64() % 1000;
                    rule.rule.packets = rule.rule.packets.map(|p| p.wrapping_add(by));
                    rule.grew = Some(rule.grew.unwrap_or(0).wrapping_add(by ^ u64::from(g & 8)));
                }
            }
            if g & 4 != 0
                && let Some(w) = r.rules.values_mut().next()
            {
                w.late = !w.late;
                w.generation = w.generation.wrapping_add(1);
            }
            if g & 2 != 0 {
                r.cookies.insert(src.u64(), src.u64().max(1));
            }
            // A namespace found to have another name (a kernel delta's names).
            if g & 64 != 0 {
                r.names.insert(src.u64(), format!("ns{}", src.byte()).into());
            }
            reading = Some(Arc::new(r));
        }
        snaps.push(Snapshot {
            elapsed,
            unix_ms: src.u64(),
            total: src.u64(),
            overflow: src.u64(),
            drops,
            stacks,
            samples,
            health: Health {
                keys_used: src.u64(),
                bpf_run_ns: (b & 1 != 0).then(|| src.u64()),
                bpf_run_cnt: (b & 2 != 0).then(|| src.u64()),
                self_syscalls: (b & 4 != 0).then(|| src.u64()),
                stack_lost: src.u64(),
                ..Default::default()
            },
            kernel: reading.clone(),
        });
    }
    let info = SessionInfo {
        host: "h".into(),
        kernel: "k".into(),
        started_unix_ms: src.u64(),
        probe: "p".into(),
    };
    let bytes = encode(&info, &snaps).ok()?;
    assert_eq!(exercise(&bytes, Some(&snaps))?, snaps.len());
    // Damage: a few (position, xor) edits, checksums fixed so the decoders see them.
    let mut damaged = bytes;
    for _ in 0..(src.byte() % 4) {
        let pos = u16::from_le_bytes([src.byte(), src.byte()]) as usize;
        if damaged.len() > FILE_HEADER {
            let at = FILE_HEADER + pos % (damaged.len() - FILE_HEADER);
            damaged[at] ^= src.byte().max(1);
        }
    }
    fix_checksums(&mut damaged);
    exercise(&damaged, None);
    Some(())
}
