//! The collector on a thread of its own, feeding a [`Feed`]: the kernel's counters read beside
//! the maps on their pace, the last snapshot on stop, and the [`Stopper`] that detaches.
use super::{kernel_source::KernelSource, session::session_info, *};

impl Collector {
    /// Asks for a reading of the kernel's counters when their pace says so, and takes in one
    /// that has ended; returns whether it took one in. It never waits for a reading (a
    /// namespace or dump that is slow delays only the next reading; the latest one stands,
    /// with its own time), except for the last snapshot's (`read_at` is `None`), which is of
    /// now and waited for at most [`kcounters::netns::READ_WAIT`].
    pub(super) fn read_kernel_if_due(&mut self) -> bool {
        let Some(k) = &mut self.kernel else {
            return false;
        };
        if let Ok(p) = &mut k.programs {
            p.discover_if_due();
        }
        let last = k.read_at.is_none();
        let wait = if last {
            kcounters::netns::READ_WAIT
        } else {
            Duration::ZERO
        };
        // One asked for before: the last snapshot waits for it, then asks for one of now.
        let mut took = k.counters.take(wait);
        // A new XDP or tc program is looked for at once (where it is attached, so that its
        // verdicts are rows from the next snapshot on), not at the next reading.
        let searching = k.programs.as_ref().is_ok_and(|p| p.searching());
        let due = last || searching || k.read_at.is_none_or(|t| t.elapsed() >= k.pace.get());
        if due && !k.counters.awaiting() {
            let mut wanted = super::kernel_source::drop_netns(&self.last);
            if let Ok(p) = &k.programs {
                wanted.extend(p.homes());
            }
            // Within a program's grace (see `probe::verdicts::ATTACH_GRACE`) every reading
            // looks for where it is attached, at the reading's own pace.
            let every = searching || k.programs.as_ref().is_ok_and(|p| p.seeking());
            if k.counters.ask(&wanted, every) {
                k.searching = searching;
                k.read_at = Some(Instant::now());
            }
            if last {
                took |= k.counters.take(wait);
            }
        }
        if !took {
            return false;
        }
        if let (Ok(p), true) = (&mut k.programs, std::mem::take(&mut k.searching)) {
            p.searched(k.counters.readings_for_all());
        }
        let mut reading = k.counters.reading();
        let counters = &k.counters;
        let hooks = counters.hooks();
        match &mut k.programs {
            Ok(p) => p.add_to(&mut reading, hooks, |ns| counters.programs_read(ns)),
            Err(why) if hooks.values().any(|h| !h.is_empty()) => reading.errors.push(format!(
                "XDP and tc programs' {}: {why}",
                crate::model::programs::UNCOUNTED
            )),
            Err(_) => {}
        }
        k.programs_at = Instant::now();
        reading.names = self.reading_names(&reading);
        let reading = Arc::new(reading);
        if let Some(k) = &mut self.kernel {
            k.reading = Some(reading.clone());
        }
        self.last.kernel = Some(reading);
        true
    }

    /// Between readings, brings the programs' verdict counts of the latest reading up to date,
    /// at most once per `every`: an XDP drop frees no skb, so nothing else would show it before
    /// the next reading. Returns whether a count changed (the reading keeps its time: the
    /// other counters are still those it read).
    pub(super) fn refresh_programs_if_due(&mut self, every: Duration) -> bool {
        let Some(k) = &mut self.kernel else {
            return false;
        };
        let (Ok(p), Some(reading)) = (&mut k.programs, &k.reading) else {
            return false;
        };
        if !p.placed() || k.programs_at.elapsed() < every {
            return false;
        }
        k.programs_at = Instant::now();
        let mut fresh = crate::model::KernelReading::clone(reading);
        if !p.refresh(&mut fresh) {
            return false;
        }
        let fresh = Arc::new(fresh);
        k.reading = Some(fresh.clone());
        self.last.kernel = Some(fresh);
        true
    }

    /// Puts the frames XDP programs dropped (read with their counts) among the snapshot's
    /// samples, as the samples of their verdict's row (keyed as
    /// [`crate::model::programs::counter_key`] keys it), in place of those put there before.
    pub(super) fn program_samples(&mut self) {
        let Some(k) = &self.kernel else {
            return;
        };
        let Ok(p) = &k.programs else {
            return;
        };
        let samples = &mut self.last.samples;
        samples.retain(|s| !crate::model::programs::is_program(&s.key));
        let initial = k.counters.initial_netns();
        samples.extend(p.samples().into_iter().filter_map(|v| {
            let key = crate::model::programs::counter_key(v.netns, &v.counter, initial, None)?;
            Some(crate::model::KeySamples {
                key,
                packets: v.packets,
            })
        }));
    }

    /// Runs a collector on a thread of its own (the symbolizer is not `Send`), feeding a
    /// [`Feed`]. It stops when the [`Stopper`] is used or dropped, sending one last snapshot
    /// read right then, or when the feed's receiver is dropped.
    pub fn spawn(probe: Probe, opts: CollectorOptions) -> std::io::Result<(Feed, Stopper)> {
        let (tx, rx) = mpsc::channel(64);
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let info = session_info(&probe);
        let kernel_pace = opts.kernel_counters.clone();
        // The baseline is read before this returns (before the caller says it counts): traffic
        // right after that line is in the counters' window.
        let mut kernel = kernel_pace.clone().and_then(KernelSource::start);
        // Session time starts before the caller can start timing a --duration: the window it
        // reports is never shorter than the one asked for.
        let started = Instant::now();
        let handle = std::thread::Builder::new().name("collector".into()).spawn(
            move || -> std::io::Result<()> {
                // The symbolizer is not `Send`: it is created here, on the collector's thread.
                let base = opts.interval;
                let c = &mut Collector::new(probe, opts);
                c.started = started;
                c.last_read = (started, 0);
                c.kernel = kernel.take();
                c.last.kernel = c.kernel.as_ref().and_then(|k| k.reading.clone());
                let mut sent = Instant::now();
                let mut first = true;
                loop {
                    let (s, changed) = c.poll()?;
                    // Idle checks cost no syscall and send nothing; a snapshot goes out when
                    // counts changed, and once per base interval for the clock.
                    if changed || first || sent.elapsed() >= base {
                        if tx.blocking_send(s).is_err() {
                            return Ok(());
                        }
                        sent = Instant::now();
                        first = false;
                    }
                    match stop_rx.recv_timeout(c.interval) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
                // The last snapshot is what a report prints and a recording ends with: a read
                // asks for the names of every key, and the lookups get a moment (never more)
                // to answer before the read that is sent.
                c.snapshot_now()?;
                c.names.wait_idle(FINAL_NAMES_WAIT);
                let _ = tx.blocking_send(c.snapshot_now()?);
                Ok(())
            },
        )?;
        let feed = Feed {
            info,
            snapshots: rx,
            replay: None,
            kernel_pace,
        };
        Ok((feed, Stopper::new(stop_tx, handle)))
    }
}

/// How long the last snapshot waits for names still being looked up.
pub(super) const FINAL_NAMES_WAIT: Duration = Duration::from_secs(1);
