//! Hostile input and hostile places: crafted recordings (made by `dropscope_tests::hostile`)
//! against the reader and every consumer, output files in directories others control, and
//! signals. Needs root (mounts, file ownership, the probe for `record`); tests that attach the
//! probe take the shared lock via `root_test`.
use std::{
    io::Read,
    os::unix::fs::{MetadataExt, symlink},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use dropscope_tests::{dropscope_bin, hostile, root_test, run};

/// What a finished dropscope run did.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    max_rss_mb: f64,
    seconds: f64,
}

/// Runs dropscope with `args`, measuring its peak memory (wait4's rusage) and time.
fn measured(args: &[&str]) -> Ran {
    let started = Instant::now();
    // Reaped by wait4 below, which also gives its resource usage.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(dropscope_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dropscope");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let mut stderr = Vec::new();
    let _ = err.read_to_end(&mut stderr);
    let stdout = reader.join().expect("reader");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with valid pointers to locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    Ran {
        code: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        },
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        max_rss_mb: usage.ru_maxrss as f64 / 1024.0,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Whether `c` would act on a terminal instead of being shown (controls, bidi overrides).
fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c)
}

fn write(dir: &Path, name: &str, rec: &hostile::HostileRecording) -> String {
    let p = dir.join(name);
    rec.write(&p);
    p.to_str().expect("utf-8 path").to_string()
}

#[test]
fn allocation_bombs_are_refused_fast_within_the_budget() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    for frames in [1, 4] {
        let bomb = hostile::empty_stack_bomb(frames);
        let size = bomb.bytes().len();
        let path = write(dir.path(), &format!("bomb{frames}.dsrec"), &bomb);
        let r = measured(&["report", "--input", &path]);
        eprintln!(
            "bomb of {size} bytes: exit {}, {:.1} MB peak, {:.2} s: {}",
            r.code,
            r.max_rss_mb,
            r.seconds,
            r.stderr.trim()
        );
        assert_ne!(r.code, 0, "a bomb must be refused");
        assert!(r.stderr.contains("limit of 262144 stacks"), "{}", r.stderr);
        assert!(r.max_rss_mb < 200.0, "{:.0} MB", r.max_rss_mb);
        assert!(r.seconds < 5.0, "{:.1} s", r.seconds);
    }
}

#[test]
fn deep_stacks_are_refused_and_stay_bounded_within_the_limit() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "deep.dsrec", &hostile::deep_stack(100_000));
    for args in [
        vec!["report", "--input", &path],
        vec!["flamegraph", "--input", &path, "--format", "folded", "-o"],
    ] {
        let mut args = args;
        let out = dir.path().join("deep.folded");
        let out = out.to_str().expect("utf-8");
        if args[0] == "flamegraph" {
            args.push(out);
        }
        let r = measured(&args);
        assert_ne!(r.code, 0);
        assert!(
            r.stderr.contains("limit of 1024 frames in one stack"),
            "{}",
            r.stderr
        );
        assert!(r.max_rss_mb < 100.0, "{:.0} MB", r.max_rss_mb);
    }
    // The deepest stack allowed draws, cut with a marker.
    let path = write(dir.path(), "deep1024.dsrec", &hostile::deep_stack(1024));
    let out = dir.path().join("deep1024.folded");
    let r = measured(&[
        "flamegraph",
        "--input",
        &path,
        "--format",
        "folded",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let folded = std::fs::read_to_string(&out).expect("folded");
    assert!(folded.contains("[769 frames cut]"), "{folded}");
}

#[test]
fn report_never_lets_a_name_drive_the_terminal() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "esc.dsrec", &hostile::escaping_names());
    for format in ["table", "json"] {
        let r = measured(&["report", "--input", &path, "--format", format]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let bad: Vec<char> = r.stdout.chars().filter(|&c| acts_on_terminal(c)).collect();
        assert!(
            bad.is_empty(),
            "{bad:?} reached the terminal: {:?}",
            r.stdout
        );
        assert!(r.stdout.contains("NO_SOCKET"), "{}", r.stdout);
        if format == "table" {
            // No forged row: a header, one row, the total.
            assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
        } else {
            let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
            let loc = v["drops"][0]["location"].as_str().expect("location");
            assert!(loc.contains('\u{202e}'), "JSON keeps the exact name");
        }
    }
}

