//! A counter that went back (its qdisc deleted and made again, its driver's statistics reset,
//! its queue removed and added) or left a reading while its device stayed: the window keeps
//! the growth it had and counts on from zero, never reading less than what was counted.
//!
//! Growth is the latest value minus the baseline. A counter that went back to zero and up
//! again would read nothing until it passed its old value, and one missing from a reading
//! (a qdisc deleted, an ethtool statistic of a queue no longer there, a counter of a dump that
//! failed this time) would take its growth out of the window.
use std::collections::HashSet;

use super::{parse::Counters, rename::GoneBudget};
use crate::model::devices::{Devices, split};

/// Adds to `now_counters` each counter of `previous` (the latest reading, its names as they
/// are now) that this reading lacks and that grew since `baseline`, unless its device is gone
/// (see [`super::rename::keep_gone`]): its growth stays in the window. With `devices` unknown
/// (a link dump that failed), a per-device counter missing is kept too.
pub fn keep_missing(
    now_counters: &mut Counters,
    previous: &Counters,
    baseline: Option<&Counters>,
    devices: Option<&Devices>,
    budget: &mut GoneBudget,
) {
    let is: Option<HashSet<&str>> = devices.map(|d| d.values().map(String::as_str).collect());
    for (name, &v) in previous {
        let gone = match (split(name), &is) {
            (Some((_, dev, _)), Some(is)) => !is.contains(dev),
            _ => false,
        };
        let grew = baseline.and_then(|b| b.get(name)) != Some(&v);
        if gone || !grew || now_counters.contains_key(name) {
            continue;
        }
        if budget.left == 0 {
            budget.left_out += 1;
            continue;
        }
        budget.left -= 1;
        now_counters.insert(name.clone(), v);
    }
}

/// Each counter of `now_counters` below its value in `previous` (its names as they are now),
/// or below its baseline, was reset: the growth it had goes to `carried` and it counts on
/// from zero (its baseline 0).
pub fn carry_resets(
    now_counters: &Counters,
    previous: &Counters,
    baseline: &mut Counters,
    carried: &mut Counters,
) {
    for (name, &v) in now_counters {
        let base = baseline.get(name).copied().unwrap_or(0);
        let last = previous.get(name).copied().unwrap_or(base);
        if v >= last && v >= base {
            continue;
        }
        let had = last.saturating_sub(base);
        if had > 0 {
            let c = carried.entry(name.clone()).or_default();
            *c = c.saturating_add(had);
        }
        baseline.insert(name.clone(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::devices::tests::{counters, devices};

    #[test]
    fn a_counter_that_went_back_keeps_its_growth_and_counts_on_from_zero() {
        let mut base = counters(&[("Qdisc:eth0:pfifo 1::drops", 100), ("Udp:NoPorts", 5)]);
        let previous = counters(&[("Qdisc:eth0:pfifo 1::drops", 110), ("Udp:NoPorts", 9)]);
        // The qdisc made again: 3 drops of its own.
        let now = counters(&[("Qdisc:eth0:pfifo 1::drops", 3), ("Udp:NoPorts", 9)]);
        let mut carried = Counters::new();
        carry_resets(&now, &previous, &mut base, &mut carried);
        assert_eq!(carried, counters(&[("Qdisc:eth0:pfifo 1::drops", 10)]));
        assert_eq!(base.get("Qdisc:eth0:pfifo 1::drops"), Some(&0));
        assert_eq!(base.get("Udp:NoPorts"), Some(&5), "not reset");
        // Reset again later: carried adds up.
        let previous = counters(&[("Qdisc:eth0:pfifo 1::drops", 7)]);
        let now = counters(&[("Qdisc:eth0:pfifo 1::drops", 1)]);
        carry_resets(&now, &previous, &mut base, &mut carried);
        assert_eq!(carried, counters(&[("Qdisc:eth0:pfifo 1::drops", 17)]));
        // Below its baseline without a previous value (it was not kept): from zero, nothing
        // carried.
        let mut base = counters(&[("Link:eth0:rx_dropped", 50)]);
        let mut carried = Counters::new();
        let now = counters(&[("Link:eth0:rx_dropped", 4)]);
        carry_resets(&now, &Counters::new(), &mut base, &mut carried);
        assert_eq!(
            (base.get("Link:eth0:rx_dropped"), carried.len()),
            (Some(&0), 0)
        );
    }

    #[test]
    fn a_counter_missing_from_a_reading_keeps_its_growth_unless_its_device_is_gone() {
        let previous = counters(&[
            ("Qdisc:eth0:pfifo 1::drops", 110),
            ("Ethtool:eth0:rx_queue_3_drops", 4),
            ("Link:gone:rx_dropped", 6),
            ("Link:eth0:rx_dropped", 2),
            ("Softnet:cpu1:dropped", 8),
        ]);
        let base = counters(&[
            ("Qdisc:eth0:pfifo 1::drops", 100),
            ("Link:eth0:rx_dropped", 2),
            ("Softnet:cpu1:dropped", 1),
        ]);
        let mut now = counters(&[("Link:eth0:rx_dropped", 2)]);
        let mut budget = GoneBudget::default();
        let eth0 = devices(&[(2, "eth0")]);
        keep_missing(&mut now, &previous, Some(&base), Some(&eth0), &mut budget);
        assert_eq!(
            now,
            counters(&[
                ("Qdisc:eth0:pfifo 1::drops", 110),
                ("Ethtool:eth0:rx_queue_3_drops", 4),
                ("Link:eth0:rx_dropped", 2),
                ("Softnet:cpu1:dropped", 8),
            ]),
            "a gone device's counters are not these (keep_gone's)"
        );
        // Devices unknown: every missing counter that grew is kept.
        let mut now = Counters::new();
        keep_missing(&mut now, &previous, Some(&base), None, &mut budget);
        assert_eq!(now.len(), 4, "{now:?}");
        assert_eq!(budget.left_out, 0);
        // Within the budget.
        let mut budget = GoneBudget {
            left: 1,
            left_out: 0,
        };
        let mut now = Counters::new();
        keep_missing(&mut now, &previous, Some(&base), None, &mut budget);
        assert_eq!((now.len(), budget.left_out), (1, 3));
    }
}
