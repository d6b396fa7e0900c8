//! Builds the eBPF program with the pinned nightly (named in dropscope-ebpf/toolchain.txt), with
//! the `live` feature only: without it there is nothing to build and no toolchain to need.

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
    use anyhow::{Context as _, anyhow};

    /// Builds dropscope-ebpf into OUT_DIR, where the probe embeds it.
    pub fn build_ebpf() -> anyhow::Result<()> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dropscope-ebpf");
        let pin = root.join("toolchain.txt");
        println!("cargo:rerun-if-changed={}", pin.display());
        let toolchain =
            std::fs::read_to_string(&pin).with_context(|| format!("reading {}", pin.display()))?;
        let toolchain = toolchain.trim();
        let root_dir = root.to_str().ok_or_else(|| anyhow!("non-UTF-8 path"))?;
        let package = aya_build::Package {
            name: "dropscope-ebpf",
            root_dir,
            ..Default::default()
        };
        aya_build::build_ebpf([package], aya_build::Toolchain::Custom(toolchain))
            .context("building the eBPF program (run `cargo xtask setup` to install its toolchain)")
    }
}
