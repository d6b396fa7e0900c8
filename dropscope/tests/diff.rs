//! `dropscope diff` as CI meets it, without root: exit statuses (0 held, 1 broken, 2 misused),
//! the JSON's shape, JUnit XML that parses, and names from a recording escaped in every format.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::Arc,
    time::Duration,
};

use dropscope::model::{Attribution, DropCount, DropKey, Reason, SessionInfo, Snapshot};

/// A key: (reason, location, namespace name).
type Key<'a> = (&'a str, &'a str, &'a str);

fn key(k: Key<'_>, i: usize) -> DropKey {
    DropKey {
        reason: Reason {
            code: 2 + i as u32,
            name: Arc::from(k.0),
        },
        location: Arc::from(k.1),
        attr: Attribution {
            netns: Some(4026532100 + i as u64),
            netns_cookie: None,
            netns_name: Some(Arc::from(k.2)),
            ifindex: Some(1),
            device: Some(Arc::from("lo")),
            protocol: Some(Arc::from("udp")),
            port: None,
            socket: None,
            culprit: None,
        },
    }
}

/// Writes a recording of 10 one-second snapshots in which each key drops at its rate.
fn recording(dir: &Path, name: &str, keys: &[(Key<'_>, u64)]) -> PathBuf {
    let snaps: Vec<Snapshot> = (1..=10u64)
        .map(|t| {
            let drops: Vec<DropCount> = (keys.iter().enumerate())
                .map(|(i, (k, rate))| DropCount {
                    key: key(*k, i),
                    count: rate * t,
                })
                .collect();
            Snapshot {
                elapsed: Duration::from_secs(t),
                unix_ms: 1_750_000_000_000 + 1000 * t,
                total: drops.iter().map(|d| d.count).sum(),
                drops,
                ..Default::default()
            }
        })
        .collect();
    let info = SessionInfo {
        host: "test".into(),
        kernel: "6.18".into(),
        started_unix_ms: 1_750_000_000_000,
        probe: "tp_btf/kfree_skb".into(),
    };
    let path = dir.join(name);
    let bytes = dropscope::record::encode(&info, &snaps).expect("encode");
    std::fs::write(&path, bytes).expect("write recording");
    path
}

const UDP: Key<'static> = ("NO_SOCKET", "__udp4_lib_rcv+0x1c", "web1");
const NFT: Key<'static> = ("NETFILTER_DROP", "nft_do_chain+0x3e8", "db1");

/// BASE: 50/s NO_SOCKET and 20/s NETFILTER_DROP; NEW: NO_SOCKET doubled.
fn runs(dir: &Path) -> (String, String) {
    let base = recording(dir, "base.dsrec", &[(UDP, 50), (NFT, 20)]);
    let new = recording(dir, "new.dsrec", &[(UDP, 100), (NFT, 20)]);
    let s = |p: PathBuf| p.to_str().expect("utf-8 path").to_owned();
    (s(base), s(new))
}

fn dropscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dropscope"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dropscope")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn status(out: &Output, want: i32, args: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(want),
        "{args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn exit_status_is_0_when_budgets_hold_1_when_broken_2_when_misused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let (base, new) = (base.as_str(), new.as_str());
    for (args, want) in [
        // A significant regression alone does not fail...
        (vec!["diff", base, new], 0),
        (
            vec![
                "diff",
                base,
                new,
                "--budget",
                "total<200/s,NO_SOCKET<=100/s",
            ],
            0,
        ),
        (vec!["diff", base, new, "--budget", "new-reasons=0"], 0),
        // ... unless asked to; a broken clause does.
        (vec!["diff", base, new, "--fail-on-regression"], 1),
        (vec!["diff", base, new, "--budget", "no_socket<1/s"], 1),
        (
            vec![
                "diff",
                base,
                new,
                "--budget",
                "total<200/s",
                "--budget",
                "total<1/m",
            ],
            1,
        ),
        (vec!["diff", new, base, "--fail-on-regression"], 0),
        // Usage errors: a clause that does not parse, one the inputs cannot answer, a
        // misspelt reason, two standard inputs, an alpha out of range.
        (vec!["diff", base, new, "--budget", "total<5"], 2),
        (vec!["diff", base, new, "--budget", "ratio<0.1%"], 2),
        (vec!["diff", base, new, "--budget", "NO_SOCKT<1/s"], 2),
        (
            vec![
                "diff",
                base,
                new,
                "--by",
                "netns",
                "--budget",
                "NO_SOCKET<1/s",
            ],
            2,
        ),
        (vec!["diff", "-", "-"], 2),
        (vec!["diff", base, new, "--alpha", "1.5"], 2),
        (vec!["diff", base], 2),
        (
            vec!["check", "--budget", "new-reasons=0", "--duration", "1"],
            2,
        ),
        // An input that cannot be read is an error.
        (vec!["diff", base, "/nonexistent.dsrec"], 1),
    ] {
        status(&dropscope(&args), want, &args);
    }
}

#[test]
fn a_broken_clause_is_named_with_its_value_limit_and_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let args = [
        "diff",
        &base,
        &new,
        "--budget",
        "NO_SOCKET<1/s",
        "--budget",
        "total<1000/s",
    ];
    let out = dropscope(&args);
    status(&out, 1, &args);
    let err = text(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("NO_SOCKET<1/s"))
        .unwrap_or_else(|| panic!("no line names the clause: {err}"));
    for want in ["100/s", "limit 1/s", "__udp4_lib_rcv+0x1c", "web1"] {
        assert!(line.contains(want), "{want:?} missing: {line}");
    }
    assert!(
        !err.contains("total<1000/s"),
        "a clause that holds is not an error: {err}"
    );
    let table = text(&out.stdout);
    assert!(table.contains("BROKEN  NO_SOCKET<1/s"), "{table}");
    assert!(table.contains("ok      total<1000/s"), "{table}");
    let row = (table.lines())
        .find(|l| l.starts_with("NO_SOCKET"))
        .unwrap_or_else(|| panic!("no NO_SOCKET row: {table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[cells.len() - 5..],
        ["50.0", "100", "2.00x", "1.1e-38", "regression"],
        "{table}"
    );

    // With --fail-on-regression, the regression is named on stderr.
    let args = ["diff", &base, &new, "--fail-on-regression"];
    let out = dropscope(&args);
    status(&out, 1, &args);
    let err = text(&out.stderr);
    assert!(
        err.contains("regression: NO_SOCKET at __udp4_lib_rcv+0x1c in netns web1"),
        "{err}"
    );
    assert!(
        !err.contains("NETFILTER_DROP"),
        "a steady key is no regression: {err}"
    );
}

#[test]
fn json_output_has_runs_keys_budgets_and_verdict() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let args = [
        "diff",
        &base,
        &new,
        "--format",
        "json",
        "--budget",
        "total<5/s,new-reasons=0",
    ];
    let out = dropscope(&args);
    status(&out, 1, &args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["base"]["input"], base.as_str());
    assert_eq!(v["base"]["seconds"], 10.0);
    assert_eq!(v["base"]["total"], 700);
    assert_eq!(v["new"]["rate"], 120.0);
    assert!(v["new"]["packets"].is_null(), "{v:#}");
    assert_eq!(v["alpha"], 0.001);
    assert_eq!(v["total"]["ratio"], 120.0 / 70.0);
    let keys = v["keys"].as_array().expect("keys");
    assert_eq!(keys.len(), 2);
    let k = &keys[0];
    assert_eq!(
        (
            &k["reason"],
            &k["location"],
            &k["netns"],
            &k["device"],
            &k["protocol"]
        ),
        (
            &"NO_SOCKET".into(),
            &"__udp4_lib_rcv+0x1c".into(),
            &"web1".into(),
            &"lo".into(),
            &"udp".into()
        )
    );
    assert_eq!(
        (&k["base_count"], &k["new_count"]),
        (&500.into(), &1000.into())
    );
    assert_eq!(
        (&k["base_rate"], &k["new_rate"], &k["ratio"]),
        (&50.0.into(), &100.0.into(), &2.0.into())
    );
    assert!(k["p_value"].as_f64().is_some_and(|p| p < 1e-30), "{k:#}");
    assert_eq!(k["change"], "regression");
    assert!(k.get("port").is_none(), "not grouped by port: {k:#}");
    assert_eq!(keys[1]["change"], serde_json::Value::Null);
    assert_eq!(keys[1]["ratio"], 1.0);
    let budgets = v["budgets"].as_array().expect("budgets");
    assert_eq!(budgets.len(), 2);
    assert_eq!(budgets[0]["clause"], "total<5/s");
    assert_eq!(
        (
            &budgets[0]["ok"],
            &budgets[0]["value"],
            &budgets[0]["limit"]
        ),
        (&false.into(), &120.0.into(), &5.0.into())
    );
    assert_eq!(budgets[0]["keys"][0]["reason"], "NO_SOCKET");
    assert!(
        budgets[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("120/s")),
        "{v:#}"
    );
    assert_eq!(
        (&budgets[1]["clause"], &budgets[1]["ok"]),
        (&"new-reasons=0".into(), &true.into())
    );
    assert_eq!(v["regressions"], 1);
    assert_eq!(v["ok"], false);
}

