//! Idempotent set-up: installs only what is missing, saying what it does.
use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

const LLVM: &str = "22";
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Whether we run as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The invoking user's home (where ~/.cargo is).
pub fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
}

/// PATH with ~/.cargo/bin (where bpf-linker goes) first.
pub fn path_with_cargo_bin() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", home().join(".cargo/bin").display())
}

/// The nightly the eBPF crate is built with (one pin, read by build.rs too).
fn ebpf_toolchain() -> anyhow::Result<String> {
    let pin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dropscope-ebpf/toolchain.txt");
    Ok(std::fs::read_to_string(&pin)
        .with_context(|| format!("reading {}", pin.display()))?
        .trim()
        .to_string())
}

/// Runs a command; fails unless it succeeds.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

pub(crate) fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Installs system packages; from a user, through sudo (only apt runs as root).
pub(crate) fn apt_install(pkgs: &[&str]) -> anyhow::Result<()> {
    eprintln!("setup: installing {} (apt)", pkgs.join(" "));
    let apt = || {
        if is_root() {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.args(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            c
        }
    };
    run(apt().args(["update", "-qq"]))?;
    run(apt()
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(pkgs)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// The ordinary user the root tests are run through when `cargo xtask test` runs as root (CI):
/// it exists, without a password, and may run anything as root with its environment through
/// sudo, as a developer with sudo rights does.
pub const TEST_USER: &str = "dropscope-test";

/// Creates [`TEST_USER`] and its sudo rule where missing (root only; idempotent).
pub fn test_user() -> anyhow::Result<()> {
    let exists = Command::new("id")
        .arg(TEST_USER)
        .output()
        .is_ok_and(|o| o.status.success());
    if !exists {
        eprintln!("setup: creating the user {TEST_USER} (the tests run through its sudo)");
        run(Command::new("useradd")
            .args([
                "--system",
                "--shell",
                "/usr/sbin/nologin",
                "--no-create-home",
            ])
            .arg(TEST_USER))?;
    }
    let rule = PathBuf::from("/etc/sudoers.d").join(TEST_USER);
    let text = format!("{TEST_USER} ALL=(ALL) NOPASSWD:SETENV: ALL\n");
    if std::fs::read_to_string(&rule).ok().as_deref() != Some(&text) {
        std::fs::create_dir_all("/etc/sudoers.d")?;
        let tmp = rule.with_extension("new");
        std::fs::write(&tmp, &text)?;
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o440))?;
        run(Command::new("visudo").args(["-cf"]).arg(&tmp))?;
        std::fs::rename(&tmp, &rule)?;
    }
    Ok(())
}

/// Everything the build needs; with `for_tests`, also what the integration tests use.
pub fn all(for_tests: bool) -> anyhow::Result<()> {
    let toolchain = ebpf_toolchain()?;
    let installed = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("rustup is needed (https://rustup.rs)")?;
    if !String::from_utf8_lossy(&installed.stdout).contains(&toolchain) {
        eprintln!("setup: installing the eBPF toolchain {toolchain} with rust-src and clippy");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            &toolchain,
            "--profile",
            "minimal",
            "--component",
            "rust-src",
        ]))?;
    }
    let components = Command::new("rustup")
        .args([
            "component",
            "list",
            "--installed",
            "--toolchain",
            &toolchain,
        ])
        .output()
        .context("listing the eBPF toolchain's components")?;
    let components = String::from_utf8_lossy(&components.stdout).into_owned();
    for component in ["rust-src", "clippy"] {
        if !components.lines().any(|l| l.starts_with(component)) {
            eprintln!("setup: adding {component} to {toolchain}");
            run(Command::new("rustup").args([
                "component",
                "add",
                component,
                "--toolchain",
                &toolchain,
            ]))?;
        }
    }
    let linker = home().join(".cargo/bin/bpf-linker");
    if !linker.exists() && !have("bpf-linker") {
        let llvm_dir = PathBuf::from(format!("/usr/lib/llvm-{LLVM}"));
        // The unversioned libLLVM.so link comes only with the -dev package.
        if !llvm_dir.join("lib/libLLVM.so").exists() {
            apt_install(&[&format!("llvm-{LLVM}-dev")])?;
        }
        eprintln!(
            "setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM {LLVM} (about a minute)"
        );
        run(Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
                "--no-default-features",
                "--features",
                &format!("llvm-{LLVM}"),
            ])
            .env(
                "PATH",
                format!("{}/bin:{}", llvm_dir.display(), path_with_cargo_bin()),
            ))?;
    }
    if for_tests {
        let mut missing = Vec::new();
        for (cmd, pkg) in [
            ("nft", "nftables"),
            // Who dropped it: an iptables rule (Debian's nft backend) named by its comment.
            ("iptables", "iptables"),
            ("tmux", "tmux"),
            ("ip", "iproute2"),
            // Driver statistics, as the ledger's tests compare them (`ethtool -S`).
            ("ethtool", "ethtool"),
            ("prometheus", "prometheus"),
            // The alerting rules are checked and unit-tested with promtool (same package).
            ("promtool", "prometheus"),
            ("tshark", "tshark"),
            // The .deb of `dist` is checked by Debian's package checker.
            ("lintian", "lintian"),
            ("man", "man-db"),
            // Run as root, the tests still go through sudo from an ordinary user (see
            // `test_user`), as a newcomer's `cargo xtask test` does.
            ("sudo", "sudo"),
        ] {
            if !have(cmd) && !missing.contains(&pkg) {
                missing.push(pkg);
            }
        }
        if !missing.is_empty() {
            apt_install(&missing)?;
        }
    }
    Ok(())
}

