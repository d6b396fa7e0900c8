//! The `serve` unit the `.deb` ships (assets/dropscope-serve.service, run from /usr/bin) and
//! the maintainer scripts that enable and start it on install where systemd runs, stop it on
//! removal and forget it on purge, as debhelper's `dh_installsystemd` writes them
//! (`deb-systemd-helper`, `deb-systemd-invoke`); on a machine without systemd they do nothing.
use anyhow::bail;

/// The unit's name.
pub const UNIT: &str = "dropscope-serve.service";

/// Where the package installs it (where Debian 12's systemd and lintian look for units).
pub const UNIT_PATH: &str = "lib/systemd/system/dropscope-serve.service";

/// Where the unit in `assets/` runs the binary from (installed by hand).
const ASSET_BINARY: &str = "/usr/local/bin/dropscope";

/// The unit as packaged: the asset, running the package's `/usr/bin/dropscope`.
pub fn packaged(asset: &str) -> anyhow::Result<String> {
    let exec = format!("ExecStart={ASSET_BINARY} serve ");
    if !asset.contains(&exec) || !asset.contains("--history ") {
        bail!("the unit in assets/ has no `{exec}... --history DIR` line");
    }
    Ok(asset.replace(&exec, "ExecStart=/usr/bin/dropscope serve "))
}

/// `postinst`: enable the unit (a new install; an upgrade keeps the admin's choice), and
/// where systemd runs, start it (restart on upgrade).
pub fn postinst() -> String {
    format!(
        r#"#!/bin/sh
set -e
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ]; then
	if command -v deb-systemd-helper >/dev/null 2>&1; then
		deb-systemd-helper unmask '{UNIT}' >/dev/null || true
		# was-enabled is true for a new install: enable it then; otherwise keep the choice.
		if deb-systemd-helper --quiet was-enabled '{UNIT}'; then
			deb-systemd-helper enable '{UNIT}' >/dev/null || true
		else
			deb-systemd-helper update-state '{UNIT}' >/dev/null || true
		fi
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		if [ -n "$2" ]; then
			_action=restart
		else
			_action=start
		fi
		deb-systemd-invoke $_action '{UNIT}' >/dev/null || true
	fi
fi
exit 0
"#
    )
}

/// `prerm`: stop the unit before its binary goes, where systemd runs.
pub fn prerm() -> String {
    format!(
        r#"#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	deb-systemd-invoke stop '{UNIT}' >/dev/null || true
fi
exit 0
"#
    )
}

/// `postrm`: forget the unit (masked on removal, its state purged on purge). The history in
/// /var/lib/private/dropscope is the admin's data: kept, as systemd keeps a StateDirectory.
pub fn postrm() -> String {
    format!(
        r#"#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if command -v deb-systemd-helper >/dev/null 2>&1; then
	if [ "$1" = remove ]; then
		deb-systemd-helper mask '{UNIT}' >/dev/null || true
	fi
	if [ "$1" = purge ]; then
		deb-systemd-helper purge '{UNIT}' >/dev/null || true
		deb-systemd-helper unmask '{UNIT}' >/dev/null || true
	fi
fi
exit 0
"#
    )
}

