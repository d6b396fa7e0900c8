//! vmtest's guests side by side: each guest asks for the host CPUs it keeps busy, and as many
//! run at once as the host's CPUs hold, the long ones started first; their rows come back in
//! the table's order.
use std::{
    sync::{Condvar, Mutex, PoisonError},
    thread,
};

use super::table::Row;

/// One row's work: a guest booted and tested, or the host's own checks.
pub struct Job<'a> {
    /// What the row is, for the table when the job panics.
    pub label: String,
    /// Whether it is one of the longest (started before the others).
    pub long: bool,
    /// The host CPUs it keeps busy.
    pub cpus: usize,
    /// Boots, tests and reads the results.
    pub run: Box<dyn FnOnce() -> Row + Send + 'a>,
}

/// The host CPUs left free, and a wake-up for jobs that wait for some.
struct Cpus {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Cpus {
    /// Waits until `n` CPUs are free and takes them.
    fn take(&self, n: usize) {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let mut free =
            (self.freed.wait_while(free, |f| *f < n)).unwrap_or_else(PoisonError::into_inner);
        *free -= n;
    }

    fn give_back(&self, n: usize) {
        *self.free.lock().unwrap_or_else(PoisonError::into_inner) += n;
        self.freed.notify_all();
    }
}

/// Gives a job's CPUs back however it ends (a panic included).
struct Held<'a> {
    cpus: &'a Cpus,
    n: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.cpus.give_back(self.n);
    }
}

/// Runs the jobs, the long ones first and otherwise in order, each once `cpus` has room for
/// it (a job asking for more than all of them runs alone), and returns their rows in the
/// jobs' order; a job that panicked is a failed row.
pub fn run(jobs: Vec<Job<'_>>, cpus: usize) -> Vec<Row> {
    let cpus = cpus.max(1);
    let pool = Cpus {
        free: Mutex::new(cpus),
        freed: Condvar::new(),
    };
    let mut jobs: Vec<(usize, Job<'_>)> = jobs.into_iter().enumerate().collect();
    // Stable: the long ones first, each group in the table's order.
    jobs.sort_by_key(|(_, job)| !job.long);
    thread::scope(|s| {
        let mut started: Vec<_> = (jobs.into_iter())
            .map(|(i, job)| {
                let n = job.cpus.clamp(1, cpus);
                pool.take(n);
                let held = Held { cpus: &pool, n };
                let label = job.label;
                let handle = s.spawn(move || {
                    let _held = held;
                    (job.run)()
                });
                (i, label, handle)
            })
            .collect();
        started.sort_by_key(|(i, ..)| *i);
        (started.into_iter())
            .map(|(_, label, handle)| {
                handle.join().unwrap_or_else(|_| Row {
                    kernel: label,
                    columns: super::test_binaries::table_columns(),
                    results: vec![("run".into(), false, "the guest's runner panicked".into())],
                    skipped: Vec::new(),
                    seconds: 0.0,
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use std::{
        sync::atomic::{AtomicBool, AtomicUsize, Ordering},
        time::{Duration, Instant},
    };

    use super::*;

    fn row(kernel: &str) -> Row {
        Row {
            kernel: kernel.into(),
            columns: Vec::new(),
            results: Vec::new(),
            skipped: Vec::new(),
            seconds: 0.0,
        }
    }

    /// Jobs of one, two and five CPUs on two: the long one first, the two one-CPU jobs side by
    /// side (the first waits to see the second running), never more than two CPUs busy, the
    /// rows in the jobs' order, and a panicking job a failed row that gives its CPUs back.
    #[test]
    fn jobs_share_the_cpus_and_keep_their_order() {
        let busy = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let b_started = AtomicBool::new(false);
        let job = |label: &'static str, cpus: usize| {
            let (busy, most, b_started) = (&busy, &most, &b_started);
            Job {
                label: label.into(),
                long: label == "e",
                cpus,
                run: Box::new(move || {
                    // A job asking for more than all the CPUs takes them all.
                    let cpus = cpus.min(2);
                    let now = busy.fetch_add(cpus, Ordering::SeqCst) + cpus;
                    most.fetch_max(now, Ordering::SeqCst);
                    match label {
                        "a" => {
                            let until = Instant::now() + Duration::from_secs(10);
                            while !b_started.load(Ordering::SeqCst) {
                                assert!(Instant::now() < until, "b never ran beside a");
                                thread::sleep(Duration::from_millis(5));
                            }
                        }
                        "b" => b_started.store(true, Ordering::SeqCst),
                        "e" => assert!(!b_started.load(Ordering::SeqCst), "e started after b"),
                        _ => thread::sleep(Duration::from_millis(20)),
                    }
                    busy.fetch_sub(cpus, Ordering::SeqCst);
                    assert_ne!(label, "c", "a guest's runner fails");
                    row(label)
                }),
            }
        };
        let jobs = vec![
            job("a", 1),
            job("b", 1),
            job("c", 2),
            job("d", 5),
            job("e", 1),
        ];
        let rows = run(jobs, 2);
        let kernels: Vec<_> = rows.iter().map(|r| r.kernel.as_str()).collect();
        assert_eq!(kernels, ["a", "b", "c", "d", "e"]);
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "never more than the two CPUs"
        );
        assert!(!rows[2].results[0].1, "the panicked job is a failed row");
        let others = rows.iter().enumerate().filter(|(i, _)| *i != 2);
        assert!(others.into_iter().all(|(_, r)| r.results.is_empty()));
    }
}
