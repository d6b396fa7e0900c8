//! Debian kernel packages for vmtest: the newest of a series for a machine (amd64 or arm64),
//! downloaded and unpacked once (cached under target/vmtest, trimmed to what a guest loads), with
//! its BTF extracted from the vmlinuz (inside the compressed vmlinux of an x86 bzImage; in the
//! plain arm64 Image).
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail, ensure};

use crate::dist::Arch;

/// An unpacked kernel package.
pub struct Kernel {
    /// e.g. `6.1.0-27-amd64`.
    pub release: String,
    /// The bootable image.
    pub vmlinuz: PathBuf,
    /// Its modules (`lib/modules/<release>` of the package).
    pub modules: PathBuf,
    /// Its raw BTF (the `.BTF` section of its vmlinux).
    pub btf: PathBuf,
}

/// The apt package-name pattern of a series (Debian 12's own 6.1, or 6.12 from backports) for
/// a machine.
fn pattern(series: &str, arch: Arch) -> anyhow::Result<String> {
    let series = match series {
        "6.1" => r"6\.1\.0-[0-9]+",
        "6.12" => r"6\.12\.[0-9]+\+deb[0-9]+",
        _ => bail!("unknown kernel `{series}`: vmtest knows 6.1, 6.12 and host"),
    };
    Ok(format!("^linux-image-{series}-{}$", arch.deb()))
}

/// The numbers in a package name, for ordering `6.1.0-9` before `6.1.0-10`.
fn numbers(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// The newest package of a series that apt knows (after `apt-get update` if it knows none).
fn newest_package(series: &str, arch: Arch) -> anyhow::Result<String> {
    let pat = pattern(series, arch)?;
    let pat = pat.as_str();
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
pub fn fetch(series: &str, arch: Arch, work: &Path) -> anyhow::Result<Kernel> {
    let pkg = newest_package(series, arch)?;
    let dir = unpacked(&pkg, arch, work, trim_kernel)?;
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
    let modules = dir.join("lib/modules").join(&release);
    Ok(Kernel {
        release,
        vmlinuz,
        modules,
        btf,
    })
}

/// A package of `arch` (apt's `name:arch` when it is not the host's), downloaded into
/// `WORK/debs` and unpacked once into `WORK/unpacked/<name>_<arch>` (the directory returned),
/// with `trim` applied to the unpacked files first; the package file is then removed, since the
/// directory is what later runs use.
pub fn unpacked(
    pkg: &str,
    arch: Arch,
    work: &Path,
    trim: fn(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let name = format!("{pkg}_{}", arch.deb());
    let dir = work.join("unpacked").join(&name);
    if dir.exists() {
        return Ok(dir);
    }
    let debs = work.join("debs");
    fs::create_dir_all(&debs)?;
    let find_deb = || -> anyhow::Result<Option<PathBuf>> {
        Ok(fs::read_dir(&debs)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with(&format!("{pkg}_"))
                        && n.ends_with(&format!("_{}.deb", arch.deb()))
                })
            }))
    };
    let deb = match find_deb()? {
        Some(deb) => deb,
        None => {
            crate::step(&format!("downloading {pkg}"));
            crate::setup::run(
                Command::new("apt-get")
                    .args(["download", "-q"])
                    .arg(if arch.is_host() {
                        pkg.to_string()
                    } else {
                        format!("{pkg}:{}", arch.deb())
                    })
                    .current_dir(&debs),
            )?;
            find_deb()?.with_context(|| format!("apt-get download left no {pkg} package"))?
        }
    };
    // Renamed into place only once whole: a directory that exists is complete.
    let partial = work.join("unpacked").join(format!("{name}.partial"));
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial)?;
    eprintln!("vmtest: unpacking {}", deb.display());
    crate::setup::run(Command::new("dpkg").arg("-x").arg(&deb).arg(&partial))?;
    trim(&partial)?;
    fs::rename(&partial, &dir)?;
    fs::remove_file(&deb).with_context(|| format!("removing {}", deb.display()))?;
    Ok(dir)
}

/// Nothing to trim (a small package, such as busybox).
pub fn keep_all(_: &Path) -> anyhow::Result<()> {
    Ok(())
}

/// What a guest never loads, under a kernel package's `lib/modules/<release>/kernel`: sound,
/// graphics, storage, USB, wireless and wired NIC drivers (the guests' devices are virtio,
/// veth, ifb and other virtual ones). Of `drivers/`, only these stay.
const DRIVERS_KEPT: [&str; 5] = ["net", "virtio", "block", "char", "md"];
const MODULES_DROPPED: [&str; 8] = [
    "sound",
    "drivers/net/wireless",
    "drivers/net/ethernet",
    "drivers/net/can",
    "drivers/net/usb",
    "net/mac80211",
    "net/wireless",
    "net/bluetooth",
];

/// Trims an unpacked kernel package to what vmtest boots: the image, and the modules a guest
/// may load (about a third of a distribution kernel's). Its documentation and device trees
/// (`usr/`) go too: qemu's `virt` machine makes its own device tree.
pub fn trim_kernel(root: &Path) -> anyhow::Result<()> {
    let remove = |path: &Path| -> anyhow::Result<()> {
        match fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing {}", path.display()))
            }
            _ => Ok(()),
        }
    };
    remove(&root.join("usr"))?;
    let Ok(releases) = fs::read_dir(root.join("lib/modules")) else {
        return Ok(());
    };
    for release in releases {
        let tree = release?.path().join("kernel");
        for dropped in MODULES_DROPPED {
            remove(&tree.join(dropped))?;
        }
        let Ok(drivers) = fs::read_dir(tree.join("drivers")) else {
            continue;
        };
        for driver in drivers {
            let driver = driver?;
            let kept = driver
                .file_name()
                .to_str()
                .is_some_and(|n| DRIVERS_KEPT.contains(&n));
            if !kept {
                remove(&driver.path())?;
            }
        }
    }
    Ok(())
}

