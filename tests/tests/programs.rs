//! Programs that drop, against the real kernel: XDP and tc programs attached in test
//! namespaces give drop verdicts to exact numbers of packets, and the ledger counts them per
//! program, device and namespace, found when they are attached (before dropscope starts, or
//! while it runs), each drop once. A kernel that lets no tracing program attach to a BPF
//! program (checked beside, with an empty fentry program) must see each such program listed
//! in the ledger's notes with the kernel's refusal instead; a program loaded without BTF is
//! listed as such on every kernel. Needs root.
use std::{
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    time::Duration,
};

use dropscope_tests::{
    Counting, Netns, ethtool_sum,
    fixture::{self, Bpffs, Kind, TC_ACT_SHOT, XDP_ABORTED, XDP_DROP},
    root_test, veth_pair,
    wait::{until, wait_line, wait_report},
};
use serde_json::Value;

/// The grouping every report here counts by: the ledger matches drops per namespace and device.
const BY: &str = "reason,location,netns,device";

fn inode(ns: &Netns) -> u64 {
    std::fs::metadata(ns.path()).expect("netns file").ino()
}

fn prog_id(fd: &std::os::fd::OwnedFd) -> u32 {
    fixture::prog_id(fd).expect("program id")
}

/// The ledger's rows of the counters whose names start with `prefix` in namespace `netns`.
fn rows<'a>(report: &'a Value, netns: u64, prefix: &str) -> Vec<&'a Value> {
    report["ledger"]["counters"]
        .as_array()
        .expect("ledger counters")
        .iter()
        .filter(|r| {
            r["netns"] == netns && r["counter"].as_str().is_some_and(|c| c.starts_with(prefix))
        })
        .collect()
}

