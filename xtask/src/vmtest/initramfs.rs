//! The root of a guest of another machine (arm64), which cannot use this machine's root
//! filesystem: a small initramfs (a newc cpio archive) holding busybox, the static binaries
//! under test, the modules of the kernel package that the shared directory needs (9p over
//! virtio-mmio) and those the tests' fixtures load, Debian's network tools with their libraries
//! (`userland`), and an init that runs one command and powers off.
use std::{
    collections::{HashMap, HashSet},
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// The modules the guest loads (their dependencies come first, found by modinfo): the host's
/// output directory is shared over 9p on virtio-mmio.
const MODULES: [&str; 3] = ["virtio_mmio", "9pnet_virtio", "9p"];
/// Modules loaded where the kernel package has them (a kernel may build them in, or lack
/// them): AF_XDP's `sock_diag` (a module on 6.12, absent from 6.1), and what the tests'
/// fixtures ask the kernel for: veth pairs, a tbf qdisc, clsact with BPF filters, nftables
/// (and its `reject` of the inet family) and iptables' nft backend with the matches of the
/// tests' rules. `crc32c_generic` comes before them: `libcrc32c`, which nftables needs, asks
/// the crypto API for crc32c as it loads (a soft dependency, which `depends` does not name,
/// and the guest has no modprobe to find it), and fails without it.
const OPTIONAL_MODULES: [&str; 11] = [
    "xsk_diag",
    "veth",
    "sch_tbf",
    "sch_ingress",
    "cls_bpf",
    "crc32c_generic",
    "nf_tables",
    "nft_reject_inet",
    "nft_compat",
    "xt_comment",
    "xt_tcpudp",
];

/// Whether the kernel package's module tree has module `name`.
fn has_module(tree: &Path, name: &str) -> bool {
    let mut files = HashMap::new();
    index(&tree.join("kernel"), &mut files).is_ok() && files.contains_key(name)
}

/// The 9p mount tag of the shared output directory.
pub const OUT_TAG: &str = "out";

/// What goes into the guest.
pub struct Root<'a> {
    /// busybox (static) for the guest's machine.
    pub busybox: &'a Path,
    /// Programs installed as /bin/NAME.
    pub programs: &'a [(&'a str, &'a Path)],
    /// The kernel package's `lib/modules/<release>`.
    pub modules: &'a Path,
    /// Other files: (path in the root, file on this machine), e.g. `userland`'s.
    pub files: &'a [(String, PathBuf)],
    /// Further 9p shares, each mounted read-only at /TAG.
    pub shares: &'a [&'a str],
    /// The command init runs (its output goes to the console).
    pub command: &'a str,
}

