//! The tools the tests crate's fixtures call, for a guest of another machine (arm64), whose
//! initramfs root has only busybox: Debian's `ip` and `tc` (iproute2), `nft` (nftables),
//! `iptables`/`iptables-save` (iptables' nft backend), `ethtool` and `setpriv` (util-linux's:
//! busybox's has no `--reuid`), with the shared libraries they need and the dynamic loader. The packages are downloaded for the guest's machine and unpacked once
//! (cached beside the kernels); only the programs, the iptables extensions the tests' rules
//! use and the libraries the programs need (found by their `NEEDED` entries) go into the root.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};

use super::kernels;
use crate::dist::Arch;

/// The packages of the programs and of every library they load (closed under `NEEDED`: a
/// library found in none of them is an error naming it).
const PACKAGES: [&str; 21] = [
    "iproute2",
    "nftables",
    "iptables",
    "ethtool",
    "util-linux",
    "libcap-ng0",
    "libc6",
    "libbpf1",
    "libbsd0",
    "libcap2",
    "libelf1",
    "libmd0",
    "libmnl0",
    "zlib1g",
    "libxtables12",
    "libnftables1",
    "libnftnl11",
    "libedit2",
    "libgmp10",
    "libjansson4",
    "libtinfo6",
];

/// The programs (package, path in it, name in the guest's /usr/sbin): iptables' multi-call
/// binary answers to the name it is called by.
const PROGRAMS: [(&str, &str, &str); 7] = [
    ("iproute2", "bin/ip", "ip"),
    ("iproute2", "sbin/tc", "tc"),
    ("nftables", "usr/sbin/nft", "nft"),
    ("iptables", "usr/sbin/xtables-nft-multi", "iptables"),
    ("iptables", "usr/sbin/xtables-nft-multi", "iptables-save"),
    ("ethtool", "sbin/ethtool", "ethtool"),
    ("util-linux", "usr/bin/setpriv", "setpriv"),
];

/// The iptables extensions the tests' rules load (`-p udp --dport`, `-m comment`, `-j DROP`),
/// from the package's `xtables` directory, which stays where iptables looks for them.
const EXTENSIONS: [&str; 3] = ["libxt_udp.so", "libxt_comment.so", "libxt_standard.so"];

/// Files for the guest's root: (path in the root, file on this machine).
pub type Files = Vec<(String, PathBuf)>;

/// Downloads and unpacks (once) the packages for `arch`, and lists the files the guest needs.
pub fn files(arch: Arch, work: &Path) -> anyhow::Result<Files> {
    let multiarch = format!("{}-linux-gnu", arch.name());
    let mut roots = BTreeMap::new();
    for pkg in PACKAGES {
        roots.insert(pkg, kernels::unpacked(pkg, arch, work, kernels::keep_all)?);
    }
    let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut elves = Vec::new();
    for (pkg, path, name) in PROGRAMS {
        let file = roots[pkg].join(path);
        ensure!(file.is_file(), "{pkg} has no {path}");
        files.insert(format!("usr/sbin/{name}"), file.clone());
        elves.push(file);
    }
    let xtables = format!("usr/lib/{multiarch}/xtables");
    for ext in EXTENSIONS {
        let file = roots["iptables"].join(&xtables).join(ext);
        ensure!(file.is_file(), "iptables has no {xtables}/{ext}");
        files.insert(format!("{xtables}/{ext}"), file.clone());
        elves.push(file);
    }
    let dirs: Vec<PathBuf> = (roots.values())
        .flat_map(|r| {
            [
                r.join("lib").join(&multiarch),
                r.join("usr/lib").join(&multiarch),
            ]
        })
        .collect();
    let interpreter = interpreter(&elves[0])?;
    let loader = find(&dirs, &interpreter)?;
    files.insert(interpreter.trim_start_matches('/').to_string(), loader);
    // Every library needed, found by name in the packages' library directories.
    while let Some(elf) = elves.pop() {
        for lib in needed(&elf)? {
            let to = format!("lib/{multiarch}/{lib}");
            if files.contains_key(&to) {
                continue;
            }
            let from = find(&dirs, &lib)?;
            elves.push(from.clone());
            files.insert(to, from);
        }
    }
    Ok(files.into_iter().collect())
}

