//! Debian kernel packages for vmtest: the newest of a series, downloaded and unpacked once
//! (cached under target/vmtest), with its BTF extracted from the compressed vmlinuz.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail, ensure};

/// An unpacked kernel package.
pub struct Kernel {
    /// e.g. `6.1.0-27-amd64`.
    pub release: String,
    /// The bootable image.
    pub vmlinuz: PathBuf,
    /// Its raw BTF (the `.BTF` section of its vmlinux).
    pub btf: PathBuf,
}

/// The apt package-name pattern of a series (Debian 12's own 6.1, or 6.12 from backports).
fn pattern(series: &str) -> anyhow::Result<&'static str> {
    Ok(match series {
        "6.1" => r"^linux-image-6\.1\.0-[0-9]+-amd64$",
        "6.12" => r"^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64$",
        _ => bail!("unknown kernel `{series}`: vmtest knows 6.1, 6.12 and host"),
    })
}

/// The numbers in a package name, for ordering `6.1.0-9` before `6.1.0-10`.
fn numbers(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// The newest package of a series that apt knows (after `apt-get update` if it knows none).
fn newest_package(series: &str) -> anyhow::Result<String> {
    let pat = pattern(series)?;
    let search = || -> anyhow::Result<Vec<String>> {
        let out = Command::new("apt-cache")
            .args(["search", "--names-only", pat])
            .output()
            .context("running apt-cache")?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect())
    };
    let mut names = search()?;
    if names.is_empty() {
        crate::setup::run(Command::new("apt-get").args(["update", "-qq"]))?;
        names = search()?;
    }
    names
        .into_iter()
        .max_by_key(|n| numbers(n))
        .with_context(|| format!("apt knows no package matching {pat}"))
}

/// Downloads (once), unpacks (once) and extracts the BTF (once) of a series' newest kernel.
pub fn fetch(series: &str, work: &Path) -> anyhow::Result<Kernel> {
    let pkg = newest_package(series)?;
    let debs = work.join("debs");
    fs::create_dir_all(&debs)?;
    let find_deb = || -> anyhow::Result<Option<PathBuf>> {
        Ok(fs::read_dir(&debs)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
            }))
    };
    let deb = match find_deb()? {
        Some(deb) => deb,
        None => {
            crate::step(&format!("downloading {pkg}"));
            crate::setup::run(
                Command::new("apt-get")
                    .args(["download", "-q", &pkg])
                    .current_dir(&debs),
            )?;
            find_deb()?.with_context(|| format!("apt-get download left no {pkg} package"))?
        }
    };
    let dir = work.join("kernels").join(&pkg);
    if !dir.join("boot").exists() {
        let partial = work.join("kernels").join(format!("{pkg}.partial"));
        let _ = fs::remove_dir_all(&partial);
        fs::create_dir_all(&partial)?;
        eprintln!("vmtest: unpacking {}", deb.display());
        crate::setup::run(Command::new("dpkg").arg("-x").arg(&deb).arg(&partial))?;
        fs::rename(&partial, &dir)?;
    }
    let vmlinuz = fs::read_dir(dir.join("boot"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no vmlinuz in {}", dir.display()))?;
    let release = vmlinuz
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .context("vmlinuz name")?
        .to_string();
    let btf = dir.join("btf.raw");
    if !btf.exists() {
        extract_btf(&vmlinuz, &btf)?;
    }
    Ok(Kernel {
        release,
        vmlinuz,
        btf,
    })
}

/// The compressed-payload magics a Debian bzImage may hold, with their decompressor.
const PAYLOADS: [(&[u8], &str); 2] = [
    (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz"),
    (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
];

/// Finds the compressed vmlinux inside a bzImage, decompresses it and copies its `.BTF`
/// section out (what the kernel's scripts/extract-vmlinux does, then objcopy).
pub fn extract_btf(vmlinuz: &Path, out: &Path) -> anyhow::Result<()> {
    let image = fs::read(vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    let tmp = out.with_extension("vmlinux.tmp");
    for (magic, tool) in PAYLOADS {
        let Some(start) = image.windows(magic.len()).position(|w| w == magic) else {
            continue;
        };
        // Trailing bytes after the stream make the tools complain; the ELF is whole anyway.
        let mut child = Command::new(tool)
            .args(["-dc", "-q"])
            .stdin(Stdio::piped())
            .stdout(fs::File::create(&tmp)?)
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("running {tool}"))?;
        {
            use std::io::Write as _;
            let mut stdin = child.stdin.take().context("stdin")?;
            let _ = stdin.write_all(&image[start..]);
        }
        let _ = child.wait()?;
        let elf = fs::read(&tmp)
            .map(|b| b.starts_with(b"\x7fELF"))
            .unwrap_or(false);
        if !elf {
            continue;
        }
        crate::setup::run(
            Command::new("objcopy")
                .args(["-O", "binary", "--only-section=.BTF"])
                .arg(&tmp)
                .arg(out),
        )?;
        let _ = fs::remove_file(&tmp);
        let size = fs::metadata(out)?.len();
        ensure!(
            size > 1024,
            "the .BTF section of {} is empty",
            vmlinuz.display()
        );
        return Ok(());
    }
    let _ = fs::remove_file(&tmp);
    bail!("found no xz or zstd vmlinux inside {}", vmlinuz.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_abi_numbers_sort_after_older_ones() {
        let mut names = [
            "linux-image-6.1.0-9-amd64",
            "linux-image-6.1.0-56-amd64",
            "linux-image-6.1.0-10-amd64",
        ];
        names.sort_by_key(|n| numbers(n));
        assert_eq!(names[2], "linux-image-6.1.0-56-amd64");
        assert!(
            numbers("linux-image-6.12.117+deb12-amd64")
                > numbers("linux-image-6.12.99+deb12-amd64")
        );
    }

    #[test]
    fn only_known_series_have_patterns() {
        assert!(pattern("6.1").is_ok());
        assert!(pattern("5.10").is_err());
    }
}
