//! vmtest's guests of another machine (arm64 kernels on an x86_64 host): this machine's root
//! filesystem cannot serve them, so each boots with qemu-system-aarch64 (`-M virt -cpu max`,
//! emulated) on a small initramfs root (`initramfs`) holding the aarch64 dist binary, the
//! runner of the tests crate's binaries built for aarch64, Debian's arm64 busybox and the
//! network tools the tests' fixtures call (`userland`). The host's output directory is shared
//! over 9p: the guest writes its results there, as the amd64 guests do; the tests crate's
//! binaries and the traffic generator, built for aarch64, come over a second, read-only share
//! (`/tests`).
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, bail};

use super::{initramfs, kernels::Kernel};
use crate::dist::Arch;

/// The runner (this program) and the tests crate's binaries, built for the guest's machine.
pub struct Tools {
    xtask: PathBuf,
    /// The directory shared as /tests: the tests crate's binaries by name, and `traffic`
    /// beside them (where they look for it).
    tests: PathBuf,
    /// The tests crate's binaries as the guest sees them (name, /tests/NAME).
    pub binaries: Vec<(String, PathBuf)>,
}

/// The 9p tag (and the guest's mount point) of the tests crate's binaries.
pub const TESTS_TAG: &str = "tests";

/// Builds the runner (this program), the traffic generator and the tests crate's binaries
/// for `arch` (static musl binaries, like the dist binary), and strips those of vmtest's
/// columns into the directory the guest mounts as /tests, with the traffic generator beside
/// them (where the tests look for it).
pub fn tools(arch: Arch) -> anyhow::Result<Tools> {
    crate::step(&format!(
        "the runner and the traffic generator for {}",
        arch.name()
    ));
    crate::cargo(&[
        "build",
        "--target",
        arch.target(),
        "--package",
        "xtask",
        "--package",
        "dropscope-tests",
        "--bin",
        "xtask",
        "--bin",
        "traffic",
    ])?;
    // Stripped copies: the guest unpacks its whole root into memory, emulated.
    let dir = crate::target_dir().join(arch.target()).join("debug");
    let xtask = dir.join("xtask.stripped");
    strip(arch, &dir.join("xtask"), &xtask)?;
    crate::step(&format!("the tests crate's binaries for {}", arch.name()));
    let built = super::test_binaries::binaries(Some(arch.target()))?;
    let share = dir.join("vmtest-tests");
    if share.exists() {
        fs::remove_dir_all(&share)?;
    }
    fs::create_dir_all(&share)?;
    strip(arch, &dir.join("traffic"), &share.join("traffic"))?;
    let mut binaries = Vec::new();
    for name in super::test_binaries::COLUMNS.iter().map(|c| c.name) {
        let (_, path) = (built.iter().find(|(n, _)| n == name))
            .with_context(|| format!("cargo built no test binary {name}"))?;
        strip(arch, path, &share.join(name))?;
        binaries.push((name.to_string(), Path::new("/").join(TESTS_TAG).join(name)));
    }
    Ok(Tools {
        xtask,
        tests: share,
        binaries,
    })
}

/// Strips a binary built for `arch` into `to`.
fn strip(arch: Arch, from: &Path, to: &Path) -> anyhow::Result<()> {
    crate::setup::run(
        Command::new(arch.strip())
            .arg("--strip-debug")
            .arg("-o")
            .arg(to)
            .arg(from),
    )
}

/// One guest to boot.
pub struct Guest<'a> {
    /// Its machine.
    pub arch: Arch,
    /// Its kernel package, unpacked.
    pub kernel: &'a Kernel,
    /// The dist binary for its machine.
    pub dropscope: &'a Path,
    /// The runner and the tests crate's binaries for its machine.
    pub tools: &'a Tools,
    /// Its CPUs.
    pub cpus: u32,
    /// The command the guest runs (the runner at /bin/xtask, dropscope at /bin/dropscope,
    /// the tests crate's binaries at /tests, the output directory at /out).
    pub command: &'a str,
}

/// The emulated CPU: every feature, and qemu's own algorithm for pointer authentication,
/// which Debian's arm64 kernels use on every call: far cheaper to emulate than the
/// architected QARMA5, and nothing but the signatures' values differs for the guest.
const CPU: &str = "max,pauth-impdef=on";

/// Boots the guest and runs the tests in it, their results written to `out` (shared over 9p),
/// its console to `out/console.log`.
pub fn boot(guest: &Guest<'_>, work: &Path, out: &Path, limit: Duration) -> anyhow::Result<()> {
    let (qemu, console) = match guest.arch {
        Arch::Aarch64 => ("qemu-system-aarch64", "ttyAMA0"),
        Arch::X86_64 => bail!("x86_64 guests boot with virtme-ng on this machine's root"),
    };
    let busybox = crate::vmtest::kernels::unpacked(
        "busybox-static",
        guest.arch,
        work,
        crate::vmtest::kernels::keep_all,
    )?
    .join("bin/busybox");
    let initrd_dir = work.join("initrd");
    fs::create_dir_all(&initrd_dir)?;
    let initrd = initrd_dir.join(format!("{}.cpio", guest.kernel.release));
    let files = super::userland::files(guest.arch, work)?;
    initramfs::write(
        &initramfs::Root {
            busybox: &busybox,
            programs: &[
                ("dropscope", guest.dropscope),
                ("xtask", &guest.tools.xtask),
            ],
            modules: &guest.kernel.modules,
            files: &files,
            shares: &[TESTS_TAG],
            command: guest.command,
        },
        &initrd,
    )?;
    let log_path = out.join("console.log");
    let log = fs::File::create(&log_path)?;
    let mut cmd = Command::new(qemu);
    cmd.args(["-M", "virt", "-cpu", CPU, "-m", "2G", "-smp"])
        .arg(guest.cpus.to_string())
        .args(["-nographic", "-no-reboot", "-kernel"])
        .arg(&guest.kernel.vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        // A panic reboots, and -no-reboot makes that the end of qemu.
        .args(["-append", &format!("console={console} panic=-1")])
        .arg("-fsdev")
        .arg(format!(
            "local,id=out,path={},security_model=none",
            out.display()
        ))
        .arg("-device")
        .arg(format!(
            "virtio-9p-device,fsdev=out,mount_tag={}",
            initramfs::OUT_TAG
        ))
        .stdin(Stdio::null());
    cmd.arg("-fsdev")
        .arg(format!(
            "local,id={TESTS_TAG},path={},security_model=none,readonly=on",
            guest.tools.tests.display()
        ))
        .arg("-device")
        .arg(format!(
            "virtio-9p-device,fsdev={TESTS_TAG},mount_tag={TESTS_TAG}"
        ))
        .stdout(log.try_clone()?)
        .stderr(log);
    crate::vmtest::run_limited(&mut cmd, limit, &log_path)
}
