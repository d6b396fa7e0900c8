//! Checks of the `.deb` that `cargo xtask test` runs: lintian reports no errors, the man page
//! renders without warnings, the installed completions load and complete in bash (and are
//! valid zsh and fish where those shells are installed), and the `serve` unit is shipped with
//! the maintainer scripts that enable, start and stop it.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// Runs a command and returns its output, failing with its stderr unless it succeeds.
fn output(cmd: &mut Command) -> anyhow::Result<(String, String)> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    if !out.status.success() {
        bail!("{cmd:?} failed ({}):\n{stdout}{stderr}", out.status);
    }
    Ok((stdout, stderr))
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Every check of what `dist` built: each `.deb` (`check`), and each binary for another
/// machine against the host's own (`same_as_host`).
pub fn check_all(dists: &[crate::dist::Artifacts]) -> anyhow::Result<()> {
    for d in dists {
        check(&d.deb)?;
    }
    if let Some(host) = dists.iter().find(|d| d.arch.is_host()) {
        for other in dists.iter().filter(|d| !d.arch.is_host()) {
            same_as_host(&host.binary, other)?;
        }
    }
    Ok(())
}

/// The binary for another machine, run under qemu's user-mode emulation, says exactly what the
/// host's own says where no kernel is involved: its version, the report and folded stacks of the
/// sample recording, and the reasons in the running kernel's BTF file (when it has one).
pub fn same_as_host(host: &Path, other: &crate::dist::Artifacts) -> anyhow::Result<()> {
    let sample = crate::root().join("assets/sample.dsrec");
    let sample = sample.to_str().context("non-UTF-8 path")?;
    let mut runs = vec![
        vec!["--version"],
        vec!["report", "--format", "json", "--input", sample],
        vec![
            "flamegraph",
            "--format",
            "folded",
            "-o",
            "-",
            "--input",
            sample,
        ],
    ];
    let btf = "/sys/kernel/btf/vmlinux";
    if Path::new(btf).exists() {
        runs.push(vec!["reasons", "--format", "json", "--btf", btf]);
    }
    for args in &runs {
        let (want, _) = output(Command::new(host).args(args))?;
        let (got, _) = output(other.arch.command(&other.binary).args(args))?;
        if got != want {
            bail!(
                "`dropscope {}` on {} says otherwise than on this machine:\n{got}\nversus\n{want}",
                args.join(" "),
                other.arch.name()
            );
        }
    }
    eprintln!(
        "dist: the {} binary (under qemu) matches this machine's on {} runs",
        other.arch.name(),
        runs.len()
    );
    Ok(())
}

/// Every check on `deb`.
pub fn check(deb: &Path) -> anyhow::Result<()> {
    lintian(deb)?;
    let tree = unpack(deb)?;
    man_page(&tree.join("usr/share/man/man1/dropscope.1.gz"))?;
    completions(&tree)?;
    service(deb, &tree)?;
    eprintln!("dist: lintian, man, shell completions and the serve unit: ok");
    Ok(())
}

/// The unit runs the packaged binary with the history in its state directory, and the
/// maintainer scripts enable and start it (where systemd runs), stop it on removal and forget
/// it on purge.
fn service(deb: &Path, tree: &Path) -> anyhow::Result<()> {
    use super::unit::{UNIT, UNIT_PATH};
    let unit = std::fs::read_to_string(tree.join(UNIT_PATH))
        .with_context(|| format!("the .deb has no /{UNIT_PATH}"))?;
    for want in [
        "\nExecStart=/usr/bin/dropscope serve ",
        " --history /var/lib/private/dropscope",
        "\nStateDirectory=dropscope\n",
        "\nStateDirectoryMode=0700\n",
        "\nWantedBy=multi-user.target\n",
    ] {
        if !unit.contains(want) {
            bail!("/{UNIT_PATH} has no {want:?}:\n{unit}");
        }
    }
    let control = crate::target_dir().join("dist/deb-control");
    if control.exists() {
        std::fs::remove_dir_all(&control)?;
    }
    output(Command::new("dpkg-deb").arg("-e").arg(deb).arg(&control))?;
    for (name, wants) in [
        (
            "postinst",
            &[
                format!("deb-systemd-helper enable '{UNIT}'"),
                "if [ -d /run/systemd/system ]; then".to_string(),
                format!("deb-systemd-invoke $_action '{UNIT}'"),
            ][..],
        ),
        ("prerm", &[format!("deb-systemd-invoke stop '{UNIT}'")][..]),
        (
            "postrm",
            &[
                format!("deb-systemd-helper mask '{UNIT}'"),
                format!("deb-systemd-helper purge '{UNIT}'"),
            ][..],
        ),
    ] {
        let path = control.join(name);
        let script = std::fs::read_to_string(&path)
            .with_context(|| format!("the .deb has no {name} script"))?;
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path)?.permissions());
        if mode & 0o777 != 0o755 {
            bail!("{name} has mode {:o}, not 0755", mode & 0o777);
        }
        if let Some(w) = wants.iter().find(|w| !script.contains(w.as_str())) {
            bail!("{name} has no {w:?}:\n{script}");
        }
    }
    Ok(())
}

