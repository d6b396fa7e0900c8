//! Builds the eBPF program with the pinned nightly (named in dropscope-ebpf/toolchain.txt), with
//! the `live` feature only: without it there is nothing to build and no toolchain to need.
//!
//! With `live` but without the eBPF toolchain (the pinned nightly and bpf-linker), as for a
//! plain `cargo test` on a machine never set up, the program is left empty with a warning and
//! the probe refuses to load, saying why; `DROPSCOPE_REQUIRE_EBPF=1` (set by `cargo xtask`)
//! makes the missing toolchain an error instead, and `DROPSCOPE_EBPF_PRUNE=1` (also set by
//! `cargo xtask`) removes the eBPF build's intermediate files once the object is built.

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_LIVE");
    #[cfg(feature = "live")]
    if std::env::var_os("CARGO_FEATURE_LIVE").is_some() {
        return live::build_ebpf();
    }
    Ok(())
}

#[cfg(feature = "live")]
mod live {
    use std::{
        path::{Path, PathBuf},
        process::Command,
    };

    use anyhow::{Context as _, anyhow, bail};

    /// Builds dropscope-ebpf into OUT_DIR, where the probe embeds it.
    pub fn build_ebpf() -> anyhow::Result<()> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dropscope-ebpf");
        let pin = root.join("toolchain.txt");
        println!("cargo:rerun-if-changed={}", pin.display());
        let toolchain =
            std::fs::read_to_string(&pin).with_context(|| format!("reading {}", pin.display()))?;
        let toolchain = toolchain.trim();
        if let Some(missing) = missing_tool(toolchain) {
            // Checked again on every build until the toolchain is there (a path that never
            // exists is always stale).
            println!("cargo:rerun-if-env-changed=DROPSCOPE_REQUIRE_EBPF");
            println!(
                "cargo:rerun-if-changed={}/.no-ebpf-toolchain",
                root.display()
            );
            let required = std::env::var_os("DROPSCOPE_REQUIRE_EBPF").is_some_and(|v| v == "1");
            if required {
                bail!("building the eBPF program needs {missing}: run `cargo xtask setup`");
            }
            println!(
                "cargo:warning=no eBPF toolchain ({missing}): this dropscope cannot count live \
                 (run `cargo xtask setup` and rebuild, or build with --no-default-features)"
            );
            let out = PathBuf::from(std::env::var_os("OUT_DIR").context("no OUT_DIR")?);
            std::fs::write(out.join("dropscope"), b"").context("writing an empty eBPF object")?;
            return Ok(());
        }
        let root_dir = root.to_str().ok_or_else(|| anyhow!("non-UTF-8 path"))?;
        // The bench build's program can take steps out of its per-drop path (BENCH_SKIP).
        let bench = std::env::var_os("CARGO_FEATURE_BENCH").is_some();
        let package = aya_build::Package {
            name: "dropscope-ebpf",
            root_dir,
            features: if bench { &["bench"] } else { &[] },
            ..Default::default()
        };
        aya_build::build_ebpf([package], aya_build::Toolchain::Custom(toolchain)).context(
            "building the eBPF program (run `cargo xtask setup` to install its toolchain)",
        )?;
        prune_build_dir()
    }

    /// With `DROPSCOPE_EBPF_PRUNE=1` (set by `cargo xtask`), removes the eBPF build's own target
    /// directory once the object is in OUT_DIR: about 170 MB per build configuration (a `core`
    /// built for BPF, its build tools), which a one-shot build (CI, a package) never reads again.
    /// A later change to the eBPF sources then rebuilds it whole (about 30 s).
    fn prune_build_dir() -> anyhow::Result<()> {
        if std::env::var_os("DROPSCOPE_EBPF_PRUNE").is_none_or(|v| v != "1") {
            return Ok(());
        }
        let out = PathBuf::from(std::env::var_os("OUT_DIR").context("no OUT_DIR")?);
        let dir = out.join("aya-build");
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", dir.display()))
            }
            _ => Ok(()),
        }
    }

    /// What the eBPF build lacks, if anything: the pinned nightly (through rustup) or
    /// bpf-linker on PATH.
    fn missing_tool(toolchain: &str) -> Option<String> {
        let nightly = Command::new("rustup")
            .args(["run", toolchain, "rustc", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !nightly {
            return Some(format!("the {toolchain} toolchain"));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let linker = std::env::split_paths(&path).any(|d| d.join("bpf-linker").is_file());
        (!linker).then(|| "bpf-linker".to_string())
    }
}
