//! `cargo xtask dist`: one static release binary (musl, eBPF object embedded) and a `.deb` of it.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// The target the static binary is built for.
pub const TARGET: &str = "x86_64-unknown-linux-musl";

/// What `dist` produced.
pub struct Artifacts {
    /// The static binary.
    pub binary: PathBuf,
    /// The Debian package holding it.
    pub deb: PathBuf,
}

/// The package version, from the workspace manifest (via the dropscope crate's).
fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Builds the static binary and the `.deb` into `target/dist/`.
pub fn build() -> anyhow::Result<Artifacts> {
    super::setup::all(false)?;
    super::setup::musl_target()?;
    super::step(&format!("static release build ({TARGET})"));
    super::cargo(&[
        "build",
        "--release",
        "--package",
        "dropscope",
        "--target",
        TARGET,
    ])?;
    let built = super::root().join(format!("target/{TARGET}/release/dropscope"));
    check_static(&built)?;
    let dist = super::root().join("target/dist");
    fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let binary = dist.join(format!("dropscope-{}-x86_64-linux", version()));
    fs::copy(&built, &binary).with_context(|| format!("copying to {}", binary.display()))?;
    let deb = dist.join(format!("dropscope_{}_amd64.deb", version()));
    debian_package(&binary, &deb)?;
    eprintln!("dist: {}\ndist: {}", binary.display(), deb.display());
    Ok(Artifacts { binary, deb })
}

/// Fails unless the ELF file has no program interpreter and needs no shared library.
fn check_static(bin: &Path) -> anyhow::Result<()> {
    let out = Command::new("readelf")
        .args(["--program-headers", "--dynamic", "--wide"])
        .arg(bin)
        .output()
        .context("running readelf (binutils)")?;
    if !out.status.success() {
        bail!("readelf failed on {}", bin.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(line) = text
        .lines()
        .find(|l| l.contains("INTERP") || l.contains("(NEEDED)"))
    {
        bail!("{} is not static: {}", bin.display(), line.trim());
    }
    Ok(())
}

/// Writes a `.deb` that installs the binary as /usr/bin/dropscope (dpkg-deb, no other tool).
fn debian_package(binary: &Path, deb: &Path) -> anyhow::Result<()> {
    let stage = super::root().join("target/dist/deb-root");
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("clearing {}", stage.display()))?;
    }
    let bin_dir = stage.join("usr/bin");
    let doc_dir = stage.join("usr/share/doc/dropscope");
    let control_dir = stage.join("DEBIAN");
    for d in [&bin_dir, &doc_dir, &control_dir] {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let installed = bin_dir.join("dropscope");
    fs::copy(binary, &installed)?;
    fs::set_permissions(&installed, fs::Permissions::from_mode(0o755))?;
    fs::copy(super::root().join("README.md"), doc_dir.join("README.md"))?;
    fs::write(
        doc_dir.join("copyright"),
        "dropscope\nLicense: MIT OR Apache-2.0\n",
    )?;
    let size_kib = fs::metadata(binary)?.len().div_ceil(1024);
    let control = format!(
        "Package: dropscope\n\
         Version: {}\n\
         Architecture: amd64\n\
         Maintainer: dropscope developers\n\
         Installed-Size: {size_kib}\n\
         Section: net\n\
         Priority: optional\n\
         Description: interactive terminal profiler for Linux kernel packet drops\n \
         Counts every packet the kernel drops by drop reason, location and sampled stack\n \
         in eBPF maps; a live terminal UI, reports, flamegraphs and recordings. One static\n \
         binary; needs Linux 5.17 or later with BTF or tracefs, and root to attach.\n",
        version()
    );
    fs::write(control_dir.join("control"), control)?;
    let status = Command::new("dpkg-deb")
        .args(["--root-owner-group", "--build"])
        .arg(&stage)
        .arg(deb)
        .status()
        .context("running dpkg-deb")?;
    if !status.success() {
        bail!("dpkg-deb failed ({status})");
    }
    Ok(())
}