/// The compressed-payload magics a Debian bzImage may hold, with their decompressor.
const PAYLOADS: [(&[u8], &str); 2] = [
    (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz"),
    (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
];

/// The BTF blob lying whole in an uncompressed kernel image (an arm64 `Image`, loaded as is): a
/// header with BTF's magic, version 1 and a 24-byte header, whose type and string sections lie
/// inside the file, of at least 64 KiB (a kernel's is megabytes). The largest such blob is the
/// kernel's own.
fn btf_in_image(image: &[u8]) -> Option<&[u8]> {
    const MIN: usize = 64 * 1024;
    const HEADER: [u8; 8] = [0x9f, 0xeb, 1, 0, 24, 0, 0, 0];
    let u32_at = |at: usize| -> Option<usize> {
        let b = image.get(at..at + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let mut best: Option<&[u8]> = None;
    let mut from = 0;
    while let Some(i) = image[from..]
        .windows(HEADER.len())
        .position(|w| w == HEADER)
        .map(|p| from + p)
    {
        from = i + 1;
        let (Some(type_off), Some(type_len), Some(str_off), Some(str_len)) = (
            u32_at(i + 8),
            u32_at(i + 12),
            u32_at(i + 16),
            u32_at(i + 20),
        ) else {
            continue;
        };
        let len = 24 + (type_off + type_len).max(str_off + str_len);
        if let Some(blob) = image.get(i..i + len)
            && len >= MIN
            && best.is_none_or(|b| b.len() < len)
        {
            best = Some(blob);
        }
    }
    best
}

/// Copies a kernel image's BTF out: from the plain image (arm64), else from the compressed
/// vmlinux inside a bzImage (x86), decompressed, with objcopy (what the kernel's
/// scripts/extract-vmlinux does, then objcopy).
pub fn extract_btf(vmlinuz: &Path, out: &Path) -> anyhow::Result<()> {
    let image = fs::read(vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    if let Some(btf) = btf_in_image(&image) {
        return fs::write(out, btf).with_context(|| format!("writing {}", out.display()));
    }
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
        assert_eq!(
            pattern("6.1", Arch::Aarch64).ok().as_deref(),
            Some(r"^linux-image-6\.1\.0-[0-9]+-arm64$")
        );
        assert!(pattern("6.12", Arch::X86_64).is_ok_and(|p| p.ends_with("-amd64$")));
        assert!(pattern("5.10", Arch::X86_64).is_err());
    }

    #[test]
    fn trimming_keeps_the_image_and_the_modules_a_guest_loads() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let tree = root.path().join("lib/modules/6.1.0-9-amd64/kernel");
        let files = [
            "boot/vmlinuz-6.1.0-9-amd64",
            "usr/share/doc/linux-image/changelog.gz",
            "lib/modules/6.1.0-9-amd64/modules.dep",
            "lib/modules/6.1.0-9-amd64/kernel/fs/9p/9p.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/drivers/net/veth.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/drivers/net/ethernet/intel/e1000e.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/drivers/virtio/virtio_mmio.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/drivers/gpu/drm/drm.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/sound/core/snd.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/net/sched/sch_tbf.ko.xz",
            "lib/modules/6.1.0-9-amd64/kernel/net/wireless/cfg80211.ko.xz",
        ];
        for f in files {
            let path = root.path().join(f);
            fs::create_dir_all(path.parent().context("parent")?)?;
            fs::write(path, b"x")?;
        }
        trim_kernel(root.path())?;
        let left: Vec<&str> = files
            .into_iter()
            .filter(|f| root.path().join(f).exists())
            .collect();
        assert_eq!(
            left,
            [
                "boot/vmlinuz-6.1.0-9-amd64",
                "lib/modules/6.1.0-9-amd64/modules.dep",
                "lib/modules/6.1.0-9-amd64/kernel/fs/9p/9p.ko.xz",
                "lib/modules/6.1.0-9-amd64/kernel/drivers/net/veth.ko.xz",
                "lib/modules/6.1.0-9-amd64/kernel/drivers/virtio/virtio_mmio.ko.xz",
                "lib/modules/6.1.0-9-amd64/kernel/net/sched/sch_tbf.ko.xz",
            ]
        );
        assert!(!tree.join("drivers/gpu").exists() && !root.path().join("usr").exists());
        // Trimming a package without modules, or twice, is no error.
        trim_kernel(root.path())?;
        trim_kernel(&root.path().join("nothing"))?;
        Ok(())
    }

    #[test]
    fn the_largest_whole_btf_blob_is_found_in_an_image() {
        let blob = |types: u32, strings: u32| {
            let mut b = vec![0x9f, 0xeb, 1, 0, 24, 0, 0, 0];
            for v in [0, types, types, strings] {
                b.extend(v.to_le_bytes());
            }
            b.resize(24 + (types + strings) as usize, 7);
            b
        };
        let mut image = vec![0u8; 100];
        image.extend(blob(60_000, 20_000));
        image.extend([1, 2, 3]);
        let big = blob(90_000, 30_000);
        image.extend(&big);
        // Too small to be a kernel's: a chance match.
        image.extend(blob(16, 8));
        assert_eq!(btf_in_image(&image), Some(&big[..]));
        // A header whose sections run past the end is not a blob.
        let mut cut = blob(90_000, 30_000);
        cut.truncate(100_000);
        assert_eq!(btf_in_image(&cut), None);
    }
}