/// Lints the eBPF crate with the pinned nightly for the BPF target, as released and as the bench
/// builds it.
pub fn clippy_ebpf() -> anyhow::Result<()> {
    let toolchain = ebpf_toolchain()?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for features in [&[][..], &["--features", "bench"][..]] {
        run(Command::new("cargo")
            .arg(format!("+{toolchain}"))
            .args([
                "clippy",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--target-dir",
                &crate::target_dir().join("ebpf-clippy").to_string_lossy(),
            ])
            .args(features)
            .args(["--", "-D", "warnings"])
            .current_dir(root.join("dropscope-ebpf"))
            .env("PATH", path_with_cargo_bin()))?;
    }
    Ok(())
}

/// Runs the recording decoder's fuzz target for a bounded time (fuzz/run.sh: cargo-fuzz on the
/// pinned nightly, installed if missing, seeded with the sample recordings). A crash fails.
pub fn fuzz(seconds: u64) -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    run(Command::new("sh")
        .arg(root.join("fuzz/run.sh"))
        .arg(seconds.to_string())
        .current_dir(&root)
        .env("PATH", path_with_cargo_bin()))
}

/// PATH with ~/.cargo/bin and ~/.local/bin (where pip puts `vng` for a user) first.
pub fn path_with_tools() -> String {
    format!(
        "{}:{}",
        home().join(".local/bin").display(),
        path_with_cargo_bin()
    )
}

/// What `cargo xtask dist` needs for each machine: the standard library of its static (musl)
/// target, and a C compiler for it (ring, the TLS of `serve`, and psm compile C and assembly).
/// x86_64 builds natively with musl-gcc; aarch64 is cross-built from x86_64 with Rust's own
/// linker (rust-lld, with the target's self-contained musl start files) and Debian's cross
/// compiler, and its binary is run under qemu's user-mode emulation to make the package's man
/// pages and completions (.cargo/config.toml names the linker and the compiler).
pub fn dist_targets(arches: &[crate::dist::Arch]) -> anyhow::Result<()> {
    use crate::dist::Arch;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(&root)
        .output()
        .context("rustup is needed (https://rustup.rs)")?;
    let installed = String::from_utf8_lossy(&installed.stdout).into_owned();
    for arch in arches {
        if !installed.lines().any(|l| l.trim() == arch.target()) {
            eprintln!("setup: adding the {} target", arch.target());
            run(Command::new("rustup")
                .args(["target", "add", arch.target()])
                .current_dir(&root))?;
        }
    }
    let mut tools = vec![(have("readelf"), "binutils"), (have("dpkg-deb"), "dpkg")];
    for &arch in arches {
        match arch {
            Arch::X86_64 if arch.is_host() => tools.push((have("musl-gcc"), "musl-tools")),
            Arch::Aarch64 if !arch.is_host() => tools.extend([
                (have("aarch64-linux-gnu-gcc"), "gcc-aarch64-linux-gnu"),
                // The cross compiler's C headers (ring includes <string.h>).
                (
                    PathBuf::from("/usr/aarch64-linux-gnu/include/string.h").exists(),
                    "libc6-dev-arm64-cross",
                ),
                (have("qemu-aarch64-static"), "qemu-user-static"),
            ]),
            Arch::Aarch64 => tools.push((have("gcc"), "gcc")),
            Arch::X86_64 => bail!(
                "dist cross-builds from x86_64 only: build the {} binary on an x86_64 machine",
                arch.name()
            ),
        }
    }
    let mut missing: Vec<&str> = Vec::new();
    for (present, pkg) in tools {
        if !present && !missing.contains(&pkg) {
            missing.push(pkg);
        }
    }
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    Ok(())
}

