//! `cargo xtask systemd`: the `.deb` installed, run and removed under a real systemd (PID 1
//! of a throw-away container, [`container`]), as a new user would: `dpkg -i` (the maintainer
//! scripts enable and start the `serve` unit), known drops in a network namespace made after
//! it started, the history read through `/var/lib/dropscope` by `history`, `report` and `diff`
//! with exact counts and with the namespace's and interface's names, the kernel's counters
//! and who dropped what ([`named`]), its disk use, then `dpkg -r` (the unit stopped) and
//! `dpkg --purge`.
mod container;
mod named;
mod scenario;

use std::{path::PathBuf, time::Instant};

use anyhow::Context as _;

use crate::dist::{Arch, unit::UNIT};

/// Options of `cargo xtask systemd`.
#[derive(clap::Args, Debug, Default)]
pub struct SystemdArgs {
    /// The `.deb` to install (by default this machine's, built by `cargo xtask dist`).
    #[arg(long, value_name = "FILE")]
    pub deb: Option<PathBuf>,
}

/// Runs the check (root): builds the `.deb` unless given, holds the tests' lock (the service's
/// probe counts every drop of the machine), boots the container and runs the scenario there.
pub fn run(args: &SystemdArgs) -> anyhow::Result<()> {
    crate::bench::interrupt::install()?;
    tools()?;
    let deb = match &args.deb {
        Some(deb) => deb.clone(),
        None => {
            let host = Arch::ALL
                .into_iter()
                .find(|a| a.is_host())
                .context("dist builds no package for this machine")?;
            crate::dist::build(&[host])?.remove(0).deb
        }
    };
    let _lock = lock()?;
    // The check's own time, not the wait for another run's tests.
    let started = Instant::now();
    let dir = crate::target_dir().join("systemd-check");
    let (c, boot) = container::Container::boot(&dir)?;
    eprintln!(
        "systemd: the container's systemd finished starting up in {:.1} s",
        boot.as_secs_f64()
    );
    let result = scenario::run(&c, &deb);
    let result = result.map_err(|e| {
        // Read even after Ctrl-C (the container's commands refuse to start then).
        let journal = dropscope_tests::run_timeout(
            &mut c.command(&[
                "journalctl",
                "--no-pager",
                "-o",
                "short-precise",
                "-u",
                UNIT,
            ]),
            std::time::Duration::from_secs(60),
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|j| format!("(journalctl failed: {j:#})"));
        e.context(format!(
            "the packaged service under systemd failed; `journalctl -u dropscope-serve` in \
             the container:\n{}",
            journal.trim_end()
        ))
    });
    drop(c);
    result?;
    eprintln!(
        "systemd: the packaged service under systemd: ok, in {:.1} s (boot {:.1} s)",
        started.elapsed().as_secs_f64(),
        boot.as_secs_f64()
    );
    Ok(())
}

/// What the check uses that a fresh Debian machine may lack: systemd itself (the container's
/// PID 1, systemctl, journalctl; init-system-helpers comes with it), curl (the service's
/// /metrics) and nftables (a rule that drops); util-linux (unshare, nsenter, setpriv),
/// iproute2 (ip, ss) and perl are there.
fn tools() -> anyhow::Result<()> {
    let mut missing = Vec::new();
    if !std::path::Path::new("/lib/systemd/systemd").exists() {
        missing.push("systemd");
    }
    for (cmd, pkg) in [
        ("curl", "curl"),
        ("ip", "iproute2"),
        ("setpriv", "util-linux"),
        ("nft", "nftables"),
    ] {
        if !crate::setup::have(cmd) && !missing.contains(&pkg) {
            missing.push(pkg);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    crate::setup::apt_install(&missing)
}

/// Holds the lock every root test holds while it runs ([`crate::test::TESTS_LOCK_FILE`]): the
/// service's probe counts drops machine-wide, so no test may run meanwhile (nor count this
/// check's drops). Released when the returned file is closed.
fn lock() -> anyhow::Result<std::fs::File> {
    let path = crate::test::TESTS_LOCK_FILE;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {path}"))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!("systemd: waiting for the tests' lock ({path}): a root test is running");
        loop {
            crate::bench::interrupt::check()?;
            // SAFETY: as above.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    Ok(file)
}
