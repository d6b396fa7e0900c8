//! A counter that went back (its qdisc deleted and made again, its driver's statistics reset,
//! a 32-bit count wrapped) or left a reading while its device stayed: the window keeps the
//! growth it had and counts on. A driver's statistics reset count on only once they pass the
//! most they read (an undercount, never a drop no counter counted).
//!
//! Growth is the latest value minus the baseline (0 below it), plus what earlier runs of the
//! counter counted (`carried`). A counter that went back would read nothing until it passed its old
//! value, and one missing from a reading (a qdisc deleted, an ethtool statistic of a queue no
//! longer there, a counter of a dump that failed this time) would take its growth out of the
//! window.
use std::collections::HashSet;

use super::{rename::GoneBudget, window::Window};
use crate::vocab::counter::Counters;
use crate::vocab::devices::{Devices, split};

/// Adds to `now_counters` each counter of `previous` (the latest reading, its names as they
/// are now) that this reading lacks and that grew in the `window`, unless its device is gone
/// (see [`super::rename::keep_gone`]): its growth stays in the window. With `devices` unknown,
/// a per-device counter missing is kept too.
pub fn keep_missing(
    now_counters: &mut Counters,
    previous: &Counters,
    window: Window,
    devices: Option<&Devices>,
    budget: &mut GoneBudget,
) {
    let is: Option<HashSet<&str>> = devices.map(|d| d.values().map(String::as_str).collect());
    for (name, &v) in previous {
        let gone = match (split(name), &is) {
            (Some((_, dev, _)), Some(is)) => !is.contains(dev),
            _ => false,
        };
        if gone || !window.grew(name, v) || now_counters.contains_key(name) {
            continue;
        }
        if budget.take() {
            now_counters.insert(name.clone(), v);
        }
    }
}

/// Counters of an object that can be made again under the same name (a qdisc with the same
/// kind and handle, read at zero too; a socket): one that went back is a new run, from zero.
fn is_remade(name: &str) -> bool {
    name.starts_with("Qdisc:") || name.starts_with("Xsk:")
}

/// Whether a counter that went from `last` to `v` wrapped: the kernel keeps it in 32 bits (a
/// qdisc's `gnet_stats_queue`, a CPU's columns of `/proc/net/softnet_stat`). A CPU's column
/// only wraps; a qdisc may also be made again, so only a count within 2^28 of the top (a couple
/// of seconds at any line rate) is taken as a wrap. A qdisc made again while its old count was
/// that high would read up to 2^28 drops too many: a risk taken only past 3.7 billion drops.
fn wrapped(name: &str, last: u64, v: u64) -> bool {
    const TOP: u64 = 1 << 32;
    if last >= TOP || v >= last {
        return false;
    }
    if name.starts_with("Softnet:cpu") {
        last - v > TOP / 2
    } else {
        name.starts_with("Qdisc:") && last > TOP - (1 << 28)
    }
}

