//! Format version 2: keys with their attribution, sampled packets, and the sample limits.
use std::{sync::Arc, time::Duration};

use crate::model::{Attribution, DropCount, DropKey, KeySamples, Sample, Snapshot};
use crate::record::{
    RecordError, Recording,
    budget::{MAX_RENAMES_PER_KEY, MAX_SAMPLE_BYTES, MAX_SAMPLES_PER_KEY},
    encode,
    encoder::header,
    format::{Kind, push_frame, put_str, put_uvarint},
    tests::{decode_all, key, session},
};

fn attributed(port: Option<u16>, device: Option<&str>, netns: Option<u64>) -> DropKey {
    let mut k = key(2, "NO_SOCKET", "__udp4_lib_rcv+0x8a4");
    k.attr = Attribution {
        ifindex: None,
        netns,
        netns_cookie: None,
        netns_name: netns.map(|n| Arc::from(format!("ns-{n}"))),
        device: device.map(Arc::from),
        protocol: port.map(|_| Arc::from("udp")),
        port,
        socket: None,
        culprit: None,
    };
    k
}

fn packet(i: u64, len: usize) -> Sample {
    Sample {
        unix_ms: 1_750_000_000_000 + i,
        len: len as u32 + 14,
        l3proto: if i.is_multiple_of(2) { 0x0800 } else { 0x86DD },
        bytes: (0..len).map(|b| (b as u64 * 7 + i) as u8).collect(),
    }
}

fn snap(i: u64, drops: Vec<DropCount>, samples: Vec<KeySamples>) -> Snapshot {
    let total = drops.iter().map(|d| d.count).sum();
    Snapshot {
        elapsed: Duration::from_millis(250 * (i + 1)),
        unix_ms: 1_750_000_000_000 + 250 * i,
        total,
        drops,
        samples,
        ..Default::default()
    }
}

#[test]
fn keys_differing_only_in_attribution_round_trip_as_distinct_keys() {
    let keys = [
        attributed(Some(9), Some("eth0"), Some(4026531840)),
        attributed(Some(9), Some("veth1"), Some(4026532999)),
        attributed(None, None, Some(4026531840)),
        attributed(Some(65535), None, None),
        key(2, "NO_SOCKET", "__udp4_lib_rcv+0x8a4"),
    ];
    let snaps: Vec<Snapshot> = (0..40u64)
        .map(|i| {
            let drops = (keys.iter().enumerate())
                .map(|(k, key)| DropCount {
                    key: key.clone(),
                    count: (k as u64 + 1) * i * 1000 + i % 3,
                })
                .collect();
            snap(i, drops, Vec::new())
        })
        .collect();
    let bytes = encode(&session(), &snaps).expect("encode");
    assert_eq!(&bytes[14..16], &crate::record::VERSION.to_le_bytes());
    let rec = Recording::from_bytes(&bytes).expect("open");
    assert!(rec.warnings().is_empty(), "{:?}", rec.warnings());
    let back = decode_all(&rec);
    assert_eq!(back, snaps);
    assert_eq!(back[39].drops[1].key.attr.device.as_deref(), Some("veth1"));
    assert_eq!(back[39].drops[3].key.attr.port, Some(65535));
    assert_eq!(back[39].drops[4].key.attr, Attribution::default());
}

