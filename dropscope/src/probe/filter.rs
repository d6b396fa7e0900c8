//! The grouping and filters, encoded for the kernel: the program's grouping bits, its filter
//! fields and the reason bitmap. The same filter applied to snapshots is `model::group`'s.
use anyhow::{Context as _, bail};
use dropscope_common::{Config, ReasonWords, filter, group, need, reason_bit};

use crate::vocab::dims::{Dim, Filter, reason_name};

use super::reasons::ReasonTable;

/// The program's grouping bits for `by`.
pub fn group_bits(by: &[Dim]) -> u32 {
    by.iter().fold(0, |bits, d| {
        bits | match d {
            Dim::Netns => group::NETNS,
            // An interface index means something only within its namespace.
            Dim::Device => group::DEVICE | group::NETNS,
            Dim::Protocol => group::PROTOCOL,
            Dim::Port => group::PORT,
            Dim::Socket => group::SOCKET,
            // Derived beside the keys, never counted by the kernel.
            Dim::Reason | Dim::Location | Dim::Culprit => 0,
        }
    })
}

/// Fills the grouping and filter fields of the program's config, the reason filter's bitmap
/// included. The namespace must be resolved to an inode (live, it is). Errors name what cannot
/// be encoded.
pub fn encode(
    by: &[Dim],
    f: &Filter,
    reasons: &ReasonTable,
    cfg: &mut Config,
) -> anyhow::Result<()> {
    cfg.group = group_bits(by);
    if let Some(ns) = &f.netns {
        let inode = ns
            .inode
            .with_context(|| format!("--netns {:?}: not resolved to a namespace", ns.text))?;
        cfg.filter_netns =
            u32::try_from(inode).context("this namespace's inode does not fit the filter")?;
    }
    if let Some(name) = &f.device {
        if name.is_empty() || name.len() > 15 {
            bail!("--device {name:?}: an interface name has 1 to 15 bytes");
        }
        cfg.filter_dev_on = 1;
        cfg.filter_dev = [0; 16];
        cfg.filter_dev[..name.len()].copy_from_slice(name.as_bytes());
    }
    if let Some(p) = f.protocol {
        cfg.filter_l4 = u32::from(p) + 1;
    }
    cfg.filter_port = f.port.map_or(0, u32::from);
    let mut bits = ReasonWords::EMPTY;
    let (mode, names) = if !f.reasons.is_empty() {
        (filter::REASONS_ONLY, &f.reasons)
    } else if !f.exclude_reasons.is_empty() {
        (filter::REASONS_EXCEPT, &f.exclude_reasons)
    } else {
        (filter::REASONS_ALL, &f.reasons)
    };
    cfg.filter_reasons = mode;
    cfg.need = need_bits(cfg, mode != filter::REASONS_ALL);
    for name in names {
        let value = reasons.value_of(&reason_name(name)).with_context(|| {
            let near = crate::suggest::did_you_mean(name, reasons.iter().map(|(_, n)| n));
            format!("unknown drop reason {name:?}{near} (`dropscope reasons` lists them)")
        })?;
        let bit = reason_bit(value)
            .with_context(|| format!("drop reason {name} cannot be filtered in the kernel"))?;
        bits.set(bit);
    }
    cfg.filter_reason_words = bits;
    Ok(())
}

/// What the program must read and do per drop (bits of [`need`]) for the grouping and filters
/// in `cfg`; `reasons_filtered` when a reason filter is set.
fn need_bits(cfg: &Config, reasons_filtered: bool) -> u32 {
    let mut bits = 0;
    if cfg.group & (group::NETNS | group::DEVICE) != 0
        || cfg.filter_netns != 0
        || cfg.filter_dev_on != 0
    {
        bits |= need::NETDEV;
    }
    if cfg.group & (group::PROTOCOL | group::PORT) != 0
        || cfg.filter_l4 != 0
        || cfg.filter_port != 0
    {
        bits |= need::HEADERS;
    }
    if cfg.group & group::PORT != 0 || cfg.filter_port != 0 {
        bits |= need::PORT;
    }
    if cfg.filter_netns != 0 || cfg.filter_dev_on != 0 || cfg.filter_l4 != 0 || cfg.filter_port != 0
    {
        bits |= need::FILTER;
    }
    if reasons_filtered {
        bits |= need::REASONS;
    }
    // Read only where grouped by (no filter reads it), so it never needs a mask.
    if cfg.group & group::SOCKET != 0 {
        bits |= need::SOCKET;
    }
    // The key is the packet as read unless the grouping keeps less than is read.
    if (bits & need::NETDEV != 0 && cfg.group & group::DEVICE == 0)
        || (bits & need::HEADERS != 0 && cfg.group & group::PROTOCOL == 0)
        || (bits & need::PORT != 0 && cfg.group & group::PORT == 0)
    {
        bits |= need::MASK;
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_masked_only_where_it_keeps_less_than_is_read() {
        let masked = |by: &[Dim], f: fn(&mut Config)| {
            let mut cfg = Config {
                group: group_bits(by),
                ..Config::default()
            };
            f(&mut cfg);
            need_bits(&cfg, false) & need::MASK != 0
        };
        let none = |_: &mut Config| {};
        // Nothing read, or all that is read kept: no mask.
        assert!(!masked(&[Dim::Reason, Dim::Location], none));
        assert!(!masked(&[Dim::Reason, Dim::Netns, Dim::Device], none));
        assert!(!masked(&[Dim::Device, Dim::Protocol, Dim::Port], none));
        // The protocol alone reads no port.
        assert!(!masked(&[Dim::Device, Dim::Protocol], none));
        // The namespace without the interface, the port without the protocol.
        assert!(masked(&[Dim::Netns], none));
        assert!(masked(&[Dim::Port], none));
        // A filter reads what the grouping drops.
        assert!(masked(&[Dim::Reason], |c| c.filter_netns = 7));
        assert!(masked(&[Dim::Device], |c| c.filter_port = 53));
        assert!(!masked(&[Dim::Device], |c| c.filter_dev_on = 1));
        assert!(masked(&[Dim::Protocol], |c| c.filter_port = 53));
    }

    #[test]
    fn the_port_is_read_only_where_it_is_grouped_by_or_filtered_on() {
        let reads = |by: &[Dim], port: u32| {
            let cfg = Config {
                group: group_bits(by),
                filter_port: port,
                ..Config::default()
            };
            need_bits(&cfg, false) & (need::HEADERS | need::PORT)
        };
        assert_eq!(reads(&[Dim::Reason], 0), 0);
        assert_eq!(reads(&[Dim::Protocol], 0), need::HEADERS);
        assert_eq!(reads(&[Dim::Port], 0), need::HEADERS | need::PORT);
        assert_eq!(reads(&[Dim::Protocol], 53), need::HEADERS | need::PORT);
    }

    #[test]
    fn group_bits_keep_the_namespace_with_the_device() {
        assert_eq!(
            group_bits(&[Dim::Reason, Dim::Device]),
            group::DEVICE | group::NETNS
        );
    }
}
