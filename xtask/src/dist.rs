//! `cargo xtask dist`: one static release binary (musl, eBPF object embedded) and a `.deb` of it
//! (`dist_deb`).
use std::{
    fs,
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
    let deb = dist.join(format!(
        "dropscope_{}_amd64.deb",
        super::dist_deb::deb_version(&version())
    ));
    super::dist_deb::build(&super::root(), &binary, &version(), &deb)?;
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