#[test]
fn the_first_samples_of_each_key_are_recorded_once_and_read_back_as_of_each_frame() {
    let a = attributed(Some(53), Some("eth0"), Some(1));
    let b = key(5, "NETFILTER_DROP", "nf_hook_slow+0xa1");
    let pa: Vec<Sample> = (0..12).map(|i| packet(i, 40 + i as usize)).collect();
    let big = packet(99, MAX_SAMPLE_BYTES + 72);
    let count = |k: &DropKey, c| DropCount {
        key: k.clone(),
        count: c,
    };
    let ks = |k: &DropKey, p: &[Sample]| KeySamples {
        key: k.clone(),
        packets: p.to_vec(),
    };
    let snaps = vec![
        snap(0, vec![count(&a, 3)], vec![ks(&a, &pa[..3])]),
        snap(1, vec![count(&a, 12)], vec![ks(&a, &pa[..12])]),
        // A key with samples before it has a count.
        snap(
            2,
            vec![count(&a, 12)],
            vec![ks(&a, &pa), ks(&b, std::slice::from_ref(&big))],
        ),
        snap(3, vec![count(&a, 13), count(&b, 1)], Vec::new()),
    ];
    let bytes = encode(&session(), &snaps).expect("encode");
    let rec = Recording::from_bytes(&bytes).expect("open");
    let back = decode_all(&rec);
    assert_eq!(back[0].samples, vec![ks(&a, &pa[..3])]);
    let first8 = ks(&a, &pa[..MAX_SAMPLES_PER_KEY]);
    assert_eq!(back[1].samples, vec![first8.clone()]);
    let mut cut = big.clone();
    cut.bytes = big.bytes[..MAX_SAMPLE_BYTES].into();
    let both = vec![first8, ks(&b, &[cut])];
    assert_eq!(back[2].samples, both);
    // Samples are kept once defined, as the live collector keeps them.
    assert_eq!(back[3].samples, both);
    for (s, want) in back.iter().zip(&snaps) {
        assert_eq!(s.drops, want.drops);
    }
    // Seeking decodes the samples as of the frame sought.
    let at0 = rec.snapshot_at(snaps[0].elapsed).expect("seek");
    assert_eq!(at0.samples, back[0].samples);
}

/// The frames an XDP program dropped are the samples of its verdict's row: recorded and read
/// back under the program's key, never a row of the probe's.
#[test]
fn a_programs_frames_round_trip_without_making_a_row() {
    let a = attributed(Some(53), Some("eth0"), Some(1));
    let counter = "Xdp:vb:xdpgeneric:ds_fx_drop#42:drop";
    let prog = crate::model::programs::counter_key(7, counter, 1, None).expect("a key");
    let frames = vec![packet(0, 28), packet(2, 40)];
    let snaps = vec![
        snap(
            0,
            vec![DropCount {
                key: a.clone(),
                count: 3,
            }],
            Vec::new(),
        ),
        snap(
            1,
            vec![DropCount {
                key: a.clone(),
                count: 4,
            }],
            vec![KeySamples {
                key: prog.clone(),
                packets: frames.clone(),
            }],
        ),
    ];
    let bytes = encode(&session(), &snaps).expect("encode");
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    assert_eq!(back[1].samples.len(), 1, "{:?}", back[1].samples);
    let got = &back[1].samples[0];
    assert!(crate::model::programs::is_program(&got.key));
    assert_eq!((&got.key, &got.packets), (&prog, &frames));
    assert_eq!(back[1].drops, snaps[1].drops, "no row of the probe's");
    // A file that counts drops on a program's key: not a row, but drops not keyed.
    let mut hostile = snaps.clone();
    hostile[1].drops.push(DropCount {
        key: prog.clone(),
        count: 5,
    });
    hostile[1].total += 5;
    let bytes = encode(&session(), &hostile).expect("encode");
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    assert_eq!(back[1].drops, snaps[1].drops);
    assert_eq!((back[1].overflow, back[1].total), (5, 9));
    assert!(back[1].invariant_holds());
}

/// A recording (of the current version) whose one dictionary defines a key and `samples`
/// sampled packets of it, each of `len` bytes, followed by a keyframe.
fn crafted(samples: usize, len: usize) -> Vec<u8> {
    let mut out = header(&session()).expect("header");
    let mut d = Vec::new();
    put_uvarint(&mut d, 1);
    put_str(&mut d, "X");
    put_uvarint(&mut d, 1);
    for v in [1, 0, 0, 0] {
        put_uvarint(&mut d, v);
    }
    put_uvarint(&mut d, 0);
    put_uvarint(&mut d, samples as u64);
    for i in 0..samples {
        for v in [0, i as u64, len as u64, 0x0800, len as u64] {
            put_uvarint(&mut d, v);
        }
        d.extend(std::iter::repeat_n(0x45, len));
    }
    put_uvarint(&mut d, 0); // no key renamed
    push_frame(&mut out, Kind::Dictionary, 1, &d).expect("dictionary");
    let mut k = Vec::new();
    for v in [0, 0, 0] {
        put_uvarint(&mut k, v);
    }
    crate::record::health::put_full(&mut k, &Default::default());
    put_uvarint(&mut k, 0);
    put_uvarint(&mut k, 0);
    push_frame(&mut out, Kind::Keyframe, 1, &k).expect("keyframe");
    out
}

