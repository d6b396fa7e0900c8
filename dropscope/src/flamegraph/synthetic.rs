//! Deterministic, kernel-like synthetic stacks for benchmarks and tests.
use std::{collections::HashMap, sync::Arc};

use crate::model::snapshot::{DropKey, Reason, StackCount};

/// How a packet got to the receive (or transmit) path: outermost frame first.
const ENTRIES: &[&[&str]] = &[
    // UDP sendto over loopback, delivered from the softirq run when bottom halves are enabled.
    &[
        "entry_SYSCALL_64_after_hwframe",
        "do_syscall_64",
        "__x64_sys_sendto",
        "__sys_sendto",
        "__sock_sendmsg",
        "udp_sendmsg",
        "udp_send_skb",
        "ip_send_skb",
        "ip_local_out",
        "ip_output",
        "ip_finish_output2",
        "__local_bh_enable_ip",
        "do_softirq",
        "handle_softirqs",
        "net_rx_action",
        "__napi_poll",
        "process_backlog",
    ],
    // A virtio NIC interrupt on an idle CPU.
    &[
        "secondary_startup_64_no_verify",
        "start_secondary",
        "cpu_startup_entry",
        "do_idle",
        "cpuidle_idle_call",
        "asm_common_interrupt",
        "common_interrupt",
        "irq_exit_rcu",
        "__irq_exit_rcu",
        "handle_softirqs",
        "net_rx_action",
        "__napi_poll",
        "virtnet_poll [virtio_net]",
        "virtnet_receive [virtio_net]",
        "napi_gro_receive",
        "netif_receive_skb_list_internal",
    ],
    // ksoftirqd draining the backlog.
    &[
        "ret_from_fork_asm",
        "ret_from_fork",
        "kthread",
        "smpboot_thread_fn",
        "run_ksoftirqd",
        "handle_softirqs",
        "net_rx_action",
        "__napi_poll",
        "mlx5e_napi_poll [mlx5_core]",
        "mlx5e_poll_rx_cq [mlx5_core]",
        "mlx5e_handle_rx_cqe [mlx5_core]",
        "napi_gro_receive",
        "napi_complete_done",
        "gro_normal_list",
        "netif_receive_skb_list_internal",
        "__netif_receive_skb_list_core",
    ],
    // A TCP send through a veth pair into a container.
    &[
        "entry_SYSCALL_64_after_hwframe",
        "do_syscall_64",
        "__x64_sys_sendmsg",
        "___sys_sendmsg",
        "tcp_sendmsg",
        "tcp_sendmsg_locked",
        "__tcp_push_pending_frames",
        "tcp_write_xmit",
        "__tcp_transmit_skb",
        "__ip_queue_xmit",
        "ip_finish_output2",
        "__dev_queue_xmit",
        "dev_hard_start_xmit",
        "veth_xmit [veth]",
        "__local_bh_enable_ip",
        "do_softirq",
        "handle_softirqs",
        "net_rx_action",
        "__napi_poll",
        "veth_poll [veth]",
        "veth_xdp_rcv [veth]",
    ],
];

/// The common start of the IPv4 receive path, after the entries above.
const RX_CORE: &[&str] = &[
    "__netif_receive_skb",
    "__netif_receive_skb_one_core",
    "ip_rcv",
];

/// Drop paths after `ip_rcv`: reason code and name, then frames ending at the drop site.
const TAILS: &[(u32, &str, &[&str])] = &[
    (
        3,
        "NO_SOCKET",
        &[
            "ip_rcv_finish",
            "ip_local_deliver",
            "ip_local_deliver_finish",
            "ip_protocol_deliver_rcu",
            "udp_rcv",
            "__udp4_lib_rcv",
        ],
    ),
    (
        3,
        "NO_SOCKET",
        &[
            "ip_rcv_finish",
            "ip_local_deliver",
            "ip_local_deliver_finish",
            "ip_protocol_deliver_rcu",
            "tcp_v4_rcv",
        ],
    ),
    (8, "NETFILTER_DROP", &["nf_hook_slow"]),
    (
        8,
        "NETFILTER_DROP",
        &["ip_rcv_finish", "ip_local_deliver", "nf_hook_slow"],
    ),
    (9, "OTHERHOST", &["ip_rcv_core"]),
    (
        14,
        "SOCKET_RCVBUFF",
        &[
            "ip_rcv_finish",
            "ip_local_deliver",
            "ip_local_deliver_finish",
            "ip_protocol_deliver_rcu",
            "udp_rcv",
            "__udp4_lib_rcv",
            "udp_unicast_rcv_skb",
            "udp_queue_rcv_one_skb",
            "__udp_queue_rcv_skb",
        ],
    ),
    (
        5,
        "TCP_CSUM",
        &[
            "ip_rcv_finish",
            "ip_local_deliver",
            "ip_local_deliver_finish",
            "ip_protocol_deliver_rcu",
            "tcp_v4_rcv",
        ],
    ),
    (
        27,
        "IP_NOPROTO",
        &[
            "ip_rcv_finish",
            "ip_local_deliver",
            "ip_local_deliver_finish",
            "ip_protocol_deliver_rcu",
        ],
    ),
    (
        2,
        "NOT_SPECIFIED",
        &[
            "ip_rcv_finish",
            "ip_route_input_noref",
            "ip_route_input_slow",
            "ip_error",
        ],
    ),
];

