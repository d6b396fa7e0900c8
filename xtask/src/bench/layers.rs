//! The cost of reading the kernel's layer counters (SNMP, devices, qdiscs, softnet) in many
//! namespaces: `dropscope report` (which reads them every second) timed with only the initial
//! namespace, then with N named namespaces of M veth devices each (every one read on every
//! reading), CPU time from the process's threads' schedstat.
use std::{path::Path, process::Command, time::Duration};

use anyhow::Context as _;
use dropscope_tests::{Counting, Netns, run_timeout};

use super::{interrupt, procfs};

/// What one configuration cost.
pub struct Cost {
    /// Named namespaces besides the initial one.
    pub namespaces: usize,
    /// Dummy devices in each.
    pub devices: usize,
    /// CPU time of dropscope per second of the window, in ms.
    pub cpu_ms_per_s: f64,
}

/// Times `report` for `window` with no extra namespace, then with `namespaces` x `devices`.
pub fn measure(
    dropscope: &Path,
    namespaces: usize,
    devices: usize,
    window: Duration,
) -> anyhow::Result<Vec<Cost>> {
    let mut out = vec![time_report(dropscope, 0, 0, window)?];
    eprintln!("bench: layers: creating {namespaces} namespaces of {devices} veth devices");
    let mut made = Vec::with_capacity(namespaces);
    for i in 0..namespaces {
        if interrupt::requested() {
            anyhow::bail!("interrupted");
        }
        let ns = Netns::create(&format!("dslayers-{}-{i}", std::process::id()))?;
        // veth pairs (both ends in the namespace): kernels without the dummy driver have them.
        let batch: String = (0..devices.div_ceil(2))
            .map(|d| {
                format!(
                    "link add v{d}a type veth peer name v{d}b\nlink set v{d}a up\n\
                     link set v{d}b up\n"
                )
            })
            .collect();
        let script = std::env::temp_dir().join(format!("dslayers-{}.batch", std::process::id()));
        std::fs::write(&script, batch).context("writing the ip batch")?;
        let r = run_timeout(
            Command::new("ip")
                .args(["-n", &ns.name, "-batch"])
                .arg(&script),
            Duration::from_secs(30),
        );
        let _ = std::fs::remove_file(&script);
        r.context("adding veth devices")?;
        made.push(ns);
    }
    out.push(time_report(dropscope, namespaces, devices, window)?);
    drop(made);
    Ok(out)
}

/// Runs `dropscope report` for `window` once it counts, and reads its threads' CPU time.
fn time_report(
    dropscope: &Path,
    namespaces: usize,
    devices: usize,
    window: Duration,
) -> anyhow::Result<Cost> {
    eprintln!(
        "bench: layers: report for {} s with {namespaces} extra namespaces",
        window.as_secs()
    );
    let c = Counting::try_start(
        dropscope,
        // A report a second, so a reading a second (`report` reads once per `--every`).
        &["report", "--format", "json", "--no-stacks", "--every", "1"],
        Duration::from_secs(60),
    )?;
    // The first reading (and the symbolizer's start) are not part of the steady cost.
    std::thread::sleep(Duration::from_secs(2));
    let before = procfs::cpu_ns(c.pid())?;
    std::thread::sleep(window);
    let after = procfs::cpu_ns(c.pid())?;
    c.try_interrupt(Duration::from_secs(30))?;
    Ok(Cost {
        namespaces,
        devices,
        cpu_ms_per_s: (after - before) as f64 / 1e6 / window.as_secs_f64(),
    })
}

/// The section of the report.
pub fn render(costs: &[Cost]) -> String {
    let mut s = String::from(
        "Kernel layer counters: CPU of `dropscope report --every 1` (one reading per second), by \
         the namespaces it reads\n",
    );
    s += "namespaces x devices   CPU ms/s   per reading above the initial namespace alone\n";
    let base = costs.first().map_or(0.0, |c| c.cpu_ms_per_s);
    for c in costs {
        let extra = c.cpu_ms_per_s - base;
        s += &format!(
            "{:>10} x {:<8} {:>9.2}   {}\n",
            c.namespaces,
            c.devices,
            c.cpu_ms_per_s,
            if c.namespaces == 0 {
                "-".to_string()
            } else {
                format!(
                    "{extra:.2} ms: {:.2}% of a core at 1 reading/s (`report --every 1`, and the \
                     live view with the c or L panel open), {:.3}% at one per 10 s (the live \
                     view, record, serve, report without --every)",
                    extra / 10.0,
                    extra / 100.0
                )
            }
        );
    }
    s
}