#[test]
fn the_budget_refuses_an_oversized_sample_section() {
    let ok = Recording::from_bytes(&crafted(MAX_SAMPLES_PER_KEY, MAX_SAMPLE_BYTES)).expect("open");
    assert_eq!(
        ok.snapshot_at(Duration::ZERO).expect("snapshot").samples[0]
            .packets
            .len(),
        8
    );
    for (n, len, what) in [
        (MAX_SAMPLES_PER_KEY + 1, 20, "sampled packets of one key"),
        (1, MAX_SAMPLE_BYTES + 1, "bytes in one sampled packet"),
    ] {
        match Recording::from_bytes(&crafted(n, len)) {
            Err(RecordError::OverBudget { what: w, .. }) => assert_eq!(w, what),
            Err(e) => panic!("{n} samples of {len} bytes: {e}"),
            Ok(_) => panic!("{n} samples of {len} bytes were accepted"),
        }
    }
}

/// The sample recording of format version 1 (`testdata/version1.dsrec`, once
/// `assets/sample.dsrec`: five drop kinds, before attribution).
#[test]
fn version_1_recordings_still_read() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/record/testdata/version1.dsrec");
    let bytes = std::fs::read(path).expect("asset");
    assert_eq!(&bytes[14..16], &1u16.to_le_bytes());
    let rec = Recording::from_bytes(&bytes).expect("open");
    assert!(rec.len() > 1 && rec.finished());
    let last = decode_all(&rec).pop().expect("snapshots");
    assert!(last.total > 0 && last.invariant_holds());
    assert!(
        last.drops
            .iter()
            .all(|d| d.key.attr == Attribution::default())
    );
    assert!(last.samples.is_empty());
}

/// A key whose namespace is renamed every frame (a process renaming itself in its own
/// namespace) is one key in the recording, with exact counts in every frame, and its latest
/// names are written again only a bounded number of times. Before names left the key's
/// identity, each rename defined a new key.
#[test]
fn a_renamed_namespace_defines_no_new_key() {
    let renamed = |i: u64| {
        let mut k = attributed(Some(9), Some("lo"), Some(4026532999));
        k.attr.ifindex = Some(1);
        // Not yet named at first (names are looked up beside the counting), then renamed.
        k.attr.netns_name = (i > 0).then(|| Arc::from(format!("sh-{i}[1234]")));
        k
    };
    let frames = |name: &dyn Fn(u64) -> DropKey| -> Vec<Snapshot> {
        (0..200u64)
            .map(|i| {
                let drops = vec![DropCount {
                    key: name(i),
                    count: 10 * (i + 1),
                }];
                snap(i, drops, Vec::new())
            })
            .collect()
    };
    let snaps = frames(&renamed);
    let bytes = encode(&session(), &snaps).expect("encode");
    // The size of the same counts under one name, plus the bounded renames.
    let steady = encode(&session(), &frames(&|_| renamed(1))).expect("encode");
    // A dictionary frame each: its header, the new name and the key's id.
    let per_rename = 48;
    assert!(
        bytes.len() <= steady.len() + usize::from(MAX_RENAMES_PER_KEY) * per_rename,
        "{} bytes, {} under one name",
        bytes.len(),
        steady.len()
    );
    let rec = Recording::from_bytes(&bytes).expect("open");
    let back = decode_all(&rec);
    // A seek reads the names as the sequential read does.
    let last = rec.snapshot_at(back[199].elapsed).expect("seek");
    assert_eq!(last.drops, back[199].drops);
    for (i, s) in back.iter().enumerate() {
        assert_eq!(s.drops.len(), 1, "frame {i}");
        assert_eq!(s.drops[0].count, 10 * (i as u64 + 1));
        assert_eq!(s.drops[0].key, renamed(i as u64), "the same key");
    }
    // The names as last written: the 8th rename.
    let last = format!("sh-{}[1234]", MAX_RENAMES_PER_KEY);
    assert_eq!(
        back[199].drops[0].key.attr.netns_name.as_deref(),
        Some(last.as_str())
    );
}