#[test]
fn report_json_is_an_input_as_a_recording_is_and_stdin_is_one_side() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let report = dropscope(&["report", "--input", &new, "--format", "json"]);
    status(&report, 0, &["report"]);
    let json_path = dir.path().join("new.json");
    std::fs::write(&json_path, &report.stdout).expect("write JSON");
    let json_path = json_path.to_str().expect("utf-8 path");
    let from_json = dropscope(&["diff", &base, json_path, "--format", "json"]);
    status(&from_json, 0, &["diff", "BASE", "NEW.json"]);
    let from_rec = dropscope(&["diff", &base, &new, "--format", "json"]);
    let keys = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
        v["keys"].clone()
    };
    assert_eq!(keys(&from_json), keys(&from_rec));

    // A recording on standard input as BASE.
    let mut child = Command::new(env!("CARGO_BIN_EXE_dropscope"))
        .args(["diff", "-", &new, "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dropscope");
    let bytes = std::fs::read(&base).expect("read recording");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&bytes)
        .expect("write stdin");
    let piped = child.wait_with_output().expect("wait");
    status(&piped, 0, &["diff", "-", "NEW"]);
    assert_eq!(keys(&piped), keys(&from_rec));

    // Neither a recording nor a report.
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "hello").expect("write");
    let out = dropscope(&["diff", &base, junk.to_str().expect("utf-8")]);
    status(&out, 1, &["diff", "BASE", "junk"]);
    assert!(
        text(&out.stderr).contains("neither a dropscope recording"),
        "{}",
        text(&out.stderr)
    );
}

