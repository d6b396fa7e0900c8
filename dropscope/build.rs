//! Builds the eBPF program with the pinned nightly (named in dropscope-ebpf/toolchain.txt).
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
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