#[test]
fn a_65536_byte_location_is_cut_not_a_panic() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    for len in [65_536, 65_535] {
        let path = write(dir.path(), "long.dsrec", &hostile::long_location(len));
        let r = measured(&["report", "--input", &path]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(r.stdout.contains('…'), "{}", r.stdout.len());
        assert!(r.stdout.len() < 1000, "{} bytes", r.stdout.len());
    }
}

#[test]
fn flamegraphs_of_hostile_recordings_are_small_valid_and_checked() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    // A 64 KiB name used as 1,000 frames: once a 65 MB SVG.
    let rec = hostile::long_name_stack(65_536, 1000);
    assert!(rec.bytes().len() < 1000, "{}", rec.bytes().len());
    let path = write(dir.path(), "long.dsrec", &rec);
    let svg = dir.path().join("long.svg");
    let r = measured(&[
        "flamegraph",
        "--input",
        &path,
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let size = std::fs::metadata(&svg).expect("svg").len();
    eprintln!(
        "SVG of the long-name recording: {size} bytes, {:.1} MB peak",
        r.max_rss_mb
    );
    assert!(size < 1 << 20, "{size} bytes");

    // Control characters in host and kernel, U+FFFE in a frame: still XML.
    let path = write(dir.path(), "xml.dsrec", &hostile::invalid_xml_names());
    let svg = dir.path().join("xml.svg");
    let r = measured(&[
        "flamegraph",
        "--input",
        &path,
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&svg).expect("svg");
    assert!(text.chars().all(|c| matches!(c as u32,
        0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)));
    let mut reader = quick_xml::Reader::from_str(&text);
    while reader.read_event().expect("well-formed XML") != quick_xml::events::Event::Eof {}

    // Weights adding up past 2^64: refused, not wrapped.
    let path = write(dir.path(), "huge.dsrec", &hostile::huge_weights());
    let svg = dir.path().join("huge.svg");
    let r = measured(&[
        "flamegraph",
        "--input",
        &path,
        "-o",
        svg.to_str().expect("utf-8"),
    ]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("2^63"), "{}", r.stderr);
    assert!(!svg.exists());
}

#[test]
fn outputs_never_follow_symlinks_nor_write_into_others_files() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = write(dir.path(), "in.dsrec", &hostile::deep_stack(3));
    let victim = dir.path().join("victim");
    let link = dir.path().join("y.svg");
    symlink(&victim, &link).expect("symlink");
    let flame = |out: &Path, force: bool| {
        let mut args = vec![
            "flamegraph",
            "--input",
            &rec,
            "-o",
            out.to_str().expect("utf-8"),
        ];
        if force {
            args.push("--force");
        }
        measured(&args)
    };
    // A dangling symlink: refused, no victim created.
    let r = flame(&link, false);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);
    assert!(!victim.exists(), "written through a symlink");
    // Pointing at a file, forced: the link is replaced, the file untouched.
    std::fs::write(&victim, "precious").expect("victim");
    assert_eq!(flame(&link, true).code, 0);
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    assert!(!std::fs::symlink_metadata(&link).expect("y").is_symlink());

    // Someone else's empty file: not written into; forced, replaced by our own 0600 file.
    let theirs = dir.path().join("theirs.svg");
    std::fs::write(&theirs, "").expect("touch");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    assert_ne!(flame(&theirs, false).code, 0);
    assert_eq!(std::fs::metadata(&theirs).expect("theirs").len(), 0);
    assert_eq!(flame(&theirs, true).code, 0);
    let meta = std::fs::metadata(&theirs).expect("ours");
    // Ours: root's, or under sudo the invoking user's (as `cargo xtask test` runs as a user).
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (dropscope_tests::invoking_uid(), 0o600)
    );

    // Under sudo the file belongs to the invoking user.
    let mine = dir.path().join("mine.svg");
    let r = Command::new(dropscope_bin())
        .args([
            "flamegraph",
            "--input",
            &rec,
            "-o",
            mine.to_str().expect("utf-8"),
        ])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .output()
        .expect("run");
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let meta = std::fs::metadata(&mine).expect("mine");
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    // No temporary file left anywhere.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A tmpfs of one page, already full, unmounted when dropped.
struct FullDisk {
    dir: tempfile::TempDir,
}