/// Writes the initramfs of `root` to `out`.
pub fn write(root: &Root<'_>, out: &Path) -> anyhow::Result<()> {
    let mut cpio = Cpio::default();
    for dir in [
        "bin",
        "dev",
        "lib/modules",
        "out",
        "proc",
        "run",
        "sys",
        "tmp",
        "usr/sbin",
    ] {
        cpio.dir(dir);
    }
    cpio.file("bin/busybox", 0o755, &read(root.busybox)?);
    for (name, path) in root.programs {
        cpio.file(&format!("bin/{name}"), 0o755, &read(path)?);
    }
    for (to, from) in root.files {
        cpio.file(to, 0o755, &read(from)?);
    }
    let mut names = Vec::new();
    let optional: Vec<&str> = OPTIONAL_MODULES
        .into_iter()
        .filter(|m| has_module(root.modules, m))
        .collect();
    let wanted: Vec<&str> = MODULES.into_iter().chain(optional).collect();
    for (name, data) in modules(root.modules, &wanted)? {
        cpio.file(&format!("lib/modules/{name}.ko"), 0o644, &data);
        names.push(name);
    }
    cpio.file(
        "init",
        0o755,
        init(&names, root.shares, root.command).as_bytes(),
    );
    fs::write(out, cpio.finish()).with_context(|| format!("writing {}", out.display()))
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// The guest's /init: mounts, modules, the shared directories, the command, power off.
fn init(modules: &[String], shares: &[&str], command: &str) -> String {
    let insmod: String = modules
        .iter()
        .map(|m| format!("insmod /lib/modules/{m}.ko || echo \"init: insmod {m} failed\"\n"))
        .collect();
    let shares: String = shares
        .iter()
        .map(|t| {
            format!(
                "mkdir -p /{t} && mount -t 9p -o ro,cache=loose,trans=virtio,version=9p2000.L,msize=512000 \
                 {t} /{t} || echo 'init: mounting /{t} failed'\n"
            )
        })
        .collect();
    format!(
        "#!/bin/busybox sh\n\
         # The guest's init: its file systems, the modules of the shared directory, the suite.\n\
         /bin/busybox --install -s /bin\n\
         export PATH=/usr/sbin:/bin\n\
         mkdir -p /var && ln -s /run /var/run\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         mount -t tmpfs tmpfs /tmp\n\
         mount -t tmpfs tmpfs /run\n\
         mount -t tracefs tracefs /sys/kernel/tracing\n\
         mount -t bpf bpf /sys/fs/bpf\n\
         {insmod}\
         mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 {OUT_TAG} /out \
         || echo 'init: mounting the shared directory failed'\n\
         {shares}\
         ip link set lo up\n\
         echo \"init: $(nproc) CPU(s), $(uname -r), up $(cut -d ' ' -f 1 /proc/uptime) s\"\n\
         {command}\n\
         echo \"init: the command exited with $?, up $(cut -d ' ' -f 1 /proc/uptime) s\"\n\
         sync\n\
         poweroff -f\n"
    )
}

/// The wanted modules and their dependencies, dependencies first, as (name, uncompressed
/// contents), from a kernel package's module tree (`.ko`, `.ko.xz` or `.ko.zst` files).
fn modules(tree: &Path, wanted: &[&str]) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut files = HashMap::new();
    index(&tree.join("kernel"), &mut files)?;
    let mut order: Vec<String> = Vec::new();
    for name in wanted {
        visit(name, &files, &mut order, 0)?;
    }
    order
        .into_iter()
        .map(|name| {
            let data = uncompressed(&files[&name])?;
            Ok((name, data))
        })
        .collect()
}

/// A module's name as the kernel knows it: its file name without `.ko[.xz|.zst]`, `-` as `_`.
fn module_name(file: &str) -> Option<String> {
    let stem = [".ko", ".ko.xz", ".ko.zst"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    Some(stem.replace('-', "_"))
}

fn index(dir: &Path, files: &mut HashMap<String, PathBuf>) -> anyhow::Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = e?.path();
        if path.is_dir() {
            index(&path, files)?;
        } else if let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(module_name)
        {
            files.insert(name, path);
        }
    }
    Ok(())
}

/// Adds `name` after its dependencies (modinfo's `depends`, read from the file).
fn visit(
    name: &str,
    files: &HashMap<String, PathBuf>,
    order: &mut Vec<String>,
    depth: usize,
) -> anyhow::Result<()> {
    let name = name.replace('-', "_");
    if order.contains(&name) {
        return Ok(());
    }
    if depth > 16 {
        bail!("module dependencies nest too deep at {name}");
    }
    let file = files
        .get(&name)
        .with_context(|| format!("the kernel package has no module {name}"))?;
    let out = Command::new("modinfo")
        .args(["-F", "depends"])
        .arg(file)
        .output()
        .context("running modinfo (kmod)")?;
    if !out.status.success() {
        bail!("modinfo failed on {}", file.display());
    }
    for dep in String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(',')
        .filter(|d| !d.is_empty())
    {
        visit(dep, files, order, depth + 1)?;
    }
    order.push(name);
    Ok(())
}

/// A module file's contents, decompressed on this machine (busybox's insmod loads plain `.ko`).
fn uncompressed(file: &Path) -> anyhow::Result<Vec<u8>> {
    let tool = match file.extension().and_then(|e| e.to_str()) {
        Some("xz") => "xz",
        Some("zst") => "zstd",
        _ => return read(file),
    };
    let out = Command::new(tool)
        .args(["-dc", "-q"])
        .arg(file)
        .output()
        .with_context(|| format!("running {tool}"))?;
    if !out.status.success() {
        bail!("{tool} failed on {}", file.display());
    }
    Ok(out.stdout)
}

