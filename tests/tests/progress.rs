//! Progress of long commands: elapsed time on stderr when it is a terminal, nothing otherwise.
//! Needs root (counts live).
use std::process::Command;

use dropscope_tests::{dropscope_bin, root_test};

#[test]
fn report_shows_elapsed_time_only_on_a_terminal() {
    let _serial = root_test();
    // Not a terminal: the one line saying what is counted, nothing rewritten in place.
    let out = Command::new(dropscope_bin())
        .args(["report", "--duration", "2s", "--format", "json"])
        .output()
        .expect("running dropscope");
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains('\r') && !err.contains("counting 00:"),
        "{err:?}"
    );
    assert_eq!(err.lines().count(), 1, "{err:?}");

    // A terminal (script(1) gives the command a pseudo-terminal): the elapsed time of the
    // planned duration, rewritten in place and cleared at the end.
    let cmd = format!(
        "{} flamegraph --duration 2s --format folded >/dev/null",
        dropscope_bin().display()
    );
    // script(1) runs the command with $SHELL, which sudo may have set to a nologin shell.
    let out = Command::new("script")
        .env("SHELL", "/bin/sh")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("running script (util-linux)");
    assert!(out.status.success(), "{out:?}");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains("\rcounting 00:00 / 00:02, "), "{tty:?}");
    assert!(tty.contains("\rcounting 00:01 / 00:02, "), "{tty:?}");
    let last_progress = tty.rfind("counting 00:").expect("progress");
    let cleared = tty.rfind("\r\x1b[K").expect("the line is cleared");
    assert!(
        cleared > last_progress,
        "cleared after the last update: {tty:?}"
    );
}
