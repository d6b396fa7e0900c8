//! Tests of how the web config and the files it names are opened: no symbolic link for the web
//! config, owner and mode checks on every file and on its directories, and parse errors that
//! say where, never what the file holds.
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use crate::serve::webconfig::WebConfig;

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write");
    chmod(path, mode);
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The error of loading `path`, one line.
fn refusal(path: &Path) -> String {
    let msg = format!("{:#}", WebConfig::load(path).expect_err("refused"));
    assert!(!msg.contains('\n'), "one line: {msg}");
    msg
}

#[test]
fn a_web_config_that_is_a_symbolic_link_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real.yml");
    write(&real, "", 0o600);
    let link = dir.path().join("web.yml");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    WebConfig::load(&real).expect("the file itself is fine");
    let msg = refusal(&link);
    assert!(msg.contains("symbolic link"), "{msg}");
}

#[test]
fn a_parse_error_says_where_but_never_what_the_file_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (text, line) in [
        // /etc/shadow's first line.
        ("root:$6$hunter2salt$hunter2hash:19000:0:99999:7:::\n", 1),
        ("tls_server_config: hunter2\n", 1),
        ("hunter2: x\n", 1),
        ("basic_auth_users:\n  a: [hunter2]\n", 2),
        ("basic_auth_users:\n  a: hunter2\n", 0),
        (
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: hunter2\n",
            0,
        ),
        (
            "tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: hunter2\n",
            0,
        ),
        ("basic_auth_users:\n  a: 'hunter2\n", 3),
    ] {
        let msg = format!("{:#}", WebConfig::parse(text, dir.path()).expect_err(text));
        assert!(!msg.contains("hunter2"), "{text:?}: {msg}");
        assert!(!msg.contains('\n'), "{text:?}: {msg}");
        if line > 0 {
            assert!(
                msg.contains(&format!("line {line} column")),
                "{text:?}: {msg}"
            );
        }
    }
}

/// A directory holding a web config, a certificate, its key and a client CA, all as they
/// should be; the web config's path.
fn tls_setup(dir: &Path) -> PathBuf {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    write(&dir.join("cert.pem"), &ck.cert.pem(), 0o644);
    write(&dir.join("ca.pem"), &ck.cert.pem(), 0o644);
    write(&dir.join("key.pem"), &ck.signing_key.serialize_pem(), 0o600);
    let web = dir.join("web.yml");
    write(
        &web,
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n",
        0o600,
    );
    web
}

#[test]
fn the_files_a_web_config_names_are_checked_like_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let web = tls_setup(dir.path());
    WebConfig::load(&web).expect("as they should be");
    for (file, mode, wanted) in [
        ("ca.pem", 0o646, "client_ca_file"),
        ("cert.pem", 0o664, "cert_file"),
        ("key.pem", 0o620, "key_file"),
        ("key.pem", 0o604, "world-readable"),
    ] {
        let path = dir.path().join(file);
        let before = std::fs::metadata(&path).expect("stat").permissions();
        chmod(&path, mode);
        let msg = refusal(&web);
        assert!(
            msg.contains(wanted) && msg.contains("chmod"),
            "{file} {mode:o}: {msg}"
        );
        std::fs::set_permissions(&path, before).expect("chmod back");
    }
    if is_root() {
        let ca = dir.path().join("ca.pem");
        std::os::unix::fs::chown(&ca, Some(65534), None).expect("chown");
        let msg = refusal(&web);
        assert!(
            msg.contains("owned by uid 65534") && msg.contains("client_ca_file"),
            "{msg}"
        );
        std::os::unix::fs::chown(&ca, Some(0), None).expect("chown back");
    }
    WebConfig::load(&web).expect("as they should be again");
}

#[test]
fn a_directory_others_can_write_on_the_way_is_refused() {
    let top = tempfile::tempdir().expect("tempdir");
    let dir = top.path().join("conf");
    std::fs::create_dir(&dir).expect("mkdir");
    chmod(&dir, 0o755);
    let web = tls_setup(&dir);
    WebConfig::load(&web).expect("as they should be");
    // The web config's own directory, then a directory above it.
    for (d, mode) in [(&dir, 0o775), (&top.path().to_path_buf(), 0o757)] {
        chmod(d, mode);
        let msg = refusal(&web);
        assert!(
            msg.contains(&d.display().to_string()) && msg.contains("chmod go-w"),
            "{}: {msg}",
            d.display()
        );
        chmod(d, 0o755);
    }
    // A file named through a link is checked where the link is and where it points.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    chmod(elsewhere.path(), 0o777);
    std::fs::rename(dir.join("ca.pem"), elsewhere.path().join("ca.pem")).expect("move");
    std::os::unix::fs::symlink(elsewhere.path().join("ca.pem"), dir.join("ca.pem")).expect("ln");
    let msg = refusal(&web);
    assert!(
        msg.contains(&elsewhere.path().display().to_string()),
        "{msg}"
    );
    chmod(elsewhere.path(), 0o755);
    WebConfig::load(&web).expect("a link to a safe place is followed");
}
