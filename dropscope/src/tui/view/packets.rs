//! The sampled packets of one row: when, who to whom, protocol, length and TCP flags.
use ratatui::{
    Frame,
    layout::Rect,
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
};

use crate::{model::Sample, model::group::protocol_name, sanitize, vocab::packet};

/// Rows the packet list wants for `packets`: title and heading, one per packet (one line
/// saying there are none when empty).
pub fn height(packets: &[Sample]) -> u16 {
    2 + packets.len().max(1) as u16
}

/// `HH:MM:SS.mmm` (UTC) of a Unix time in milliseconds.
fn time_of_day(unix_ms: u64) -> String {
    let s = unix_ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600 % 24,
        s / 60 % 60,
        s % 60,
        unix_ms % 1000
    )
}

/// `addr:port`, `[v6]:port`, or the bare address when there is no port.
fn endpoint(addr: Option<std::net::IpAddr>, port: Option<u16>) -> String {
    match (addr, port) {
        (Some(a), Some(p)) => std::net::SocketAddr::new(a, p).to_string(),
        (Some(a), None) => a.to_string(),
        (None, _) => "?".into(),
    }
}

/// One packet's line: time, src:sport → dst:dport, protocol, length, TCP flags.
pub fn line_of(p: &Sample) -> String {
    let h = p.headers();
    let proto = match h.protocol {
        Some(n) => protocol_name(n),
        None => format!("l3 {:#06x}", p.l3proto),
    };
    let flags = h.tcp_flags.map(packet::tcp_flag_names).unwrap_or_default();
    let text = format!(
        "{}  {:>21} → {:<21}  {:<6} {:>5}  {}",
        time_of_day(p.unix_ms),
        endpoint(h.src, h.sport),
        endpoint(h.dst, h.dport),
        proto,
        p.len,
        flags
    );
    sanitize::terminal(&text).into_owned()
}

/// Draws the packet list into `area`.
pub fn render(frame: &mut Frame<'_>, area: Rect, packets: &[Sample]) {
    let block = Block::new().borders(Borders::TOP).title(Line::from(vec![
        Span::styled(
            " sampled packets ",
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            " the first {} dropped of this row (time UTC) ",
            packet::PER_KEY
        )),
    ]));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut lines = vec![Line::styled(
        format!(
            "{:<12}  {:>21}   {:<21}  {:<6} {:>5}  FLAGS",
            "TIME", "SOURCE", "DESTINATION", "PROTO", "LEN"
        ),
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    )];
    if packets.is_empty() {
        lines.push(Line::styled(
            "no packets sampled for this row (none kept yet, or a recording without them)",
            Style::new().fg(Color::DarkGray),
        ));
    }
    lines.extend(packets.iter().map(|p| Line::raw(line_of(p))));
    frame.render_widget(Paragraph::new(lines), inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_packet_reads_as_one_line() {
        let mut b = vec![
            0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        b.extend_from_slice(&[0x30, 0x39, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x12]);
        let p = Sample {
            unix_ms: 3_600_000 + 61_005,
            len: 40,
            l3proto: 0x0800,
            bytes: b.into(),
        };
        let line = line_of(&p);
        assert!(line.starts_with("01:01:01.005"), "{line}");
        assert!(line.contains("10.0.0.1:12345 → 10.0.0.2:80"), "{line}");
        assert!(line.contains("tcp") && line.contains("SYN,ACK"), "{line}");
        assert_eq!(time_of_day(86_400_000), "00:00:00.000");
    }
}