/// Every element and its attributes (unescaped) of an XML document; panics unless it is
/// well-formed.
fn xml_elements(xml: &str) -> Vec<(String, Vec<(String, String)>)> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) => {
                let attrs = e
                    .attributes()
                    .map(|a| {
                        let a = a.expect("a well-formed attribute");
                        (
                            String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                            a.normalized_value(quick_xml::XmlVersion::Explicit1_0)
                                .expect("valid escapes")
                                .into_owned(),
                        )
                    })
                    .collect();
                out.push((
                    String::from_utf8_lossy(e.name().as_ref()).into_owned(),
                    attrs,
                ));
            }
            Ok(Event::Eof) => return out,
            Ok(_) => {}
            Err(e) => panic!("not well-formed XML ({e}): {xml}"),
        }
    }
}

fn attr<'a>(e: &'a (String, Vec<(String, String)>), name: &str) -> &'a str {
    (e.1.iter())
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

#[test]
fn junit_has_a_case_per_clause_and_per_significant_regression() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (base, new) = runs(dir.path());
    let args = [
        "diff",
        &base,
        &new,
        "--format",
        "junit",
        "--budget",
        "total<5/s",
        "--budget",
        "NETFILTER_DROP<100/s",
    ];
    let out = dropscope(&args);
    status(&out, 1, &args);
    let xml = text(&out.stdout);
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        "{xml}"
    );
    let elements = xml_elements(&xml);
    let cases: Vec<_> = elements.iter().filter(|e| e.0 == "testcase").collect();
    let names: Vec<&str> = cases.iter().map(|c| attr(c, "name")).collect();
    assert_eq!(
        names,
        [
            "total<5/s",
            "NETFILTER_DROP<100/s",
            "NO_SOCKET at __udp4_lib_rcv+0x1c in netns web1 on lo (udp)"
        ],
        "{xml}"
    );
    let failures: Vec<_> = elements.iter().filter(|e| e.0 == "failure").collect();
    assert_eq!(failures.len(), 1, "only the broken clause fails: {xml}");
    let message = attr(failures[0], "message");
    for want in [
        "total<5/s broken",
        "120/s",
        "NO_SOCKET",
        "__udp4_lib_rcv+0x1c",
        "web1",
    ] {
        assert!(message.contains(want), "{want:?} missing: {message}");
    }
    let suite = elements
        .iter()
        .find(|e| e.0 == "testsuite")
        .expect("a suite");
    assert_eq!((attr(suite, "tests"), attr(suite, "failures")), ("3", "1"));

    // Failing on regressions, the regression's case fails too, naming reason, location and
    // workload.
    let args = [
        "diff",
        &base,
        &new,
        "--format",
        "junit",
        "--fail-on-regression",
    ];
    let out = dropscope(&args);
    status(&out, 1, &args);
    let elements = xml_elements(&text(&out.stdout));
    let failures: Vec<_> = elements.iter().filter(|e| e.0 == "failure").collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(attr(failures[0], "type"), "regression");
    let m = attr(failures[0], "message");
    assert!(
        m.contains("NO_SOCKET at __udp4_lib_rcv+0x1c in netns web1") && m.contains("2.00x"),
        "{m}"
    );
}