/// What the bench needs beyond the tests' set-up: bpftool (the translated listing of a loaded
/// program), objdump (its JIT-ed code: Debian's bpftool is built without libbfd and cannot) and
/// bpftrace (the peer measured side by side).
pub fn bench_tools() -> anyhow::Result<()> {
    let mut missing = Vec::new();
    // Debian puts bpftool in /usr/sbin, which a user's PATH may lack.
    if !have("bpftool") && !PathBuf::from("/usr/sbin/bpftool").exists() {
        missing.push("bpftool");
    }
    if !have("objdump") {
        missing.push("binutils");
    }
    // The peer the loss rounds run side by side (its own in-kernel aggregation).
    if !have("bpftrace") {
        missing.push("bpftrace");
    }
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    Ok(())
}

/// What `cargo xtask vmtest` needs: qemu, busybox (virtme-ng's guest init), kmod (depmod),
/// xz/zstd/objcopy (BTF extraction), iproute2, and virtme-ng itself (pip); for arm64 guests,
/// qemu-system-aarch64 and apt knowing Debian's arm64 packages (`dpkg --add-architecture`:
/// the kernels and busybox are downloaded with `apt-get download`, never installed).
pub fn vmtest_tools(arches: &[crate::dist::Arch]) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    if arches.contains(&crate::dist::Arch::Aarch64) {
        if !have("qemu-system-aarch64") {
            missing.push("qemu-system-arm");
        }
        let foreign = Command::new("dpkg")
            .arg("--print-foreign-architectures")
            .output()
            .context("running dpkg")?;
        let native = Command::new("dpkg")
            .arg("--print-architecture")
            .output()
            .context("running dpkg")?;
        let known = String::from_utf8_lossy(&foreign.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&native.stdout).lines())
            .any(|a| a.trim() == "arm64");
        if !known {
            eprintln!("setup: letting apt fetch arm64 packages (dpkg --add-architecture arm64)");
            if is_root() {
                run(Command::new("dpkg").args(["--add-architecture", "arm64"]))?;
            } else {
                run(Command::new("sudo").args(["dpkg", "--add-architecture", "arm64"]))?;
            }
            // apt_install below (or the kernels' search) updates the package lists.
            if missing.is_empty() {
                if is_root() {
                    run(Command::new("apt-get").args(["update", "-qq"]))?;
                } else {
                    run(Command::new("sudo").args(["apt-get", "update", "-qq"]))?;
                }
            }
        }
    }
    for (present, pkg) in [
        (have("qemu-system-x86_64"), "qemu-system-x86"),
        (PathBuf::from("/bin/busybox").exists(), "busybox-static"),
        (have("depmod"), "kmod"),
        (have("xz"), "xz-utils"),
        (have("zstd"), "zstd"),
        (have("objcopy"), "binutils"),
        (have("ip"), "iproute2"),
        (have("apt-get"), "apt"),
    ] {
        if !present {
            missing.push(pkg);
        }
    }
    if !have("pip3") && !have_in_path("vng") {
        missing.push("python3-pip");
    }
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    if !have_in_path("vng") {
        eprintln!("setup: installing virtme-ng (pip)");
        let plain = run(Command::new("pip3").args(["install", "--quiet", "virtme-ng"]));
        if plain.is_err() {
            // Debian's own Python refuses system-wide pip installs unless told.
            run(Command::new("pip3").args([
                "install",
                "--quiet",
                "--break-system-packages",
                "virtme-ng",
            ]))?;
        }
        if !have_in_path("vng") {
            bail!("virtme-ng was installed but `vng` is not on PATH");
        }
    }
    Ok(())
}

fn have_in_path(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .env("PATH", path_with_tools())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