/// Each counter of `now_counters` below its value in `previous` (its names as they are now)
/// ran again: what it counted goes to `carried`, and its baseline is where it counts on from.
/// - A 32-bit counter that wrapped counted up to 2^32, then on from zero.
/// - A qdisc's or a socket's counter (made again under its name) counts on from zero.
/// - Any other (a driver's statistics reset, a sum over queues or CPUs that lost one, for a
///   while or for good) counts on once it passes the most it read: a window never shows drops
///   no counter counted, and a sum that gets its part back adds nothing.
pub fn carry_resets(
    now_counters: &Counters,
    previous: &Counters,
    baseline: &mut Counters,
    carried: &mut Counters,
) {
    for (name, &v) in now_counters {
        let base = baseline.get(name).copied().unwrap_or(0);
        let Some(&last) = previous.get(name).filter(|&&last| v < last) else {
            // A qdisc or socket missing from the reading before (deleted with no growth to
            // keep) and back below its baseline was made again: it counts from zero.
            if is_remade(name) && v < base && !previous.contains_key(name) {
                baseline.insert(name.clone(), 0);
            }
            continue;
        };
        let (counted, from) = if wrapped(name, last, v) {
            ((1u64 << 32).saturating_sub(base), 0)
        } else if is_remade(name) {
            (last.saturating_sub(base), 0)
        } else {
            (last.saturating_sub(base), base.max(last))
        };
        if counted > 0 {
            let c = carried.entry(name.clone()).or_default();
            *c = c.saturating_add(counted);
        }
        baseline.insert(name.clone(), from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::devices::tests::{counters, devices};

    /// The window's growth of `name`.
    fn growth(now: &Counters, base: &Counters, carried: &Counters, name: &str) -> u64 {
        let b = base.get(name).copied().unwrap_or(0);
        now[name].saturating_sub(b) + carried.get(name).copied().unwrap_or(0)
    }

    #[test]
    fn a_qdisc_made_again_keeps_its_growth_and_counts_on_from_zero() {
        let q = "Qdisc:eth0:pfifo 1::drops";
        let mut base = counters(&[(q, 100), ("Udp:NoPorts", 5)]);
        let previous = counters(&[(q, 110), ("Udp:NoPorts", 9)]);
        // The qdisc made again: 3 drops of its own.
        let now = counters(&[(q, 3), ("Udp:NoPorts", 9)]);
        let mut carried = Counters::new();
        carry_resets(&now, &previous, &mut base, &mut carried);
        assert_eq!(growth(&now, &base, &carried, q), 13);
        assert_eq!(base.get("Udp:NoPorts"), Some(&5), "not reset");
        // Made again later: carried adds up.
        let (previous, now) = (counters(&[(q, 7)]), counters(&[(q, 1)]));
        carry_resets(&now, &previous, &mut base, &mut carried);
        assert_eq!(growth(&now, &base, &carried, q), 18);
        // Past 2^31 and made again: a new run, never read as a wrap of 1.29e9 drops.
        let mut base = counters(&[(q, 3_000_000_000)]);
        let mut carried = Counters::new();
        let now = counters(&[(q, 5)]);
        carry_resets(
            &now,
            &counters(&[(q, 3_000_000_100)]),
            &mut base,
            &mut carried,
        );
        assert_eq!(growth(&now, &base, &carried, q), 105);
    }

    #[test]
    fn a_device_counter_that_went_back_never_counts_what_it_had_before() {
        // A sum over queues that lost one (or a reset): 1,000 → 1,010 → 410. The window had
        // 10; it counts on once the counter passes 1,010.
        let l = "Link:eth0:rx_dropped";
        let mut base = counters(&[(l, 1000)]);
        let mut carried = Counters::new();
        let mut last = counters(&[(l, 1010)]);
        for (v, window) in [(410, 10), (415, 10), (405, 10), (1010, 10), (1020, 20)] {
            let now = counters(&[(l, v)]);
            carry_resets(&now, &last, &mut base, &mut carried);
            assert_eq!(growth(&now, &base, &carried, l), window, "at {v}");
            last = now;
        }
        // A sum over CPUs that gets its part back adds nothing: 100 → 60 → 100.
        let s = "Softnet:Dropped";
        let mut base = counters(&[(s, 100)]);
        let mut carried = Counters::new();
        let mut last = counters(&[(s, 100)]);
        for v in [60, 100] {
            let now = counters(&[(s, v)]);
            carry_resets(&now, &last, &mut base, &mut carried);
            assert_eq!(growth(&now, &base, &carried, s), 0, "at {v}");
            last = now;
        }
    }

    #[test]
    fn a_32_bit_counter_that_wrapped_counts_across_the_wrap() {
        let s = "Softnet:cpu1:dropped";
        let mut base = counters(&[(s, u64::from(u32::MAX) - 100)]);
        let mut carried = Counters::new();
        let now = counters(&[(s, 50)]);
        let previous = counters(&[(s, u64::from(u32::MAX) - 10)]);
        carry_resets(&now, &previous, &mut base, &mut carried);
        // 100 to the wrap, the wrap itself, 50 after it.
        assert_eq!(growth(&now, &base, &carried, s), 151);
        // A 64-bit counter never wraps this way: on from what it reads.
        let l = "Link:eth0:rx_dropped";
        let mut base = counters(&[(l, u64::from(u32::MAX) - 100)]);
        let mut carried = Counters::new();
        let now = counters(&[(l, 50)]);
        let previous = counters(&[(l, u64::from(u32::MAX) - 10)]);
        carry_resets(&now, &previous, &mut base, &mut carried);
        assert_eq!(growth(&now, &base, &carried, l), 90);
    }

    #[test]
    fn a_counter_missing_from_a_reading_keeps_its_growth_unless_its_device_is_gone() {
        let previous = counters(&[
            ("Qdisc:eth0:pfifo 1::drops", 110),
            ("Ethtool:eth0:rx_queue_3_drops", 4),
            ("Link:gone:rx_dropped", 6),
            ("Link:eth0:rx_dropped", 2),
            ("Softnet:cpu1:dropped", 8),
            ("Dev:eth0:RxDrop", 0),
        ]);
        let base = counters(&[
            ("Qdisc:eth0:pfifo 1::drops", 100),
            ("Link:eth0:rx_dropped", 2),
            ("Softnet:cpu1:dropped", 1),
            ("Dev:eth0:RxDrop", 0),
        ]);
        // `Dev:eth0:RxDrop` is at its baseline, but ran before: it grew.
        let carried = counters(&[("Dev:eth0:RxDrop", 50)]);
        let window = Window::new(Some(&base), Some(&carried));
        let mut now = counters(&[("Link:eth0:rx_dropped", 2)]);
        let mut budget = GoneBudget::default();
        let eth0 = devices(&[(2, "eth0")]);
        keep_missing(&mut now, &previous, window, Some(&eth0), &mut budget);
        assert_eq!(
            now,
            counters(&[
                ("Qdisc:eth0:pfifo 1::drops", 110),
                ("Ethtool:eth0:rx_queue_3_drops", 4),
                ("Link:eth0:rx_dropped", 2),
                ("Softnet:cpu1:dropped", 8),
                ("Dev:eth0:RxDrop", 0),
            ]),
            "a gone device's counters are not these (keep_gone's)"
        );
        // Devices unknown: every missing counter that grew is kept.
        let mut now = Counters::new();
        keep_missing(&mut now, &previous, window, None, &mut budget);
        assert_eq!(now.len(), 5, "{now:?}");
        assert_eq!(budget.left_out, 0);
        // Within the budget.
        let mut budget = GoneBudget {
            left: 1,
            left_out: 0,
        };
        let mut now = Counters::new();
        keep_missing(&mut now, &previous, window, None, &mut budget);
        assert_eq!((now.len(), budget.left_out), (1, 4));
    }
}