/// Whether a report's ledger knows program `id` in `netns`: a row of `prefix`, or a note on it.
fn found_in(report: &Value, netns: u64, prefix: &str, id: u32) -> bool {
    report["ledger"]["counters"].is_array()
        && (!rows(report, netns, prefix).is_empty()
            || (report["ledger"]["notes"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .any(|n| n.starts_with(&format!("program {id} "))))
}

/// Whether the `watchers` dropscopes running have taken in program `id`, attached in `netns`
/// while they run: where the kernel lets a program's verdicts be traced (`traced`, the
/// fixture's trial), a tracing link on it each, which counts its drops from then on (a watched
/// program that dropped nothing has no row yet); where it refuses, the report's note that the
/// program is not counted.
fn taken_in(
    report: &Value,
    (traced, watchers): (&std::io::Result<()>, usize),
    netns: u64,
    prefix: &str,
    id: u32,
) -> bool {
    match traced {
        Ok(()) => fixture::tracing_links(id).expect("the host's BPF links") >= watchers,
        Err(_) => found_in(report, netns, prefix, id),
    }
}

/// The last (final) report of `report --every --format json`'s lines.
fn last_report(out: &str) -> Value {
    let last = (out.lines().rev())
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report in {out}"));
    serde_json::from_str(last).expect("JSON report")
}

/// The ledger's notes.
fn notes(report: &Value) -> Vec<&str> {
    report["ledger"]["notes"]
        .as_array()
        .expect("ledger notes")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The ledger's note about program `id`, which must be there.
fn note<'a>(report: &'a Value, id: u32, name: &str, hook: &str, netns: u64) -> &'a str {
    let start = format!("program {id} {name:?} ({hook} on ");
    let found = notes(report)
        .into_iter()
        .find(|n| n.starts_with(&start))
        .unwrap_or_else(|| panic!("no note on {start}: {:#}", report["ledger"]));
    assert!(
        found.contains(&format!("netns {netns})")) && found.contains("verdicts not counted: "),
        "{found}"
    );
    found
}

/// The sum of the ledger's rows of `Ethtool:<dev>:` statistics ending with `suffix`.
fn ledger_ethtool_sum(report: &Value, netns: u64, dev: &str, suffix: &str) -> u64 {
    rows(report, netns, &format!("Ethtool:{dev}:"))
        .into_iter()
        .filter(|r| r["counter"].as_str().is_some_and(|c| c.ends_with(suffix)))
        .map(|r| n(r, "delta"))
        .sum()
}

fn n(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

/// The probe's drops on `device` in `netns` whose reason is `reason` (and whose location
/// starts with `at`).
fn probe_drops(report: &Value, netns: u64, device: &str, reason: &str, at: &str) -> u64 {
    report["drops"]
        .as_array()
        .expect("drops")
        .iter()
        .filter(|d| d["netns"] == netns && d["device"] == device && d["reason"] == reason)
        .filter(|d| d["location"].as_str().is_some_and(|l| l.starts_with(at)))
        .map(|d| n(d, "count"))
        .sum()
}

/// The count of the report's program row of (`reason`, `location`), if it has one.
fn program_count(report: &Value, reason: &str, location: &str) -> Option<u64> {
    (report["programs"].as_array().into_iter().flatten())
        .find(|r| r["reason"] == reason && r["location"] == location)
        .and_then(|r| r["count"].as_u64())
}

/// The JSON report of a whole recording.
fn recorded_report(file: &std::path::Path) -> Value {
    dropscope_tests::json_output(
        std::process::Command::new(dropscope_tests::dropscope_bin())
            .args(["report", "--format", "json", "--input"])
            .arg(file),
    )
}

/// `diff --budget XDP_DROP<1/s` of a recording against itself (only the budget matters): its
/// exit status, stdout and stderr.
fn diff_budget(file: &std::path::Path) -> (std::process::ExitStatus, String, String) {
    let out = std::process::Command::new(dropscope_tests::dropscope_bin())
        .arg("diff")
        .args([file, file])
        .args(["--format", "json", "--budget", "XDP_DROP<1/s"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("diff runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status, text(&out.stdout), text(&out.stderr))
}

/// The ledger's total of `layer` on (`netns`, `device`).
/// Asserts the report has one program row of (`reason`, `location`), on (`netns`, `device`),
/// that counted `count`.
fn program_row(
    report: &Value,
    (reason, location): (&str, &str),
    (netns, device): (u64, &str),
    count: u64,
) {
    let found: Vec<&Value> = (report["programs"].as_array().into_iter().flatten())
        .filter(|r| r["reason"] == reason && r["location"] == location)
        .collect();
    assert_eq!(found.len(), 1, "{:#}", report["programs"]);
    assert_eq!(
        (
            &found[0]["netns"],
            &found[0]["device"],
            n(found[0], "count")
        ),
        (&netns.into(), &device.into(), count),
        "{:#}",
        found[0]
    );
}

fn layer<'a>(report: &'a Value, layer: &str, netns: u64, device: &str) -> &'a Value {
    report["ledger"]["layers"]
        .as_array()
        .expect("ledger layers")
        .iter()
        .find(|t| t["layer"] == layer && t["netns"] == netns && t["device"] == device)
        .unwrap_or_else(|| panic!("no {layer} total on {device}: {:#}", report["ledger"]))
}

#[test]
fn xdp_drop_and_aborted_are_counted_per_program_device_and_namespace() {
    let _serial = root_test();
    let (a, b) = (Netns::new("px-a"), Netns::new("px-b"));
    let (va, vb) = veth_pair(&a, &b, "10.82.0");
    let fs = Bpffs::mount();
    // Attached before dropscope starts: drops UDP to port 7001 arriving on vb.
    let drop = fixture::load(Kind::Xdp, "ds_fx_drop", 7001, XDP_DROP, true).expect("load");
    let drop_id = prog_id(&drop);
    let traced = fixture::fentry_allowed(&drop);
    eprintln!("tracing programs on this kernel: {traced:?}");
    let pin = fs.pin(&drop, "drop");
    attach_xdp(&b, &vb, "xdpdrv", &pin);
    // The neighbours are resolved before counting.
    a.traffic(&["udp-to", "10.82.0.2", "7999", "1"]);
    b.traffic(&["udp-to", "10.82.0.1", "7999", "1"]);

    let xdp_drops_before = ethtool_sum(&b, &vb, "_xdp_drops");
    // A report a second, waited on below.
    let mut report = Counting::start(&["report", "--format", "json", "--by", BY, "--every", "1"]);
    let lines = report.stdout_lines();
    // Judged beside: a budget on a program's verdicts makes `check` count them.
    let check = Counting::start(&[
        "check",
        "--format",
        "json",
        "--by",
        BY,
        "--budget",
        "XDP_DROP<1/s,total<1000000/s",
    ]);
    // Recorded beside: the programs' verdicts are read every second, between the readings of
    // the kernel's counters (every 10 s), and written down as they are read.
    let dir = tempfile::tempdir().expect("tempdir");
    let recording = dir.path().join("programs.dsrec");
    let recording_s = recording.to_str().expect("utf-8 path");
    let recorder = Counting::start(&["record", "-o", recording_s, "--no-stacks", "--by", BY]);
    // Attached while dropscope runs: aborts UDP to port 7002 arriving on va.
    let abort = fixture::load(Kind::Xdp, "ds_fx_abort", 7002, XDP_ABORTED, true).expect("load");
    let abort_id = prog_id(&abort);
    let pin2 = fs.pin(&abort, "abort");
    attach_xdp(&a, &va, "xdpdrv", &pin2);
    // Taken in by the watches of the report, of `check` and of the recorder (a tracing link
    // each), or, where the kernel refuses those, noted in a report (`check` and the recorder
    // say nothing until they end: started with the report and watching on the same schedule,
    // they have noted it too).
    let na = inode(&a);
    let abort_prefix = format!("Xdp:{va}:xdpdrv:ds_fx_abort#{abort_id}:");
    wait_report(&lines, "the program attached meanwhile taken in", |r| {
        taken_in(r, (&traced, 3), na, &abort_prefix, abort_id)
    });
    a.traffic(&["udp-to", "10.82.0.2", "7001", "500"]);
    b.traffic(&["udp-to", "10.82.0.1", "7002", "300"]);
    let drop_location = format!("prog ds_fx_drop#{drop_id} (xdpdrv)");
    if traced.is_ok() {
        // In a frame written while recording, not only in the last one, written at the end.
        dropscope_tests::wait::wait_recorded(dir.path(), "the XDP_DROP verdicts recorded", |r| {
            program_count(r, "XDP_DROP", &drop_location) == Some(500)
        });
    }
    recorder.interrupt();
    std::thread::sleep(Duration::from_millis(300));
    let report = last_report(
        &report
            .try_interrupt(Duration::from_secs(30))
            .expect("report ends"),
    );
    let (checked, check, check_err) = check
        .try_interrupt_status(Duration::from_secs(30))
        .expect("check ends");

    let (na, nb) = (inode(&a), inode(&b));
    // The veth's driver counts its XDP program's drops too (`ethtool -S`): the ledger shows the
    // same growth, a detail of the device.
    let xdp_drops = ethtool_sum(&b, &vb, "_xdp_drops") - xdp_drops_before;
    assert_eq!(xdp_drops, 500, "ethtool -S {vb}");
    assert_eq!(
        ledger_ethtool_sum(&report, nb, &vb, "_xdp_drops"),
        xdp_drops,
        "{:#}",
        report["ledger"]
    );
    // The veth frees the packets its XDP program dropped: kfree_skb sees each, without a reason.
    let freed_b = probe_drops(&report, nb, &vb, "NOT_SPECIFIED", "veth_xdp_rcv_skb");
    let freed_a = probe_drops(&report, na, &va, "NOT_SPECIFIED", "veth_xdp_rcv_skb");
    assert_eq!((freed_b, freed_a), (500, 300), "{:#}", report["drops"]);
    let dropped = rows(
        &report,
        nb,
        &format!("Xdp:{vb}:xdpdrv:ds_fx_drop#{drop_id}:"),
    );
    let aborted = rows(
        &report,
        na,
        &format!("Xdp:{va}:xdpdrv:ds_fx_abort#{abort_id}:"),
    );
    match traced {
        Ok(()) => {
            assert_eq!(dropped.len(), 1, "{:#}", report["ledger"]);
            assert!(
                dropped[0]["counter"]
                    .as_str()
                    .is_some_and(|c| c.ends_with(":drop"))
            );
            assert_eq!(n(dropped[0], "delta"), 500, "{:#}", dropped[0]);
            assert_eq!(aborted.len(), 1, "{:#}", report["ledger"]);
            assert!(
                aborted[0]["counter"]
                    .as_str()
                    .is_some_and(|c| c.ends_with(":aborted"))
            );
            assert_eq!(n(aborted[0], "delta"), 300, "{:#}", aborted[0]);
            // Each drop once: the program's verdict and the veth's free are one drop.
            for (ns, dev, count) in [(nb, &vb, 500), (na, &va, 300)] {
                let t = layer(&report, "xdp", ns, dev);
                assert_eq!(
                    (n(t, "counted"), n(t, "matched"), n(t, "counter_only")),
                    (count, count, 0),
                    "{t:#}"
                );
            }
            assert_eq!(n(&report["ledger"]["headline"], "counter_only"), 0);
            // The verdicts are rows like the probe's: reason, program, namespace, interface.
            for (reason, prog, ns, dev, count) in [
                ("XDP_DROP", format!("ds_fx_drop#{drop_id}"), nb, &vb, 500),
                (
                    "XDP_ABORTED",
                    format!("ds_fx_abort#{abort_id}"),
                    na,
                    &va,
                    300,
                ),
            ] {
                let location = format!("prog {prog} (xdpdrv)");
                program_row(&report, (reason, &location), (ns, dev), count);
            }
            // `check` broke the clause on the program's verdicts, with them as a key, and
            // kept them out of the total's.
            let check: Value = serde_json::from_str(&check).expect("check JSON");
            assert_eq!(checked.code(), Some(1), "{check:#}");
            assert_eq!(
                (&check["budgets"][0]["ok"], &check["budgets"][1]["ok"]),
                (&Value::Bool(false), &Value::Bool(true)),
                "{check:#}"
            );
            // By name, as `diff` matches runs (an id changes with every load).
            let key = (check["keys"].as_array().into_iter().flatten())
                .find(|k| k["reason"] == "XDP_DROP" && k["location"] == "prog ds_fx_drop (xdpdrv)");
            assert_eq!(key.map(|k| n(k, "count")), Some(500), "{check:#}");
            // The recording has the same rows, and the program's first dropped frames are its
            // row's samples, UDP to its port, live and recorded alike.
            let recorded = recorded_report(&recording);
            program_row(&recorded, ("XDP_DROP", &drop_location), (nb, &vb), 500);
            for (what, r) in [("live", &report), ("recorded", &recorded)] {
                let samples: Vec<(Option<u64>, Option<&str>)> =
                    (r["programs"].as_array().into_iter().flatten())
                        .filter(|p| p["reason"] == "XDP_DROP" && p["location"] == drop_location)
                        .flat_map(|p| p["samples"].as_array().into_iter().flatten())
                        .map(|s| (s["dport"].as_u64(), s["protocol"].as_str()))
                        .collect();
                assert!(
                    (1..=8).contains(&samples.len())
                        && samples.iter().all(|s| *s == (Some(7001), Some("udp"))),
                    "{what}: the XDP_DROP row samples 1 to 8 UDP frames to 7001: {samples:?}"
                );
            }
            // `diff` judges the recorded verdicts too: broken, naming the program.
            let (status, diff, _) = diff_budget(&recording);
            let diff: Value = serde_json::from_str(&diff).expect("diff JSON");
            assert_eq!(status.code(), Some(1), "{diff:#}");
            assert_eq!(diff["budgets"][0]["ok"], false, "{diff:#}");
            assert!(
                (diff["budgets"][0]["message"].as_str())
                    .is_some_and(|m| m.contains("prog ds_fx_drop (xdpdrv)")),
                "{diff:#}"
            );
        }
        Err(e) => {
            assert!(
                dropped.is_empty() && aborted.is_empty(),
                "{:#}",
                report["ledger"]
            );
            // Verdicts not counted are no rows (the notes say why), and a budget on them is
            // refused (2), never passed on nothing.
            assert_eq!(report["programs"], serde_json::json!([]));
            assert_eq!(checked.code(), Some(2), "check wrote {check}");
            assert!(
                check_err.contains("--budget XDP_DROP<1/s cannot be judged: program "),
                "{check_err}"
            );
            // Nor is one judged on a recording of them.
            let (status, diff, diff_err) = diff_budget(&recording);
            assert_eq!(status.code(), Some(2), "diff wrote {diff}");
            assert!(
                diff_err.contains("--budget XDP_DROP<1/s cannot be judged: program "),
                "{diff_err}"
            );
            let why = e.to_string();
            for (id, name, dev, ns) in [
                (drop_id, "ds_fx_drop", &vb, nb),
                (abort_id, "ds_fx_abort", &va, na),
            ] {
                let found = note(&report, id, name, "xdp xdpdrv", ns);
                assert!(found.contains(&format!(" on {dev}, ")), "{found}");
                let code = why.split(" (os error").next().unwrap_or_default();
                assert!(
                    found.contains(code),
                    "the kernel's answer ({why}) in {found}"
                );
            }
        }
    }
}

#[test]
fn tc_shot_is_one_drop_and_a_program_without_btf_is_listed() {
    let _serial = root_test();
    let (a, b) = (Netns::new("pt-a"), Netns::new("pt-b"));
    let (va, vb) = veth_pair(&a, &b, "10.83.0");
    let fs = Bpffs::mount();
    let shoot = fixture::load(Kind::Tc, "ds_fx_shoot", 7003, TC_ACT_SHOT, true).expect("load");
    let shoot_id = prog_id(&shoot);
    let traced = fixture::fentry_allowed(&shoot);
    let pin = fs.pin(&shoot, "shoot");
    dropscope_tests::tc_ingress(&b, &vb, &pin);
    // Without BTF: passes everything; its verdicts cannot be traced on any kernel.
    let plain = fixture::load(Kind::Xdp, "ds_fx_nobtf", 1, XDP_DROP, false).expect("load");
    let plain_id = prog_id(&plain);
    let pin2 = fs.pin(&plain, "plain");
    attach_xdp(&a, &va, "xdpgeneric", &pin2);
    // A tcx link (6.6+) on va's egress shoots UDP to port 7004.
    let tcx = fixture::load(Kind::Tc, "ds_fx_tcx", 7004, TC_ACT_SHOT, true).expect("load");
    let tcx_id = prog_id(&tcx);
    let _link = fixture::attach_tcx(&tcx, &a.path(), &va, true).expect("tcx link");
    a.traffic(&["udp-to", "10.83.0.2", "7999", "1"]);

    let report = Counting::start(&["report", "--format", "json", "--by", BY]);
    a.traffic(&["udp-to", "10.83.0.2", "7003", "300"]);
    a.traffic(&["udp-to", "10.83.0.2", "7004", "200"]);
    std::thread::sleep(Duration::from_millis(300));
    let report: Value = serde_json::from_str(&report.interrupt()).expect("JSON report");

    let (na, nb) = (inode(&a), inode(&b));
    assert_eq!(
        probe_drops(&report, nb, &vb, "TC_INGRESS", ""),
        300,
        "{:#}",
        report["drops"]
    );
    let found = note(&report, plain_id, "ds_fx_nobtf", "xdp xdpgeneric", na);
    assert!(
        found.ends_with("loaded without BTF function info: its verdicts cannot be traced"),
        "{found}"
    );
    assert_eq!(
        probe_drops(&report, na, &va, "TC_EGRESS", ""),
        200,
        "{:#}",
        report["drops"]
    );
    let shot = rows(
        &report,
        nb,
        &format!("Tc:{vb}:ingress:ds_fx_shoot#{shoot_id}:"),
    );
    let tcx_shot = rows(
        &report,
        na,
        &format!("Tc:{va}:tcx-egress:ds_fx_tcx#{tcx_id}:"),
    );
    match traced {
        Ok(()) => {
            assert_eq!(shot.len(), 1, "{:#}", report["ledger"]);
            assert!(
                shot[0]["counter"]
                    .as_str()
                    .is_some_and(|c| c.ends_with(":shot"))
            );
            assert_eq!(
                (
                    n(shot[0], "delta"),
                    n(shot[0], "matched"),
                    n(shot[0], "counter_only")
                ),
                (300, 300, 0),
                "{:#}",
                shot[0]
            );
            let t = layer(&report, "tc", nb, &vb);
            assert_eq!((n(t, "counted"), n(t, "counter_only")), (300, 0), "{t:#}");
            assert_eq!(tcx_shot.len(), 1, "{:#}", report["ledger"]);
            assert_eq!(
                (n(tcx_shot[0], "delta"), n(tcx_shot[0], "matched")),
                (200, 200),
                "{:#}",
                tcx_shot[0]
            );
            // Rows beside the probe's TC_INGRESS/TC_EGRESS rows, outside its total.
            for (prog, hook, ns, dev, count) in [
                (
                    format!("ds_fx_shoot#{shoot_id}"),
                    "tc ingress",
                    nb,
                    &vb,
                    300,
                ),
                (format!("ds_fx_tcx#{tcx_id}"), "tcx-egress", na, &va, 200),
            ] {
                let location = format!("prog {prog} ({hook})");
                program_row(&report, ("TC_SHOT", &location), (ns, dev), count);
            }
        }
        Err(e) => {
            assert!(
                shot.is_empty() && tcx_shot.is_empty(),
                "{:#}",
                report["ledger"]
            );
            assert_eq!(report["programs"], serde_json::json!([]));
            let code = e.to_string();
            let code = code.split(" (os error").next().unwrap_or_default();
            for (id, name, hook, ns) in [
                (shoot_id, "ds_fx_shoot", "tc ingress", nb),
                (tcx_id, "ds_fx_tcx", "tc tcx-egress", na),
            ] {
                let found = note(&report, id, name, hook, ns);
                assert!(found.contains(code), "the kernel's answer ({e}) in {found}");
            }
        }
    }
    // The clsact qdisc counts the shot packets as its drops: matched, never a second drop.
    let q = layer(&report, "qdisc", nb, &vb);
    assert_eq!((n(q, "counted"), n(q, "counter_only")), (300, 0), "{q:#}");
    let h = &report["ledger"]["headline"];
    assert_eq!(n(h, "counter_only"), 0, "{h:#}");
}

#[test]
fn a_tcx_program_attached_while_dropscope_runs_is_found_within_a_reading() {
    let _serial = root_test();
    let (a, b) = (Netns::new("pl-a"), Netns::new("pl-b"));
    let (va, _vb) = veth_pair(&a, &b, "10.84.0");
    a.traffic(&["udp-to", "10.84.0.2", "7999", "1"]);
    // Started first: with no tc program loaded, its readings ask no device for tcx programs
    // until the program watch finds one. A report a second, waited on below.
    let mut report = Counting::start(&["report", "--format", "json", "--by", BY, "--every", "1"]);
    let lines = report.stdout_lines();
    wait_line(&lines, "a reading before the program", |l| {
        l.starts_with('{')
    });
    let tcx = fixture::load(Kind::Tc, "ds_fx_late", 7005, TC_ACT_SHOT, true).expect("load");
    let tcx_id = prog_id(&tcx);
    let traced = fixture::fentry_allowed(&tcx);
    let _link = fixture::attach_tcx(&tcx, &a.path(), &va, true).expect("tcx link");
    let na = inode(&a);
    // Taken in by the watch (its tracing link, or its note in a report where the kernel refuses
    // one); its drops are on the device from the reading that finds it there.
    let prefix = format!("Tc:{va}:tcx-egress:ds_fx_late#{tcx_id}:");
    wait_report(&lines, "the program taken in", |r| {
        taken_in(r, (&traced, 1), na, &prefix, tcx_id)
    });
    a.traffic(&["udp-to", "10.84.0.2", "7005", "150"]);
    wait_report(&lines, "the program's drops counted", |r| {
        probe_drops(r, na, &va, "TC_EGRESS", "") >= 150
    });
    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let report = last_report(&out);

    assert_eq!(
        probe_drops(&report, na, &va, "TC_EGRESS", ""),
        150,
        "{:#}",
        report["drops"]
    );
    let place = (na, tcx_id, "ds_fx_late", "tc tcx-egress");
    counted_or_noted(&report, &traced, &prefix, place, 150);
}

#[test]
fn a_program_in_a_namespace_without_a_name_or_counted_drops_is_found() {
    let _serial = root_test();
    let (a, b) = (Netns::new("pu-a"), Netns::new("pu-b"));
    let (_va, vb) = veth_pair(&a, &b, "10.85.0");
    a.traffic(&["udp-to", "10.85.0.2", "7999", "1"]);
    let fs = Bpffs::mount();
    let drop = fixture::load(Kind::Xdp, "ds_fx_hidden", 7006, XDP_DROP, true).expect("load");
    let drop_id = prog_id(&drop);
    let traced = fixture::fentry_allowed(&drop);
    let pin = fs.pin(&drop, "hidden");
    attach_xdp(&b, &vb, "xdpdrv", &pin);
    // b loses its name; a process keeps it, as a container's namespace is kept.
    let mut holder = std::process::Command::new("ip")
        .args(["netns", "exec", &b.name, "sleep", "120"])
        .spawn()
        .expect("holder");
    // In b once `ip netns exec` has entered it (not after a guessed time).
    let holder_ns = || {
        std::fs::metadata(format!("/proc/{}/ns/net", holder.id()))
            .expect("holder's namespace")
            .ino()
    };
    until("the holder in b", || holder_ns() == inode(&b));
    let nb = holder_ns();
    assert_eq!(nb, inode(&b));
    let status = std::process::Command::new("ip")
        .args(["netns", "del", &b.name])
        .status()
        .expect("ip netns del");
    assert!(status.success());
    std::mem::forget(b);

    // Counted without the namespace (`--by` without netns): the drops there name no namespace
    // to read, so only the search for where new programs are attached can find it.
    let mut report = Counting::start(&[
        "report",
        "--format",
        "json",
        "--by",
        "reason,location,device",
        "--every",
        "1",
    ]);
    let lines = report.stdout_lines();
    // Taken in by the watch (its tracing link, or its note once a reading places it where the
    // kernel refuses one); where it is counted, below, only the search can tell.
    let prefix = format!("Xdp:{vb}:xdpdrv:ds_fx_hidden#{drop_id}:");
    wait_report(&lines, "the program taken in", |r| {
        taken_in(r, (&traced, 1), nb, &prefix, drop_id)
    });
    a.traffic(&["udp-to", "10.85.0.2", "7006", "120"]);
    // Where verdicts are counted: a report whose reading came after the drops has them (else
    // the note found above is all there is to see).
    if traced.is_ok() {
        wait_report(&lines, "the program's drops read", |r| {
            rows(r, nb, &prefix)
                .iter()
                .any(|row| n(row, "delta") >= 120)
        });
    }
    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let _ = holder.kill();
    let _ = holder.wait();
    let report = last_report(&out);
    let place = (nb, drop_id, "ds_fx_hidden", "xdp xdpdrv");
    counted_or_noted(&report, &traced, &prefix, place, 120);
}

/// Attaches the pinned XDP program `pin` to `dev` of `ns` in `mode` (`xdpdrv`, `xdpgeneric`).
/// An AF_XDP socket that never gives the kernel a buffer: every packet an XDP program
/// redirects to it is dropped, as the socket's own statistics say, and the ledger's AF_XDP row
/// of its device and namespace counts exactly those, matched with the redirect's failure.
#[test]
fn an_af_xdp_socket_without_buffers_drops_what_it_is_given() {
    const SENT: u64 = 400;
    let _serial = root_test();
    let (a, b) = (Netns::new("pk-a"), Netns::new("pk-b"));
    let (_va, vb) = veth_pair(&a, &b, "10.86.0");
    let fs = Bpffs::mount();
    let map = fixture::xskmap().expect("XSKMAP");
    let prog = fixture::load_insns(
        Kind::Xdp,
        "ds_fx_xsk",
        &fixture::redirect_program(7005, map.as_raw_fd()),
        true,
    )
    .expect("load");
    let xsk = dropscope_tests::xsk::Socket::bind(&b.path(), &vb, 0).expect("AF_XDP socket");
    fixture::map_set(&map, 0, xsk.fd()).expect("the socket in the XSKMAP");
    let pin = fs.pin(&prog, "xsk");
    attach_xdp(&b, &vb, "xdpgeneric", &pin);
    a.traffic(&["udp-to", "10.86.0.2", "7999", "1"]);
    let before = xsk.statistics().expect("XDP_STATISTICS");

    let report = Counting::start(&["report", "--format", "json", "--by", BY]);
    a.traffic(&["udp-to", "10.86.0.2", "7005", &SENT.to_string()]);
    std::thread::sleep(Duration::from_millis(300));
    let report: Value = serde_json::from_str(&report.interrupt()).expect("JSON report");

    let after = xsk.statistics().expect("XDP_STATISTICS");
    let dropped = after.rx_dropped - before.rx_dropped;
    assert_eq!(dropped, SENT, "the socket's own count: {after:?}");
    let nb = inode(&b);
    let sk = xsk.inode().expect("socket inode");
    let found = rows(&report, nb, &format!("Xsk:{vb}:q0:sk{sk}:rx_dropped"));
    if let Err(e) = dropscope_tests::xsk::diag_available() {
        // This kernel cannot tell anyone its AF_XDP sockets' counts: the ledger says so.
        assert!(found.is_empty(), "{:#}", report["ledger"]);
        assert!(
            notes(&report).iter().any(|n| n.starts_with(&format!("netns {nb}: AF_XDP sockets' drops not read: this kernel answers no AF_XDP sock_diag"))),
            "{e}: {:#}",
            report["ledger"]["notes"]
        );
        return;
    }
    assert_eq!(found.len(), 1, "{:#}", report["ledger"]);
    assert_eq!(n(found[0], "delta"), dropped, "{:#}", found[0]);
    // The redirect failed, so the skb was freed: one drop, seen by both.
    let t = layer(&report, "af_xdp", nb, &vb);
    assert_eq!(
        (n(t, "counted"), n(t, "matched"), n(t, "counter_only")),
        (SENT, SENT, 0),
        "{t:#}\n{:#}",
        report["drops"]
    );
    let empty = rows(&report, nb, &format!("Xsk:{vb}:q0:sk{sk}:fill_ring_empty"));
    assert_eq!(
        empty.first().map(|r| n(r, "delta")),
        Some(after.rx_fill_ring_empty_descs - before.rx_fill_ring_empty_descs),
        "{:#}",
        report["ledger"]
    );
}

fn attach_xdp(ns: &Netns, dev: &str, mode: &str, pin: &std::path::Path) {
    let pin = pin.to_str().expect("path");
    ns.exec(&["ip", "link", "set", "dev", dev, mode, "pinned", pin]);
}

/// Where the kernel traces programs (`traced`), the program at `place` (namespace, id, name,
/// hook) has one counter row starting with `prefix` that counted `count`; elsewhere none, and
/// a note says why with the kernel's answer.
fn counted_or_noted(
    report: &Value,
    traced: &std::io::Result<()>,
    prefix: &str,
    (ns, id, name, hook): (u64, u32, &str, &str),
    count: u64,
) {
    let found = rows(report, ns, prefix);
    match traced {
        Ok(()) => {
            assert_eq!(found.len(), 1, "{:#}", report["ledger"]);
            assert_eq!(n(found[0], "delta"), count, "{:#}", found[0]);
        }
        Err(e) => {
            assert!(found.is_empty(), "{:#}", report["ledger"]);
            let note = note(report, id, name, hook, ns);
            let code = e.to_string();
            let code = code.split(" (os error").next().unwrap_or_default();
            assert!(note.contains(code), "the kernel's answer ({e}) in {note}");
        }
    }
}

#[test]
fn a_program_load_moves_the_load_watch() {
    let _serial = root_test();
    let mut watch = dropscope::probe::verdicts::loads::LoadWatch::open().expect("side-band events");
    // What happened before (or while) it opened is not this test's.
    let _ = watch.changed();
    let before = fixture::programs_named("ds_fx_seen").expect("programs");
    let prog = fixture::load(Kind::Xdp, "ds_fx_seen", 1, XDP_DROP, true).expect("load");
    assert!(watch.changed(), "the load was not seen");
    assert_eq!(
        fixture::programs_named("ds_fx_seen").expect("programs"),
        before + 1
    );
    drop(prog);
    // Its unload is an event too (freed after an RCU grace period: waited for, generously).
    let until = std::time::Instant::now() + dropscope_tests::wait::LIMIT;
    let mut seen = watch.changed();
    while !seen && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        seen = watch.changed();
    }
    assert!(seen, "the unload was not seen");
}

/// Finds program `id` by calling the watch's look as a poll would, until `limit`; returns how
/// long it took. With `missed`, every load record is lost before each look (another test's
/// programs, freed after a grace period, would otherwise be events that find it sooner).
fn found_within(
    programs: &mut dropscope::probe::verdicts::Programs,
    id: u32,
    limit: Duration,
    missed: bool,
) -> Duration {
    let start = std::time::Instant::now();
    loop {
        if missed {
            programs.miss_loads();
        }
        programs.discover_if_due();
        if programs.found(id) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "program {id} not found within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_program_whose_load_event_is_missed_is_found_by_the_next_look() {
    use dropscope::probe::verdicts::{DISCOVER_ANYWAY, Programs};
    let _serial = root_test();
    let mut programs = Programs::start().expect("the program watch");
    let prog = fixture::load(Kind::Xdp, "ds_fx_missed", 1, XDP_DROP, true).expect("load");
    let id = prog_id(&prog);
    programs.miss_loads();
    programs.discover_if_due();
    assert!(
        !programs.found(id),
        "found at once although its load was missed: this test shows nothing"
    );
    // The bound, with a second for a slow machine's polls.
    let took = found_within(
        &mut programs,
        id,
        DISCOVER_ANYWAY + Duration::from_secs(1),
        true,
    );
    assert!(took > Duration::from_millis(500), "{took:?}");
}

#[test]
fn a_program_given_an_id_below_the_highest_seen_is_found_at_its_load() {
    let _serial = root_test();
    let mut programs = dropscope::probe::verdicts::Programs::start().expect("the program watch");
    // As after the kernel's ids wrapped (at i32::MAX): new programs get ids below it.
    programs.assume_highest_id(i32::MAX as u32 - 1);
    let prog = fixture::load(Kind::Xdp, "ds_fx_wrapped", 1, XDP_DROP, true).expect("load");
    let id = prog_id(&prog);
    // Its load is seen at the next poll: found then, not at a later look.
    found_within(&mut programs, id, Duration::from_millis(400), false);
}

#[test]
fn a_program_attached_long_after_its_load_is_counted_from_its_load() {
    let _serial = root_test();
    let (a, b) = (Netns::new("pg-a"), Netns::new("pg-b"));
    let (_va, vb) = veth_pair(&a, &b, "10.86.0");
    let fs = Bpffs::mount();
    // The neighbours are resolved before counting.
    a.traffic(&["udp-to", "10.86.0.2", "7999", "1"]);
    b.traffic(&["udp-to", "10.86.0.1", "7999", "1"]);
    let mut report = Counting::start(&["report", "--format", "json", "--by", BY, "--every", "1"]);
    let lines = report.stdout_lines();
    wait_line(&lines, "a reading before the program", |l| {
        l.starts_with('{')
    });
    // Loaded while dropscope runs, attached by a later step of its loader.
    let prog = fixture::load(Kind::Xdp, "ds_fx_grace", 7006, XDP_DROP, true).expect("load");
    let id = prog_id(&prog);
    let traced = fixture::fentry_allowed(&prog);
    eprintln!("tracing programs on this kernel: {traced:?}");
    if traced.is_ok() {
        until("the program watched", || {
            fixture::tracing_links(id).expect("the host's BPF links") >= 1
        });
    }
    // Part of what is tested: more readings than the search for where it is attached and the
    // two after it (a second each) go by with the program attached nowhere.
    for _ in 0..6 {
        wait_line(&lines, "a reading of the program attached nowhere", |l| {
            l.starts_with('{')
        });
    }
    let pin = fs.pin(&prog, "grace");
    attach_xdp(&b, &vb, "xdpdrv", &pin);
    a.traffic(&["udp-to", "10.86.0.2", "7006", "200"]);
    let nb = inode(&b);
    let prefix = format!("Xdp:{vb}:xdpdrv:ds_fx_grace#{id}:");
    wait_report(&lines, "the program's drops read, or its note", |r| {
        found_in(r, nb, &prefix, id)
            && (traced.is_err()
                || rows(r, nb, &prefix)
                    .iter()
                    .any(|row| n(row, "delta") >= 200))
    });
    let out = report
        .try_interrupt(Duration::from_secs(30))
        .expect("report ends");
    let report = last_report(&out);
    counted_or_noted(
        &report,
        &traced,
        &prefix,
        (nb, id, "ds_fx_grace", "xdp xdpdrv"),
        200,
    );
}
