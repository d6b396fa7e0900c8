//! Helpers for dropscope's integration tests against the real kernel: network namespaces,
//! traffic, and running the dropscope binary. Every test here needs root. The benchmark
//! (`cargo xtask bench`) uses the same namespace guard and traffic generator.
pub mod fixture;
pub mod holder;
pub mod hostile;
pub mod listen;
pub mod netkit;
pub mod rules;
pub mod serve;
pub mod tmux;
pub mod traffic;
pub mod wait;
pub mod xsk;

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

use anyhow::Context as _;

/// Tests count system-wide drops, so they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Panics unless running as root, then takes the lock that serialises kernel tests.
pub fn root_test() -> MutexGuard<'static, ()> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads eBPF programs and creates network namespaces: it needs root \
         (run `cargo xtask test`: it runs the tests as root through sudo)"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The dropscope binary built next to this test (`cargo xtask test` builds it first), or
/// `$DROPSCOPE_BIN`.
pub fn dropscope_bin() -> PathBuf {
    match std::env::var_os("DROPSCOPE_BIN") {
        Some(p) => p.into(),
        None => sibling_bin("dropscope"),
    }
}

/// The traffic generator of this crate (cargo builds it for the integration tests).
pub fn traffic_bin() -> PathBuf {
    sibling_bin("traffic")
}

fn sibling_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no {name} binary near {}: run `cargo build -p dropscope` (cargo xtask test does)",
                exe.display()
            )
        })
}

/// A network namespace with loopback up, removed when dropped.
pub struct Netns {
    /// Its name.
    pub name: String,
}