#[test]
fn hostile_names_are_escaped_in_the_table_json_and_xml() {
    const REASON: &str = "EVIL\x1b]0;pwned\x07";
    const LOCATION: &str = "f<script>&amp;]]>\u{202e}+0x1";
    const NETNS: &str = "ns\r\nFAKE ROW 999\u{9b}31m";
    let dir = tempfile::tempdir().expect("temp dir");
    let hostile: Key<'static> = (REASON, LOCATION, NETNS);
    let base = recording(dir.path(), "b.dsrec", &[(hostile, 1)]);
    let new = recording(dir.path(), "n.dsrec", &[(hostile, 50)]);
    let (base, new) = (base.to_str().expect("utf-8"), new.to_str().expect("utf-8"));
    let run = |format: &str| {
        let args = [
            "diff",
            base,
            new,
            "--format",
            format,
            "--budget",
            "total<1/s",
            "--fail-on-regression",
        ];
        let out = dropscope(&args);
        status(&out, 1, &args);
        (text(&out.stdout), text(&out.stderr))
    };
    let safe = |what: &str, s: &str| {
        for c in s.chars() {
            assert!(
                c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
                "{what}: {c:?} reached the output: {s:?}"
            );
        }
    };

    let (table, err) = run("table");
    safe("table", &table);
    safe("stderr", &err);
    assert!(table.contains("EVIL\\u{1b}]0;pwned\\u{7}"), "{table}");
    assert!(
        !table.contains("FAKE ROW 999\n") && !err.contains("\nFAKE"),
        "{table}{err}"
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("EVIL")).count(),
        1,
        "one row for the key: {table}"
    );

    let (json, _) = run("json");
    safe("json", &json);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    // JSON keeps names exact (escaped, not altered).
    assert_eq!(v["keys"][0]["reason"], REASON);
    assert_eq!(v["keys"][0]["location"], LOCATION);
    assert_eq!(v["keys"][0]["netns"], NETNS);

    let (xml, _) = run("junit");
    safe("xml", &xml);
    assert!(!xml.contains("<script>") && !xml.contains("]]>"), "{xml}");
    let elements = xml_elements(&xml);
    let case = (elements.iter())
        .find(|e| e.0 == "testcase" && attr(e, "classname") == "dropscope.regression")
        .unwrap_or_else(|| panic!("no regression case: {xml}"));
    // Names arrive as written, but with control and bidi characters shown escaped.
    let name = attr(case, "name");
    assert!(
        name.starts_with(
            "EVIL\\u{1b}]0;pwned\\u{7} at f<script>&amp;]]>\\u{202e}+0x1 in netns ns\\r\\nFAKE"
        ),
        "{name}"
    );
    let failure = (elements.iter())
        .find(|e| e.0 == "failure" && attr(e, "type") == "budget")
        .expect("the budget's failure");
    assert!(
        attr(failure, "message").contains("f<script>&amp;]]>"),
        "{xml}"
    );
}