/// The maintainer scripts, by name.
pub fn scripts() -> [(&'static str, String); 3] {
    [
        ("postinst", postinst()),
        ("prerm", prerm()),
        ("postrm", postrm()),
    ]
}

#[cfg(test)]
mod tests {
    use std::{fs, os::unix::fs::PermissionsExt as _, process::Command};

    use super::*;

    #[test]
    fn the_packaged_unit_runs_the_packaged_binary_with_the_history() {
        let asset = include_str!("../../../assets/dropscope-serve.service");
        let unit = packaged(asset).expect("packaged");
        let exec = unit
            .lines()
            .find(|l| l.starts_with("ExecStart="))
            .expect("ExecStart");
        assert!(
            exec.starts_with("ExecStart=/usr/bin/dropscope serve "),
            "{exec}"
        );
        assert!(
            exec.contains(" --history /var/lib/private/dropscope"),
            "{exec}"
        );
        assert!(unit.contains("\nStateDirectory=dropscope\n"), "{unit}");
        assert!(unit.contains("\nWantedBy=multi-user.target\n"), "{unit}");
        assert!(packaged("[Service]\nExecStart=/bin/true\n").is_err());
    }

    /// What entering every network namespace needs (`cargo xtask systemd` shows it at work):
    /// the capabilities both granted and bounded, the one namespace operation, netlink and
    /// pidfd_getfd; nothing of them lost by an edit of the unit.
    #[test]
    fn the_unit_grants_what_names_counters_and_culprits_need() {
        let unit = include_str!("../../../assets/dropscope-serve.service");
        let value = |key: &str| {
            (unit.lines())
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key}= in the unit"))
        };
        let caps = value("AmbientCapabilities");
        assert_eq!(caps, value("CapabilityBoundingSet"));
        for cap in [
            "CAP_BPF",
            "CAP_PERFMON",
            "CAP_SYSLOG",
            "CAP_SYS_ADMIN",
            "CAP_NET_ADMIN",
            "CAP_SYS_PTRACE",
            "CAP_DAC_READ_SEARCH",
        ] {
            assert!(caps.split_whitespace().any(|c| c == cap), "{cap}: {caps}");
        }
        assert_eq!(value("RestrictNamespaces"), "net");
        assert!(value("RestrictAddressFamilies").contains("AF_NETLINK"));
        assert!(value("SystemCallFilter").contains(" pidfd_getfd"));
    }

    /// The scripts run with `deb-systemd-helper` and `deb-systemd-invoke` replaced by stubs
    /// that log their arguments: enabled on install, masked on removal, purged on purge; on
    /// this machine (no /run/systemd/system: systemd is not PID 1) nothing is started or
    /// stopped.
    #[test]
    fn the_scripts_enable_on_install_and_start_nothing_without_systemd() {
        let tmp = std::env::temp_dir().join(format!("dropscope-unit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).expect("mkdir");
        let log = tmp.join("log");
        for stub in ["deb-systemd-helper", "deb-systemd-invoke", "systemctl"] {
            let p = tmp.join(stub);
            fs::write(
                &p,
                format!("#!/bin/sh\necho \"{stub} $*\" >> '{}'\n", log.display()),
            )
            .expect("stub");
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let run = |script: &str, args: &[&str]| {
            let path = tmp.join("script");
            fs::write(&path, script).expect("script");
            let st = Command::new("/bin/sh")
                .arg(&path)
                .args(args)
                .env("PATH", format!("{}:/usr/bin:/bin", tmp.display()))
                .status()
                .expect("sh");
            assert!(st.success(), "{args:?}");
            let out = fs::read_to_string(&log).unwrap_or_default();
            let _ = fs::remove_file(&log);
            out
        };
        let systemd = std::path::Path::new("/run/systemd/system").is_dir();
        let installed = run(&postinst(), &["configure"]);
        assert!(
            installed.contains(&format!("deb-systemd-helper enable {UNIT}")),
            "{installed}"
        );
        assert_eq!(
            installed.contains("deb-systemd-invoke start"),
            systemd,
            "{installed}"
        );
        let upgraded = run(&postinst(), &["configure", "0.1.0-1"]);
        assert_eq!(
            upgraded.contains("deb-systemd-invoke restart"),
            systemd,
            "{upgraded}"
        );
        let stopped = run(&prerm(), &["remove"]);
        assert_eq!(
            stopped.contains(&format!("deb-systemd-invoke stop {UNIT}")),
            systemd
        );
        assert!(!run(&prerm(), &["upgrade", "0.1.0-2"]).contains("stop"));
        let removed = run(&postrm(), &["remove"]);
        assert!(
            removed.contains(&format!("deb-systemd-helper mask {UNIT}")),
            "{removed}"
        );
        let purged = run(&postrm(), &["purge"]);
        assert!(
            purged.contains(&format!("deb-systemd-helper purge {UNIT}")),
            "{purged}"
        );
        // Without the helpers (no init-system-helpers), every script does nothing and succeeds.
        for (name, script) in scripts() {
            let path = tmp.join("bare");
            fs::write(&path, script).expect("script");
            let st = Command::new("/bin/sh")
                .arg(&path)
                .arg(if name == "postinst" {
                    "configure"
                } else {
                    "remove"
                })
                .env("PATH", "/nonexistent")
                .status()
                .expect("sh");
            assert!(st.success(), "{name} without the helpers");
        }
        let _ = fs::remove_dir_all(&tmp);
    }
}