/// A stack first seen before its key was named (names are found beside the counting) takes
/// the key's names as of the frame read, as the key's counts do: `flamegraph --input --netns
/// NAME` finds it, and its frame names the namespace. Before, a stack kept the names its key
/// had when the stack was defined, so a recorded stack vanished under `--netns`.
#[test]
fn a_stack_takes_its_keys_names_written_after_it() {
    let named = |i: u64| {
        let mut k = attributed(Some(9), Some("if1"), None);
        k.attr.ifindex = Some(1);
        if i > 0 {
            k.attr.netns_name = Some(Arc::from("victim"));
            k.attr.device = Some(Arc::from("lo"));
        } else {
            k.attr.netns_name = None;
        }
        k
    };
    let snaps: Vec<Snapshot> = (0..3u64)
        .map(|i| {
            let mut s = snap(
                i,
                vec![DropCount {
                    key: named(i),
                    count: 10 * (i + 1),
                }],
                Vec::new(),
            );
            s.stacks = vec![crate::model::StackCount {
                // The collector's stack keeps the key as it was first seen.
                key: named(0),
                frames: ["udp_rcv", "kfree_skb"]
                    .iter()
                    .map(|&f| Arc::from(f))
                    .collect(),
                weight: 10 * (i + 1),
                samples: i + 1,
            }];
            s
        })
        .collect();
    let rec = Recording::from_bytes(&encode(&session(), &snaps).expect("encode")).expect("open");
    let back = decode_all(&rec);
    let stack = &back[2].stacks[0];
    assert_eq!(stack.key.attr.netns_name.as_deref(), Some("victim"));
    assert_eq!(stack.key.attr.device.as_deref(), Some("lo"));
    let seek = rec.snapshot_at(back[2].elapsed).expect("seek");
    assert_eq!(seek.stacks, back[2].stacks, "a seek reads the same names");
}

/// A crafted dictionary that renames a key more often than a writer ever does is refused, as
/// is a rename of a key never defined.
#[test]
fn a_key_renamed_too_often_is_refused() {
    use crate::record::{budget::Spent, decode::Dictionary};
    let frame = |keys: u64, renames: &[u64]| {
        let mut p = Vec::new();
        put_uvarint(&mut p, 1);
        put_str(&mut p, "name");
        put_uvarint(&mut p, keys);
        for _ in 0..keys {
            for v in [2, 0, 0, 0] {
                put_uvarint(&mut p, v); // reason 2 named and located "name", no attribution
            }
        }
        put_uvarint(&mut p, 0); // no stacks
        put_uvarint(&mut p, 0); // no samples
        put_uvarint(&mut p, renames.len() as u64);
        for &key in renames {
            for v in [key, 1, 0] {
                put_uvarint(&mut p, v); // netns name: string 0; no device
            }
        }
        p
    };
    let mut spent = Spent::default();
    let mut dict = Dictionary::new(crate::record::VERSION);
    assert!(dict.add(&frame(1, &[]), &mut spent).is_ok(), "a key");
    let allowed = vec![0; usize::from(MAX_RENAMES_PER_KEY)];
    let ok = dict.add(&frame(0, &allowed), &mut spent).is_ok();
    assert!(ok, "as often as a writer renames");
    assert!(dict.add(&frame(0, &[0]), &mut spent).is_err(), "once more");
    let mut fresh = Dictionary::new(crate::record::VERSION);
    assert!(fresh.add(&frame(0, &[7]), &mut Spent::default()).is_err());
}