/// The file named `name` (a library's soname, or the loader's path) in one of `dirs`, its
/// symbolic links followed inside the unpacked package.
fn find(dirs: &[PathBuf], name: &str) -> anyhow::Result<PathBuf> {
    let base = Path::new(name)
        .file_name()
        .context("a library without a name")?;
    for dir in dirs {
        let mut path = dir.join(base);
        for _ in 0..8 {
            match std::fs::read_link(&path) {
                Ok(target) => {
                    let parent = path.parent().context("a link's directory")?;
                    // An absolute link points into the package, not this machine.
                    path = match target.strip_prefix("/") {
                        Ok(rel) => dir.ancestors().nth(depth(dir)).unwrap_or(dir).join(rel),
                        Err(_) => parent.join(target),
                    };
                }
                Err(_) => break,
            }
        }
        if path.is_file() {
            return Ok(path);
        }
    }
    bail!(
        "no package of vmtest's list ({}) has {name}",
        PACKAGES.join(", ")
    )
}

/// How deep a library directory lies in its unpacked package (`lib/<triple>`: 2,
/// `usr/lib/<triple>`: 3), to find the package's root.
fn depth(dir: &Path) -> usize {
    let parts: Vec<_> = dir.components().rev().take(3).collect();
    if parts.get(2).is_some_and(|c| c.as_os_str() == "usr") {
        3
    } else {
        2
    }
}

/// The libraries an ELF file needs (`readelf -d`: its `NEEDED` entries).
fn needed(elf: &Path) -> anyhow::Result<Vec<String>> {
    let text = readelf(&["-d"], elf)?;
    Ok(text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| {
            l.split_once('[')?
                .1
                .split_once(']')
                .map(|(n, _)| n.to_string())
        })
        .collect())
}

/// The dynamic loader an executable names (`readelf -l`: its program interpreter).
fn interpreter(elf: &Path) -> anyhow::Result<String> {
    let text = readelf(&["-l"], elf)?;
    text.lines()
        .find_map(|l| {
            let rest = l.split_once("program interpreter: ")?.1;
            Some(rest.trim_end_matches(']').trim().to_string())
        })
        .with_context(|| format!("{} names no interpreter", elf.display()))
}

fn readelf(args: &[&str], elf: &Path) -> anyhow::Result<String> {
    let out = Command::new("readelf")
        .args(args)
        .arg("-W")
        .arg(elf)
        .output()
        .context("running readelf (binutils)")?;
    ensure!(out.status.success(), "readelf failed on {}", elf.display());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_directory_s_package_root_is_found_by_its_depth() {
        assert_eq!(
            depth(Path::new("/w/unpacked/libc6_arm64/lib/aarch64-linux-gnu")),
            2
        );
        assert_eq!(
            depth(Path::new(
                "/w/unpacked/libc6_arm64/usr/lib/aarch64-linux-gnu"
            )),
            3
        );
    }

    #[test]
    fn a_link_to_a_library_is_followed_inside_the_package() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        let lib = root.path().join("usr/lib/aarch64-linux-gnu");
        std::fs::create_dir_all(&lib)?;
        std::fs::write(lib.join("libmnl.so.0.2.0"), b"elf")?;
        std::os::unix::fs::symlink("libmnl.so.0.2.0", lib.join("libmnl.so.0"))?;
        std::os::unix::fs::symlink(
            "/usr/lib/aarch64-linux-gnu/libmnl.so.0.2.0",
            lib.join("libabs.so.1"),
        )?;
        let dirs = [root.path().join("lib/aarch64-linux-gnu"), lib.clone()];
        assert_eq!(find(&dirs, "libmnl.so.0")?, lib.join("libmnl.so.0.2.0"));
        assert_eq!(find(&dirs, "libabs.so.1")?, lib.join("libmnl.so.0.2.0"));
        assert!(find(&dirs, "libnone.so.1").is_err());
        Ok(())
    }
}