/// `n` distinct, deterministic stacks shaped like real kernel drop stacks.
///
/// Each stack is an entry path (syscall, interrupt, ksoftirqd, veth), the IPv4 receive path
/// and a drop path for one of several reasons, 20 to 33 frames deep, so stacks share long
/// prefixes as real ones do. Frames read `function+0xoffset` or `function+0xoffset [module]`;
/// beyond the first few dozen combinations, stacks differ in the call-site offsets of the
/// frames just above the drop site. Frames are interned (shared `Arc`s), as in a snapshot.
/// Weights are skewed, as sampled estimates are: sample count times a power-of-two period.
pub fn synthetic_stacks(n: usize) -> Vec<StackCount> {
    let mut interner: HashMap<String, Arc<str>> = HashMap::new();
    let mut intern = |s: String| -> Arc<str> {
        interner
            .entry(s)
            .or_insert_with_key(|k| Arc::from(k.as_str()))
            .clone()
    };
    let combos = ENTRIES.len() * TAILS.len();
    let mut stacks = Vec::with_capacity(n);
    for i in 0..n {
        let entry = ENTRIES[i % ENTRIES.len()];
        let (code, reason, tail) = TAILS[(i / ENTRIES.len()) % TAILS.len()];
        let names: Vec<&str> = entry
            .iter()
            .chain(RX_CORE)
            .chain(tail.iter())
            .copied()
            .collect();
        let depth = names.len();
        // The variant's base-16 digits pick call-site offsets, leaf-most frames first; the
        // drop site itself keeps one offset so it stays one location.
        let mut variant = i / combos;
        let mut frames = Vec::with_capacity(depth);
        for (pos, name) in names.iter().enumerate().rev() {
            let digit = if pos + 1 == depth {
                0
            } else {
                let d = variant % 16;
                variant /= 16;
                d
            };
            frames.push(intern(frame(name, digit)));
        }
        frames.reverse();
        let frames: Arc<[Arc<str>]> = frames.into();
        let h = splitmix64(i as u64);
        let samples = 1 + h % 32;
        let period = 1u64 << ((h >> 8) % 10);
        stacks.push(StackCount {
            key: DropKey {
                reason: Reason {
                    code,
                    name: intern(reason.to_string()),
                },
                location: frames[depth - 1].clone(),
                attr: Default::default(),
            },
            frames,
            weight: samples * period,
            samples,
        });
    }
    stacks
}

/// `name+0xoffset [module]`, the offset derived from the name and a call-site digit.
fn frame(name: &str, digit: usize) -> String {
    let (func, module) = match name.split_once(' ') {
        Some((func, module)) => (func, Some(module)),
        None => (name, None),
    };
    let base = 0x10
        + (splitmix64(
            func.bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))),
        ) % 0x300);
    let off = base + 4 * digit as u64;
    match module {
        Some(module) => format!("{func}+{off:#x} {module}"),
        None => format!("{func}+{off:#x}"),
    }
}

/// A fixed, well-mixed hash of `x` (SplitMix64's finalizer).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn stacks_are_distinct_deterministic_and_deep() {
        let a = synthetic_stacks(10_000);
        assert_eq!(a, synthetic_stacks(10_000));
        let paths: HashSet<_> = a
            .iter()
            .map(|s| (s.key.reason.name.clone(), s.frames.clone()))
            .collect();
        assert_eq!(paths.len(), 10_000);
        for s in &a {
            assert!(
                (20..=33).contains(&s.frames.len()),
                "depth {}",
                s.frames.len()
            );
            assert_eq!(s.frames.last(), Some(&s.key.location));
            assert!(s.weight >= s.samples && s.samples > 0);
        }
        // Folding keeps every one of them apart.
        assert_eq!(super::super::folded(&a).lines().count(), 10_000);
    }
}
