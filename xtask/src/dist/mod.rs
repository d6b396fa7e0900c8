//! `cargo xtask dist`: one static release binary (musl, eBPF object embedded) per machine
//! (x86_64, and aarch64 cross-built) and a `.deb` of each (`deb`).
pub mod check;
mod deb;
pub mod unit;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// A machine dropscope is released for.
///
/// The eBPF object is the same bytecode for every machine, but it is compiled once per target:
/// aya-build passes the target's `bpf_target_arch` (register layouts differ) to the eBPF crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// 64-bit x86 (Debian's amd64).
    #[value(name = "x86_64", alias = "amd64")]
    X86_64,
    /// 64-bit Arm (Debian's arm64), cross-built from x86_64.
    #[value(name = "aarch64", alias = "arm64")]
    Aarch64,
}

impl Arch {
    /// Every machine `dist` builds for.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The Rust target of the static binary.
    pub fn target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The machine's name as `uname -m` and Rust say it (the binary's suffix).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Debian's name of the architecture (the `.deb`'s, and its kernel packages').
    pub fn deb(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// What `readelf --file-header` says of this machine's binaries (`Machine:`).
    fn elf_machine(self) -> &'static str {
        match self {
            Arch::X86_64 => "X86-64",
            Arch::Aarch64 => "AArch64",
        }
    }

    /// Whether binaries for this machine run here natively.
    pub fn is_host(self) -> bool {
        std::env::consts::ARCH == self.name()
    }

    /// A command that runs `binary` (built for this machine): directly on the host's own
    /// machine, else under qemu's user-mode emulation (`qemu-aarch64-static`, from Debian's
    /// qemu-user-static, which the set-up installs).
    pub fn command(self, binary: &Path) -> Command {
        if self.is_host() {
            Command::new(binary)
        } else {
            let mut c = Command::new(format!("qemu-{}-static", self.name()));
            c.arg(binary);
            c
        }
    }

    /// `strip` for this machine's binaries (the host's binutils know only the host's).
    pub fn strip(self) -> String {
        if self.is_host() {
            "strip".into()
        } else {
            format!("{}-linux-gnu-strip", self.name())
        }
    }
}

/// What `dist` produced for one machine.
pub struct Artifacts {
    /// The machine.
    pub arch: Arch,
    /// The static binary.
    pub binary: PathBuf,
    /// The Debian package holding it.
    pub deb: PathBuf,
}

/// The package version, from the workspace manifest (via the dropscope crate's).
fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Builds the static binary and the `.deb` of each machine into `target/dist/`.
pub fn build(arches: &[Arch]) -> anyhow::Result<Vec<Artifacts>> {
    super::setup::all(false)?;
    super::setup::dist_targets(arches)?;
    let mut out = Vec::new();
    for &arch in arches {
        out.push(build_one(arch)?);
    }
    Ok(out)
}

/// Builds the static binary and the `.deb` of one machine.
fn build_one(arch: Arch) -> anyhow::Result<Artifacts> {
    let target = arch.target();
    super::step(&format!("static release build ({target})"));
    super::cargo(&[
        "build",
        "--release",
        "--package",
        "dropscope",
        "--target",
        target,
    ])?;
    let built = super::target_dir().join(format!("{target}/release/dropscope"));
    check_static(&built, arch)?;
    let dist = super::target_dir().join("dist");
    fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let binary = dist.join(format!("dropscope-{}-{}-linux", version(), arch.name()));
    fs::copy(&built, &binary).with_context(|| format!("copying to {}", binary.display()))?;
    let deb = dist.join(format!(
        "dropscope_{}_{}.deb",
        deb::deb_version(&version()),
        arch.deb()
    ));
    deb::build(&super::root(), arch, &binary, &version(), &deb)?;
    eprintln!("dist: {}\ndist: {}", binary.display(), deb.display());
    Ok(Artifacts { arch, binary, deb })
}

/// Fails unless the ELF file is for `arch`, has no program interpreter and needs no shared
/// library.
fn check_static(bin: &Path, arch: Arch) -> anyhow::Result<()> {
    let out = Command::new("readelf")
        .args(["--file-header", "--program-headers", "--dynamic", "--wide"])
        .arg(bin)
        .output()
        .context("running readelf (binutils)")?;
    if !out.status.success() {
        bail!("readelf failed on {}", bin.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let machine = text
        .lines()
        .find(|l| l.trim_start().starts_with("Machine:"));
    if !machine.is_some_and(|l| l.contains(arch.elf_machine())) {
        bail!(
            "{} is not an {} binary: {}",
            bin.display(),
            arch.name(),
            machine.unwrap_or("no Machine line").trim()
        );
    }
    if let Some(line) = text
        .lines()
        .find(|l| l.contains("INTERP") || l.contains("(NEEDED)"))
    {
        bail!("{} is not static: {}", bin.display(), line.trim());
    }
    Ok(())
}