/// Two keys defined unnamed in one frame and named later, in one frame, read back named; a
/// stack that still carries its key's first (absent) name renames nothing.
#[test]
fn keys_named_after_their_definition_read_back_named() {
    let k = |ns: u64, name: Option<&str>| {
        let mut k = attributed(None, None, Some(ns));
        k.attr.netns_name = name.map(Arc::from);
        k
    };
    let snaps: Vec<Snapshot> = (0..6u64)
        .map(|i| {
            let named = i >= 3;
            let drops = vec![
                DropCount {
                    key: k(10, named.then_some("ren3[1]")),
                    count: i + 1,
                },
                DropCount {
                    key: k(11, named.then_some("other")),
                    count: i + 2,
                },
            ];
            let mut s = snap(i, drops, Vec::new());
            s.stacks = vec![crate::model::StackCount {
                key: k(10, None),
                frames: Arc::from(vec![Arc::from("f")]),
                weight: i + 1,
                samples: 1,
            }];
            s
        })
        .collect();
    let bytes = encode(&session(), &snaps).expect("encode");
    let rec = Recording::from_bytes(&bytes).expect("open");
    let back = decode_all(&rec);
    assert_eq!(back[5].drops, snaps[5].drops);
    let names: Vec<_> = (back[5].drops.iter())
        .map(|d| d.key.attr.netns_name.clone())
        .collect();
    assert_eq!(
        names,
        [Some(Arc::from("ren3[1]")), Some(Arc::from("other"))]
    );
    let at = rec.snapshot_at(back[5].elapsed).expect("seek");
    let names: Vec<_> = (at.drops.iter())
        .map(|d| d.key.attr.netns_name.clone())
        .collect();
    assert_eq!(
        names,
        [Some(Arc::from("ren3[1]")), Some(Arc::from("other"))]
    );
}

/// Two namespaces that had one inode one after the other (the kernel gives a freed inode
/// again) are two keys, told apart by their cookies (version 6), and read back so.
#[test]
fn namespaces_of_one_inode_and_two_cookies_are_two_keys() {
    let cookie = |c: u64| {
        let mut k = attributed(Some(9), Some("lo"), Some(4026532177));
        k.attr.netns_cookie = Some(c);
        k
    };
    let drops = vec![
        DropCount {
            key: cookie(898),
            count: 5000,
        },
        DropCount {
            key: cookie(901),
            count: 10,
        },
    ];
    let bytes = encode(&session(), &[snap(0, drops.clone(), Vec::new())]).expect("encode");
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    assert_eq!(back[0].drops, drops);
    assert_eq!(back[0].drops[1].key.attr.netns_cookie, Some(901));
}

/// A recording of version 5 (no cookies) still reads, its namespaces told apart by inode; a
/// cookie's bit in a file of that version is refused as unknown.
#[test]
fn version_5_recordings_read_without_cookies() {
    let k = attributed(Some(9), Some("lo"), Some(4026532177));
    let drops = vec![DropCount { key: k, count: 7 }];
    let mut bytes = encode(&session(), &[snap(0, drops.clone(), Vec::new())]).expect("encode");
    bytes[14..16].copy_from_slice(&5u16.to_le_bytes());
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    assert_eq!(back[0].drops, drops);
    assert_eq!(back[0].drops[0].key.attr.netns_cookie, None);

    let mut k = attributed(Some(9), Some("lo"), Some(4026532177));
    k.attr.netns_cookie = Some(898);
    let drops = vec![DropCount { key: k, count: 7 }];
    let mut bytes = encode(&session(), &[snap(0, drops, Vec::new())]).expect("encode");
    bytes[14..16].copy_from_slice(&5u16.to_le_bytes());
    let rec = Recording::from_bytes(&bytes).expect("open");
    assert!(
        (rec.warnings().iter()).any(|w| w.contains("unknown attribution fields")),
        "{:?}",
        rec.warnings()
    );
}
