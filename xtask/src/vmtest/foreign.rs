//! vmtest's guests of another machine (arm64 kernels on an x86_64 host): this machine's root
//! filesystem cannot serve them, so each boots with qemu-system-aarch64 (`-M virt -cpu max`,
//! emulated) on a small initramfs root (`initramfs`) holding the aarch64 dist binary, the
//! suite runner and the traffic generator built for aarch64, and Debian's arm64 busybox. The
//! host's output directory is shared over 9p: the guest writes its results there, as the amd64
//! guests do.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::bail;

use super::{initramfs, kernels::Kernel};
use crate::dist::Arch;

/// The suite runner and the traffic generator, built for the guest's machine.
pub struct Tools {
    xtask: PathBuf,
    traffic: PathBuf,
}

/// Builds the suite runner (this program) and the traffic generator for `arch` (static musl
/// binaries, like the dist binary).
pub fn tools(arch: Arch) -> anyhow::Result<Tools> {
    crate::step(&format!(
        "the suite runner and the traffic generator for {}",
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
    let stripped = |name: &str| -> anyhow::Result<PathBuf> {
        let to = dir.join(format!("{name}.stripped"));
        crate::setup::run(
            Command::new(arch.strip())
                .arg("--strip-debug")
                .arg("-o")
                .arg(&to)
                .arg(dir.join(name)),
        )?;
        Ok(to)
    };
    Ok(Tools {
        xtask: stripped("xtask")?,
        traffic: stripped("traffic")?,
    })
}

/// One guest to boot.
pub struct Guest<'a> {
    /// Its machine.
    pub arch: Arch,
    /// Its kernel package, unpacked.
    pub kernel: &'a Kernel,
    /// The dist binary for its machine.
    pub dropscope: &'a Path,
    /// The suite runner and traffic generator for its machine.
    pub tools: &'a Tools,
    /// Its CPUs.
    pub cpus: u32,
    /// Seconds of the interleaved flood check (0: skipped).
    pub flood_seconds: u64,
}

/// Boots the guest and runs the suite in it, its results written to `out` (shared over 9p),
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
    let command = format!(
        "/bin/xtask vmtest-guest --dropscope /bin/dropscope --traffic /bin/traffic --out /out \
         --flood-seconds {}",
        guest.flood_seconds
    );
    initramfs::write(
        &initramfs::Root {
            busybox: &busybox,
            programs: &[
                ("dropscope", guest.dropscope),
                ("xtask", &guest.tools.xtask),
                ("traffic", &guest.tools.traffic),
            ],
            modules: &guest.kernel.modules,
            command: &command,
        },
        &initrd,
    )?;
    let log_path = out.join("console.log");
    let log = fs::File::create(&log_path)?;
    let mut cmd = Command::new(qemu);
    cmd.args(["-M", "virt", "-cpu", "max", "-m", "2G", "-smp"])
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
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    crate::vmtest::run_limited(&mut cmd, limit, &log_path)
}
