//! Tests of the TUI: update transitions, and the whole view rendered on ratatui's test backend.
mod attribution;
mod hostile;
mod keys;
mod panel;
mod polish;
mod rendering;
mod selection;
mod socket;
mod timeline;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::{Terminal, backend::TestBackend};

use crate::tui::{
    help,
    state::{RecordingStatus, Screen, StackScope, State},
    update::{Effect, Msg, update},
    view,
};
use crate::{
    model::{DropCount, DropKey, SessionInfo, Snapshot, StackCount},
    source::{ReplayCommand, ReplayStatus},
};

fn key(name: &str, loc: &str) -> DropKey {
    crate::fixtures::key(2, name, loc)
}

const UDP: (&str, &str) = ("NO_SOCKET", "__udp4_lib_rcv+0x9b0");
const TCP: (&str, &str) = ("NO_SOCKET", "tcp_v4_rcv+0x1a2");
const NFT: (&str, &str) = ("NETFILTER_DROP", "nf_hook_slow+0x9e");

fn snap(secs: u64, counts: &[((&str, &str), u64)], overflow: u64) -> Snapshot {
    let drops: Vec<DropCount> = counts
        .iter()
        .map(|&((r, l), n)| DropCount {
            key: key(r, l),
            count: n,
        })
        .collect();
    let frames = |v: &[&str]| -> Arc<[Arc<str>]> { v.iter().map(|f| Arc::from(*f)).collect() };
    let stacks = vec![
        StackCount {
            key: key(UDP.0, UDP.1),
            frames: frames(&["entry_SYSCALL_64", "ip_rcv", "__udp4_lib_rcv"]),
            weight: 900,
            samples: 9,
        },
        StackCount {
            key: key(TCP.0, TCP.1),
            frames: frames(&["entry_SYSCALL_64", "ip_rcv", "tcp_v4_rcv"]),
            weight: 100,
            samples: 1,
        },
    ];
    let mut s = Snapshot {
        stacks,
        ..crate::fixtures::snap(secs, drops, overflow)
    };
    s.health.poll_interval_ms = 250;
    s.health.keys_used = counts.len() as u64;
    s.health.keys_capacity = 4096;
    s
}

fn info() -> SessionInfo {
    SessionInfo {
        host: "testhost".into(),
        kernel: "6.8.0-test".into(),
        started_unix_ms: 0,
        probe: "tp_btf/kfree_skb".into(),
    }
}

fn state(size: (u16, u16)) -> State {
    let mut s = State::new(info(), None, size);
    let t0 = Instant::now();
    feed(&mut s, snap(1, &[(UDP, 1000), (TCP, 10), (NFT, 5)], 0), t0);
    feed(
        &mut s,
        snap(2, &[(UDP, 1_234_000), (TCP, 30), (NFT, 505)], 0),
        t0 + Duration::from_secs(1),
    );
    s
}

fn feed(s: &mut State, snap: Snapshot, at: Instant) {
    assert_eq!(update(s, Msg::Snapshot(Box::new(snap), at)), None);
}

fn press(s: &mut State, code: KeyCode) -> Option<Effect> {
    update(s, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn screen(s: &State) -> String {
    let (w, h) = s.size;
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    t.draw(|f| view::render(f, s)).expect("draw");
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        for x in 0..w {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

fn selected_name(s: &State) -> String {
    s.selected
        .as_ref()
        .map(|k| k.location.to_string())
        .unwrap_or_default()
}
