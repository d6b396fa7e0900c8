//! The whole screen rendered on ratatui's test backend, at 80x24 and larger.
use super::*;

#[test]
fn header_and_table_show_exact_counts_at_80x24_and_larger() {
    for size in [(80, 24), (160, 48)] {
        let s = state(size);
        let out = screen(&s);
        assert!(out.contains("testhost"), "{out}");
        assert!(out.contains("tp_btf/kfree_skb"), "{out}");
        assert!(out.contains("total 1,234,535"), "{out}");
        assert!(out.contains("poll 250ms"), "{out}");
        // dropscope's own cost: its CPU; syscalls and BPF run time only when asked for
        // (--count-syscalls, --bpf-stats), not `n/a` and `off` for a first-time user.
        assert!(out.contains("self cpu"), "{out}");
        assert!(!out.contains("n/a") && !out.contains("syscalls/s"), "{out}");
        assert!(!out.contains("bpf_stats"), "{out}");
        assert!(out.contains("1,234,000"), "{out}");
        assert!(out.contains("__udp4_lib_rcv+0x9b0"), "{out}");
        assert!(out.contains("NETFILTER_DROP"), "{out}");
        assert!(out.contains("REASON") && out.contains("TREND"), "{out}");
        assert!(!out.contains("OVERFLOW"), "{out}");
        assert!(!out.contains("REPLAY"), "{out}");
    }
}

/// With --count-syscalls and --bpf-stats the header shows what they measure.
#[test]
fn syscalls_and_bpf_run_time_show_when_asked_for() {
    let mut s = State::new(info(), None, (100, 24));
    let t0 = Instant::now();
    let with = |secs: u64, syscalls: u64, ns: u64, runs: u64| {
        let mut x = snap(secs, &[(UDP, 10 * secs)], 0);
        x.health.self_syscalls = Some(syscalls);
        x.health.bpf_run_ns = Some(ns);
        x.health.bpf_run_cnt = Some(runs);
        x
    };
    feed(&mut s, with(1, 10, 1_000, 10), t0);
    feed(&mut s, with(2, 22, 8_200, 110), t0 + Duration::from_secs(1));
    let out = screen(&s);
    assert!(out.contains("12.0 syscalls/s"), "{out}");
    assert!(out.contains("bpf 72 ns/run"), "{out}");
}

#[test]
fn overflow_and_stack_health_show_only_when_non_zero() {
    let mut s = state((80, 24));
    assert!(!screen(&s).contains("stack samples"));
    let mut bad = snap(3, &[(UDP, 1_234_100), (TCP, 30), (NFT, 505)], 42);
    bad.health.stack_lost = 3;
    feed(&mut s, bad, Instant::now());
    let out = screen(&s);
    assert!(out.contains("OVERFLOW 42 drops not keyed"), "{out}");
    assert!(out.contains("stack samples: 3 lost"), "{out}");
}

#[test]
fn cost_is_shown_from_health_deltas() {
    let mut s = State::new(info(), None, (100, 30));
    let mut a = snap(1, &[(UDP, 1)], 0);
    a.health.self_syscalls = Some(100);
    a.health.bpf_run_ns = Some(0);
    a.health.bpf_run_cnt = Some(0);
    let mut b = snap(2, &[(UDP, 101)], 0);
    b.health.self_syscalls = Some(104);
    b.health.self_cpu_us = 5_000;
    b.health.bpf_run_ns = Some(3_500);
    b.health.bpf_run_cnt = Some(100);
    feed(&mut s, a, Instant::now());
    feed(&mut s, b, Instant::now());
    let out = screen(&s);
    assert!(out.contains("self cpu 0.5%"), "{out}");
    assert!(out.contains("4.0 syscalls/s"), "{out}");
    assert!(out.contains("35 ns/run"), "{out}");
}

#[test]
fn help_lists_every_key_that_does_something_here() {
    for (size, replay) in [((80, 24), false), ((120, 40), false), ((100, 30), true)] {
        let mut s = state(size);
        if replay {
            s.replay = Some(ReplayStatus::default());
        }
        assert_eq!(press(&mut s, KeyCode::Char('?')), None);
        let out = screen(&s);
        let offered = |k: &&help::KeyHelp| crate::tui::keys::offered(k, &s);
        for k in help::GENERAL.iter().chain(help::REPLAY).filter(offered) {
            assert!(out.contains(k.keys), "missing {} in\n{out}", k.keys);
            assert!(out.contains(k.action), "missing {} in\n{out}", k.action);
        }
        // Any key closes it; q still quits.
        assert_eq!(press(&mut s, KeyCode::Char('x')), None);
        assert!(!s.help);
        press(&mut s, KeyCode::Char('?'));
        assert_eq!(press(&mut s, KeyCode::Char('q')), Some(Effect::Quit));
    }
}

#[test]
fn stack_view_labels_estimates_and_shows_the_exact_count() {
    let mut s = state((80, 24));
    // The UDP row is first (highest rate) and selected.
    assert_eq!(selected_name(&s), UDP.1);
    press(&mut s, KeyCode::Enter);
    let Screen::Stacks(v) = &s.screen else {
        panic!("not in the stack view");
    };
    assert_eq!(v.scope, StackScope::Row(key(UDP.0, UDP.1)));
    let out = screen(&s);
    assert!(out.contains("exact count 1,234,000"), "{out}");
    assert!(out.contains("sampled estimate ~900"), "{out}");
    assert!(out.contains("[NO_SOCKET]"), "{out}");
    assert!(out.contains("entry_SYSCALL_64"), "{out}");
    assert!(out.contains("100.0%"), "{out}");
    assert!(!out.contains("tcp_v4_rcv"), "{out}");
    // Esc goes back; `a` shows the whole (filtered) set.
    press(&mut s, KeyCode::Esc);
    assert_eq!(s.screen, Screen::Table);
    press(&mut s, KeyCode::Char('a'));
    let out = screen(&s);
    assert!(out.contains("all drops"), "{out}");
    assert!(out.contains("90.0%") && out.contains("10.0%"), "{out}");
    assert!(out.contains("~100"), "{out}");
    assert!(out.contains("exact count 1,234,535"), "{out}");
}