impl FullDisk {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_str().expect("utf-8");
        run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=4k", "tmpfs", d]));
        let _ = std::fs::write(dir.path().join("filler"), vec![0u8; 4096]);
        Self { dir }
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_disk_leaves_no_partial_flamegraph() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = write(dir.path(), "in.dsrec", &hostile::long_name_stack(200, 100));
    let full = FullDisk::new();
    let out = full.dir.path().join("x.svg");
    let r = measured(&[
        "flamegraph",
        "--input",
        &rec,
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("No space left"), "{}", r.stderr);
    let names: Vec<String> = std::fs::read_dir(full.dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["filler"], "partial output left behind");
}

/// Runs `dropscope record` live; the probe is attached, so this takes the shared lock.
fn record(args: &[&str]) -> std::process::Child {
    Command::new(dropscope_bin())
        .arg("record")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

fn wait_with_timeout(child: &mut std::process::Child, secs: u64) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(s) = child.try_wait().expect("wait") {
            return Some(s.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn record_refuses_planted_names_before_attaching_and_never_blocks_on_a_fifo() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    let victim = dir.path().join("victim");
    let link = dir.path().join("x.dsrec");
    symlink(&victim, &link).expect("symlink");
    let fifo = dir.path().join("fifo.dsrec");
    run(Command::new("mkfifo").arg(&fifo));
    for out in [&link, &fifo] {
        let mut child = record(&["-o", out.to_str().expect("utf-8"), "--duration", "5s"]);
        // A generous bound: refused at once, or (a defect) blocked on the FIFO for good.
        let code = wait_with_timeout(&mut child, 60);
        if code.is_none() {
            let _ = child.kill();
        }
        let mut err = String::new();
        let _ = child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err);
        assert_eq!(code, Some(1), "{}: {err}", out.display());
        assert!(err.contains("already exists"), "{err}");
        assert!(!err.contains("recording drops"), "attached first: {err}");
    }
    assert!(!victim.exists());
}

#[test]
fn record_finishes_on_sighup_and_sigquit_and_leaves_nothing_on_a_full_disk() {
    let _g = root_test();
    let dir = tempfile::tempdir().expect("tempdir");
    for (sig, name) in [(libc::SIGHUP, "hup.dsrec"), (libc::SIGQUIT, "quit.dsrec")] {
        let out = dir.path().join(name);
        let mut child = record(&["-o", out.to_str().expect("utf-8")]);
        let mut err = child.stderr.take().expect("stderr");
        let mut buf = [0u8; 256];
        let mut seen = String::new();
        while !seen.contains("recording drops") {
            let n = err.read(&mut buf).expect("read");
            assert!(n > 0, "dropscope record ended early: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        // Part of what is tested: a recording that has run a while (frames written) is
        // finished by the signal.
        std::thread::sleep(Duration::from_millis(1500));
        // SAFETY: kill(2) on our own child with a valid signal.
        unsafe { libc::kill(child.id() as i32, sig) };
        let code = wait_with_timeout(&mut child, 20);
        assert_eq!(code, Some(0), "signal {sig}");
        let check = measured(&["report", "--input", out.to_str().expect("utf-8")]);
        assert_eq!(check.code, 0, "{}", check.stderr);
        assert!(
            !check.stderr.contains("not finished"),
            "signal {sig} left it unfinished: {}",
            check.stderr
        );
    }
    let full = FullDisk::new();
    let out = full.dir.path().join("x.dsrec");
    let mut child = record(&["-o", out.to_str().expect("utf-8"), "--duration", "2s"]);
    let code = wait_with_timeout(&mut child, 30);
    assert_eq!(code, Some(1));
    assert!(!out.exists(), "a recording left on a full disk");
}