/// A newc ("070701") cpio archive, as the kernel unpacks into its initial root.
#[derive(Default)]
struct Cpio {
    data: Vec<u8>,
    inode: u32,
    dirs: HashSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, nlink: u32, body: &[u8]) {
        self.inode += 1;
        let fields = [
            self.inode,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime: reproducible
            body.len() as u32,
            0, // dev major
            0, // dev minor
            0, // rdev major
            0, // rdev minor
            name.len() as u32 + 1,
            0, // check
        ];
        self.data.extend_from_slice(b"070701");
        for f in fields {
            let _ = write!(self.data, "{f:08X}");
        }
        self.data.extend_from_slice(name.as_bytes());
        self.data.push(0);
        self.pad();
        self.data.extend_from_slice(body);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.data.len().is_multiple_of(4) {
            self.data.push(0);
        }
    }

    fn dir(&mut self, path: &str) {
        let mut at = String::new();
        for part in path.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(part);
            if self.dirs.insert(at.clone()) {
                self.entry(&at, 0o040_755, 2, &[]);
            }
        }
    }

    fn file(&mut self, path: &str, mode: u32, body: &[u8]) {
        if let Some((dir, _)) = path.rsplit_once('/') {
            self.dir(dir);
        }
        self.entry(path, 0o100_000 | mode, 1, body);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, &[]);
        while !self.data.len().is_multiple_of(512) {
            self.data.push(0);
        }
        self.data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_are_the_kernels() {
        assert_eq!(
            module_name("9pnet_virtio.ko.xz").as_deref(),
            Some("9pnet_virtio")
        );
        assert_eq!(
            module_name("virtio-mmio.ko").as_deref(),
            Some("virtio_mmio")
        );
        assert_eq!(module_name("modules.order"), None);
    }

    #[test]
    fn a_cpio_archive_has_newc_headers_aligned_to_four_bytes() {
        let mut c = Cpio::default();
        c.file("bin/sh", 0o755, b"#!x");
        c.file("bin/ls", 0o755, b"");
        let data = c.finish();
        assert!(data.len().is_multiple_of(512));
        // "bin" once (a directory), then the two files and the trailer.
        let headers: Vec<usize> = (0..data.len() - 6)
            .filter(|&i| &data[i..i + 6] == b"070701")
            .collect();
        assert_eq!(headers.len(), 4, "{headers:?}");
        assert!(headers.iter().all(|h| h % 4 == 0));
        let name_at = |h: usize| {
            let end = data[h + 110..].iter().position(|b| *b == 0).unwrap_or(0);
            String::from_utf8_lossy(&data[h + 110..h + 110 + end]).into_owned()
        };
        let names: Vec<String> = headers.iter().map(|h| name_at(*h)).collect();
        assert_eq!(names, ["bin", "bin/sh", "bin/ls", "TRAILER!!!"]);
        // The file size field of bin/sh (the 7th field) says 3.
        let h = headers[1];
        assert_eq!(&data[h + 6 + 6 * 8..h + 6 + 7 * 8], b"00000003");
    }

    #[test]
    fn the_init_loads_modules_in_order_and_powers_off() {
        let text = init(&["netfs".into(), "9p".into()], &["tests"], "run-suite");
        let netfs = text
            .find("insmod /lib/modules/netfs.ko")
            .unwrap_or(usize::MAX);
        let p9 = text.find("insmod /lib/modules/9p.ko").unwrap_or(0);
        assert!(netfs < p9, "{text}");
        assert!(text.contains("\nrun-suite\n") && text.ends_with("poweroff -f\n"));
        let tests = text.find(" tests /tests ").unwrap_or(usize::MAX);
        assert!(tests < text.find("run-suite").unwrap_or(0), "{text}");
    }
}