#[test]
fn stack_view_without_samples_says_so() {
    let mut s = state((80, 24));
    for _ in 0..2 {
        press(&mut s, KeyCode::Down);
    }
    assert_eq!(selected_name(&s), TCP.1);
    press(&mut s, KeyCode::Char('k'));
    assert_eq!(selected_name(&s), NFT.1);
    press(&mut s, KeyCode::Enter);
    let out = screen(&s);
    assert!(out.contains("no stack samples"), "{out}");
}

#[test]
fn scrolling_keeps_the_selection_on_screen() {
    let mut s = State::new(info(), None, (80, 24));
    let names: Vec<String> = (0..100).map(|i| format!("loc{i:03}")).collect();
    let counts: Vec<((&str, &str), u64)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (("R", n.as_str()), 1000 - i as u64))
        .collect();
    feed(&mut s, snap(1, &counts, 0), Instant::now());
    press(&mut s, KeyCode::End);
    assert_eq!(selected_name(&s), "loc099");
    let out = screen(&s);
    assert!(out.contains("loc099") && !out.contains("loc000"), "{out}");
    press(&mut s, KeyCode::Home);
    assert!(screen(&s).contains("loc000"));
    let page = view::table_page(&s);
    press(&mut s, KeyCode::PageDown);
    assert_eq!(selected_name(&s), format!("loc{page:03}"));
    // A smaller screen still shows the selected row.
    update(&mut s, Msg::Resize(80, 10));
    assert!(screen(&s).contains(&format!("loc{page:03}")));
}

#[test]
fn renders_before_data_and_on_tiny_screens() {
    let s = State::new(info(), None, (80, 24));
    assert!(screen(&s).contains("waiting for the first counts"));
    for size in [(20, 5), (1, 1), (80, 3)] {
        let mut s = state(size);
        screen(&s);
        press(&mut s, KeyCode::Char('?'));
        screen(&s);
        press(&mut s, KeyCode::Esc);
        press(&mut s, KeyCode::Enter);
        screen(&s);
    }
}

#[test]
fn missed_runs_and_a_total_mismatch_show_only_when_present() {
    let mut s = state((80, 24));
    let out = screen(&s);
    assert!(
        !out.contains("MISSED") && !out.contains("MISMATCH"),
        "{out}"
    );
    let mut bad = snap(3, &[(UDP, 1_234_100), (TCP, 30), (NFT, 505)], 0);
    bad.health.recursion_misses = 7;
    bad.total += 2;
    feed(&mut s, bad, Instant::now());
    let out = screen(&s);
    assert!(out.contains("MISSED 7 drops"), "{out}");
    assert!(out.contains("MISMATCH"), "{out}");
}

/// At 80x24 a real receive stack (about 30 frames) does not fit: the view starts at the drop
/// site, then its callers, and marks the frame where the softirq began.
#[test]
fn the_stack_view_starts_at_the_drop_site_and_marks_the_softirq() {
    let mut s = State::new(info(), None, (80, 24));
    // Outermost first, as the kernel's unwinder gives them (a loopback send: the syscall, the
    // softirq it ran on the way out, the receive path, the drop site).
    let outer: Vec<String> = (0..14).map(|i| format!("syscall_path_{i}")).collect();
    let mut frames: Vec<&str> = outer.iter().map(String::as_str).collect();
    frames.extend([
        "do_softirq",
        "handle_softirqs+0x1a3",
        "net_rx_action",
        "__napi_poll",
        "process_backlog",
        "__netif_receive_skb_one_core",
        "ip_rcv",
        "ip_rcv_finish",
        "ip_local_deliver",
        "ip_local_deliver_finish",
        "ip_protocol_deliver_rcu",
        "udp_rcv",
        "__udp4_lib_rcv+0x9b0",
    ]);
    let mut snap = snap(1, &[(UDP, 50)], 0);
    snap.stacks = vec![StackCount {
        key: key(UDP.0, UDP.1),
        frames: frames.iter().map(|f| Arc::from(*f)).collect(),
        weight: 50,
        samples: 5,
    }];
    feed(&mut s, snap, Instant::now());
    press(&mut s, KeyCode::Enter);
    let out = screen(&s);
    let row = |needle: &str| out.lines().position(|l| l.contains(needle));
    let site = row("__udp4_lib_rcv+0x9b0").unwrap_or_else(|| panic!("no drop site in\n{out}"));
    let caller = row("udp_rcv ").unwrap_or_else(|| panic!("no caller in\n{out}"));
    assert!(
        site < caller,
        "the drop site first, its callers below:\n{out}"
    );
    assert!(out.contains("drop site first"), "{out}");
    assert!(!out.contains("syscall_path_0"), "{out}");
    // Scrolling out from the drop site reaches the frame the softirq began at, marked.
    let mut out = out;
    for _ in 0..20 {
        if out.contains("handle_softirqs") {
            break;
        }
        press(&mut s, KeyCode::Down);
        out = screen(&s);
    }
    let line = (out.lines().find(|l| l.contains("handle_softirqs+0x1a3")))
        .unwrap_or_else(|| panic!("no softirq in\n{out}"));
    assert!(line.contains("softirq begins"), "{out}");
    assert!(
        !out.lines()
            .any(|l| l.contains("net_rx_action") && l.contains("softirq")),
        "only where it began: {out}"
    );
}