/// lintian, failing on errors (warnings are printed, not fatal).
fn lintian(deb: &Path) -> anyhow::Result<()> {
    let out = Command::new("lintian")
        .args(["--fail-on", "error", "--no-tag-display-limit"])
        .arg(deb)
        .output()
        .context("running lintian (cargo xtask setup installs it for the tests)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    eprint!("{text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("E: ")).collect();
    if !out.status.success() || !errors.is_empty() {
        bail!(
            "lintian reports errors on {} ({}):\n{}{}",
            deb.display(),
            out.status,
            errors.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The binary of `deb` as the package installs it: its files unpacked under
/// target/dist/deb-run.
pub fn installed_binary(deb: &Path) -> anyhow::Result<PathBuf> {
    let dir = crate::target_dir().join("dist/deb-run");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    output(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir))?;
    Ok(dir.join("usr/bin/dropscope"))
}

/// The package's files, unpacked under target/dist/deb-check.
fn unpack(deb: &Path) -> anyhow::Result<PathBuf> {
    let dir = crate::target_dir().join("dist/deb-check");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    output(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir))?;
    let (listing, _) = output(Command::new("dpkg-deb").arg("-c").arg(deb))?;
    for path in [
        "./usr/bin/dropscope",
        "./usr/share/man/man1/dropscope.1.gz",
        "./usr/share/man/man1/dropscope-report.1.gz",
        "./usr/share/bash-completion/completions/dropscope",
        "./usr/share/zsh/vendor-completions/_dropscope",
        "./usr/share/fish/vendor_completions.d/dropscope.fish",
        "./usr/share/doc/dropscope/copyright",
        "./usr/share/doc/dropscope/changelog.Debian.gz",
        "./usr/share/doc/dropscope/README.md.gz",
    ] {
        if !listing.lines().any(|l| l.ends_with(path)) {
            bail!("the .deb has no {path}:\n{listing}");
        }
    }
    for page in crate::dist::deb::doc_pages(&crate::root())? {
        let path = format!("./usr/share/doc/dropscope/docs/{page}.gz");
        if !listing.lines().any(|l| l.ends_with(&path)) {
            bail!("the .deb has no {path}:\n{listing}");
        }
    }
    Ok(dir)
}

/// `man -l` renders the page, with its sections and no warnings from groff.
fn man_page(page: &Path) -> anyhow::Result<()> {
    let (text, warnings) = output(
        Command::new("man")
            .args(["--warnings", "-l"])
            .arg(page)
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat"),
    )?;
    for want in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "KEYS",
        "EXAMPLES",
        "count-syscalls",
    ] {
        if !text.contains(want) {
            bail!("the rendered man page has no {want}:\n{text}");
        }
    }
    if !warnings.trim().is_empty() {
        bail!("man -l {} warns:\n{warnings}", page.display());
    }
    Ok(())
}

/// bash loads the completion and completes commands and options; zsh and fish parse theirs.
fn completions(tree: &Path) -> anyhow::Result<()> {
    let bash = tree.join("usr/share/bash-completion/completions/dropscope");
    let script = r#"source "$1" && complete -p dropscope
        COMP_WORDS=(dropscope rep); COMP_CWORD=1; COMP_LINE="dropscope rep"; COMP_POINT=13
        _dropscope dropscope rep dropscope; echo "commands: ${COMPREPLY[*]}"
        COMP_WORDS=(dropscope report --dur); COMP_CWORD=2
        _dropscope dropscope --dur report; echo "options: ${COMPREPLY[*]}""#;
    let (out, _) = output(Command::new("bash").args(["-c", script, "bash"]).arg(&bash))?;
    for want in [
        "-F _dropscope dropscope",
        "commands: report",
        "options: --duration",
    ] {
        if !out.contains(want) {
            bail!("bash completion: no {want:?} in:\n{out}");
        }
    }
    if have("zsh") {
        output(
            Command::new("zsh")
                .arg("-n")
                .arg(tree.join("usr/share/zsh/vendor-completions/_dropscope")),
        )?;
    }
    if have("fish") {
        output(
            Command::new("fish")
                .arg("--no-execute")
                .arg(tree.join("usr/share/fish/vendor_completions.d/dropscope.fish")),
        )?;
    }
    Ok(())
}