impl Netns {
    /// Creates `ds-<tag>-<pid>` with loopback up; panics if it cannot.
    pub fn new(tag: &str) -> Self {
        Self::create(&format!("ds-{tag}-{}", std::process::id()))
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Creates `name` with loopback up, replacing a stale one left by a killed run.
    pub fn create(name: &str) -> anyhow::Result<Self> {
        if Path::new("/run/netns").join(name).exists() {
            try_run(Command::new("ip").args(["netns", "del", name]))?;
        }
        try_run(Command::new("ip").args(["netns", "add", name]))
            .context("creating a network namespace (is iproute2 installed?)")?;
        let ns = Self {
            name: name.to_string(),
        };
        try_run(Command::new("ip").args(["-n", name, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    /// The file that `setns` enters.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// Runs a command inside the namespace; panics if it fails.
    pub fn exec(&self, args: &[&str]) -> Output {
        run(Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args))
    }

    /// Runs the traffic generator inside the namespace; returns its stdout.
    pub fn traffic(&self, args: &[&str]) -> String {
        let bin = traffic_bin();
        let mut all = vec![bin.to_str().expect("utf-8 path")];
        all.extend_from_slice(args);
        String::from_utf8_lossy(&self.exec(&all).stdout)
            .trim()
            .to_string()
    }

    /// Runs `bin <args>` inside the namespace with a time limit; returns its stdout, or an
    /// error (the vmtest guest suite reports it rather than panicking).
    pub fn try_traffic(
        &self,
        bin: &Path,
        args: &[&str],
        limit: Duration,
    ) -> anyhow::Result<String> {
        let out = run_timeout(
            Command::new("ip")
                .args(["netns", "exec", &self.name])
                .arg(bin)
                .args(args),
            limit,
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether `ip netns list` still shows this namespace.
    pub fn exists(name: &str) -> bool {
        let out = run(Command::new("ip").args(["netns", "list"]));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(name))
    }
}

/// Who a file dropscope writes belongs to when it runs as these tests do: the user who ran
/// sudo (`SUDO_UID`, inherited), else root.
pub fn invoking_uid() -> u32 {
    std::env::var("SUDO_UID")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Joins `a` and `b` with a veth pair, up, addressed `NET.1/24` in `a` and `NET.2/24` in `b`
/// (`net`: the first three octets, e.g. `10.77.0`), with IPv6 off in both namespaces (its
/// multicast chatter would be drops and packets of its own). Returns the two interface names
/// (the one in `a` is unique on the host while it lives; the one in `b` is `vb`).
pub fn veth_pair(a: &Netns, b: &Netns, net: &str) -> (String, String) {
    let (va, vb) = (
        format!("va{}", std::process::id() % 100_000),
        "vb".to_string(),
    );
    run(Command::new("ip").args([
        "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns", &b.name,
    ]));
    for ns in [a, b] {
        ns.exec(&[
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
    }
    a.exec(&["ip", "addr", "add", &format!("{net}.1/24"), "dev", &va]);
    b.exec(&["ip", "addr", "add", &format!("{net}.2/24"), "dev", &vb]);
    a.exec(&["ip", "link", "set", &va, "up"]);
    b.exec(&["ip", "link", "set", &vb, "up"]);
    (va, vb)
}

/// The sum of a device's driver statistics (`ethtool -S`) whose names end with `suffix`.
pub fn ethtool_sum(ns: &Netns, dev: &str, suffix: &str) -> u64 {
    let out = ns.exec(&["ethtool", "-S", dev]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().split_once(": "))
        .filter(|(k, _)| k.ends_with(suffix))
        .map(|(_, v)| v.trim().parse::<u64>().expect("a number"))
        .sum()
}

/// Adds a clsact qdisc to `dev` in `ns` and attaches the tc program pinned at `pin` to its
/// ingress (`direct-action`).
pub fn tc_ingress(ns: &Netns, dev: &str, pin: &Path) {
    ns.exec(&["tc", "qdisc", "add", "dev", dev, "clsact"]);
    let pin = pin.to_str().expect("a UTF-8 path");
    ns.exec(&[
        "tc",
        "filter",
        "add",
        "dev",
        dev,
        "ingress",
        "bpf",
        "direct-action",
        "object-pinned",
        pin,
    ]);
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = try_run(Command::new("ip").args(["netns", "del", &self.name])) {
            eprintln!("could not remove network namespace {}: {e:#}", self.name);
        }
    }
}

/// Runs a command quietly (stdin closed); fails with its stderr.
fn try_run(cmd: &mut Command) -> anyhow::Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(out)
}

/// Runs a command with a time limit (stdin closed); fails, killing it, on timeout or a non-zero
/// exit, with its output.
pub fn run_timeout(cmd: &mut Command, limit: Duration) -> anyhow::Result<Output> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let out = wait_timeout(child, limit).with_context(|| format!("{cmd:?}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// Waits for a child (its piped output read as it comes), killing it after `limit`.
pub fn wait_timeout(mut child: Child, limit: Duration) -> anyhow::Result<Output> {
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("timed out after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Runs a command and panics with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A running `dropscope` command that has attached its probe and is counting. Dropped without
/// being waited for (a failed assertion), it kills the process: nothing stays attached.
pub struct Counting {
    child: Option<Child>,
    /// The reader of stdout, when it is read as it comes ([`Counting::read_stdout`]); only
    /// joined, so a panic cannot leave it half-changed.
    stdout: std::panic::AssertUnwindSafe<Option<std::thread::JoinHandle<std::io::Result<String>>>>,
    /// Its stderr's lines after the start, as they come.
    stderr: std::panic::AssertUnwindSafe<std::sync::mpsc::Receiver<String>>,
}

impl Drop for Counting {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Counting {
    /// Starts `dropscope <args>` and waits for the line saying it is attached and counting;
    /// panics if it does not come within 60 s.
    pub fn start(args: &[&str]) -> Self {
        Self::try_start(&dropscope_bin(), args, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Starts `bin <args>` and waits up to `limit` for its line saying it is attached and
    /// counting; an error (the process killed) says what it printed instead. Its stderr is
    /// drained from then on, so it never blocks on a full pipe.
    pub fn try_start(bin: &Path, args: &[&str], limit: Duration) -> anyhow::Result<Self> {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stderr = child.stderr.take().context("stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // After the start, the lines wait in the channel (or are dropped with it).
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("counting drops") || line.contains("recording drops") => {
                    return Ok(Self {
                        child: Some(child),
                        stdout: std::panic::AssertUnwindSafe(None),
                        stderr: std::panic::AssertUnwindSafe(rx),
                    });
                }
                Ok(line) => seen.push(line),
                Err(e) => {
                    let _ = child.kill();
                    let status = child.wait().ok();
                    let why = match e {
                        std::sync::mpsc::RecvTimeoutError::Timeout => "did not start counting",
                        std::sync::mpsc::RecvTimeoutError::Disconnected => "exited before counting",
                    };
                    anyhow::bail!(
                        "dropscope {} {why} ({status:?}): {}",
                        args.join(" "),
                        seen.join(" | ")
                    );
                }
            }
        }
    }

    /// Reads stdout as it comes, so that a command printing much (`report --every`) never
    /// blocks on a full pipe; [`Counting::wait_within`] returns what was read.
    pub fn read_stdout(&mut self) {
        if let Some(mut stdout) = self.child.as_mut().and_then(|c| c.stdout.take()) {
            *self.stdout = Some(std::thread::spawn(move || {
                let mut out = String::new();
                std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
            }));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends SIGINT, waits for the process and returns its stdout; asserts it exited cleanly.
    pub fn interrupt(self) -> String {
        // SAFETY: kill(2) with a pid we own and a valid signal.
        unsafe { libc::kill(self.pid() as i32, libc::SIGINT) };
        self.wait()
    }

    /// Sends SIGINT and waits at most `limit`; returns stdout (all of it, also what
    /// [`Counting::read_stdout`] read meanwhile), or an error on a non-zero exit or a timeout
    /// (the process killed).
    pub fn try_interrupt(self, limit: Duration) -> anyhow::Result<String> {
        let (status, out, _) = self.try_interrupt_status(limit)?;
        anyhow::ensure!(status.success(), "dropscope exited with {status}");
        Ok(out)
    }

    /// Sends SIGINT and waits at most `limit`; returns the exit status, stdout (all of it) and
    /// stderr (what it wrote after the start), whatever the status, or an error on a timeout
    /// (the process killed).
    pub fn try_interrupt_status(
        mut self,
        limit: Duration,
    ) -> anyhow::Result<(std::process::ExitStatus, String, String)> {
        // SAFETY: kill(2) with a pid we own and a valid signal.
        unsafe { libc::kill(self.pid() as i32, libc::SIGINT) };
        let child = self.child.take().context("a running dropscope")?;
        let out = wait_timeout(child, limit)?;
        let stdout = match self.stdout.take() {
            Some(reader) => reader
                .join()
                .map_err(|_| anyhow::anyhow!("the stdout reader panicked"))?
                .context("reading dropscope's stdout")?,
            None => String::from_utf8_lossy(&out.stdout).into_owned(),
        };
        // The reader ends with the pipe, so the channel disconnects once all is read.
        let mut stderr = String::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(5)) {
            stderr.push_str(&line);
            stderr.push('\n');
        }
        Ok((out.status, stdout, stderr))
    }

    /// Waits at most `limit` for the process to end by itself and returns its stdout; panics
    /// (killing it) if it is still running then.
    pub fn wait_within(mut self, limit: Duration) -> String {
        self.read_stdout();
        let mut child = self.child.take().expect("a running dropscope");
        let reader = self.stdout.take().expect("stdout");
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for dropscope") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("dropscope was still running {limit:?} later");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "dropscope failed: {status:?}");
        let out = reader.join().expect("stdout reader");
        out.expect("utf-8 output")
    }

    /// Waits for the process to end by itself and returns its stdout.
    pub fn wait(mut self) -> String {
        let child = self.child.take().expect("a running dropscope");
        let out = child.wait_with_output().expect("wait for dropscope");
        assert!(out.status.success(), "dropscope failed: {:?}", out.status);
        String::from_utf8(out.stdout).expect("utf-8 output")
    }
}

/// Runs a dropscope command that prints JSON (e.g. `report --format json --input F`), asserts
/// that it succeeded (showing its stderr if not) and returns what it printed.
pub fn json_output(cmd: &mut Command) -> serde_json::Value {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// Sum of the counts in a JSON report for a reason whose location starts with `location`.
pub fn count(report: &serde_json::Value, reason: &str, location: &str) -> u64 {
    report["drops"]
        .as_array()
        .expect("drops array")
        .iter()
        .filter(|d| {
            d["reason"] == reason
                && d["location"]
                    .as_str()
                    .is_some_and(|l| l.starts_with(location))
        })
        .map(|d| d["count"].as_u64().expect("count"))
        .sum()
}

/// Keeps a copy of `bytes` as `name` for whoever runs the tests to check further, in the
/// directory `DROPSCOPE_TESTS_KEEP` names (vmtest: a recording made in an arm64 guest is
/// replayed on the x86_64 host); nothing where it names none. A file already there is an
/// error, never overwritten, and a link there is not followed.
pub fn keep(name: &str, bytes: &[u8]) {
    use std::io::Write as _;
    let Some(dir) = std::env::var_os("DROPSCOPE_TESTS_KEEP") else {
        return;
    };
    let path = Path::new(&dir).join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| f.write_all(bytes))
        .unwrap_or_else(|e| panic!("keeping {}: {e}", path.display()));
}

/// A command that runs dropscope as the unprivileged user nobody (uid 65534, no capabilities).
pub fn dropscope_as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
    ])
    .arg(dropscope_bin());
    c
}

/// The sum of the keyed counts of a JSON report, and its overflow and total.
pub fn keyed_overflow_total(report: &serde_json::Value) -> (u64, u64, u64) {
    let keyed = report["drops"]
        .as_array()
        .expect("drops array")
        .iter()
        .map(|d| d["count"].as_u64().expect("count"))
        .sum();
    let field = |f: &str| report[f].as_u64().unwrap_or_else(|| panic!("no {f}"));
    (keyed, field("overflow"), field("total"))
}
