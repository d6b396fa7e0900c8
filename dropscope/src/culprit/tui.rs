//! The `e` panel's lines on who dropped the selected row: the culprits, how sure, why, and what
//! to change; every string escaped for the terminal.
use ratatui::{
    style::{Color, Modifier, Style},
    text::{Line, Span},
};

use super::{Culprit, Who};
use crate::sanitize;

/// The most characters of the table's WHO column.
pub const WHO_WIDTH: usize = 44;

/// A culprit in one table cell: `rule filter INPUT #2`, `policy ip gate` (exact), `maybe: rule
/// t input #1 +2` (candidates), `?` (unknown), `-` (none).
pub fn cell(culprit: Option<&Culprit>) -> String {
    let Some(c) = culprit else {
        return "-".into();
    };
    let short = |w: &Who| match w {
        Who::Rule {
            table,
            chain,
            position,
            ..
        } => format!("rule {table} {chain} #{position}"),
        Who::Policy { table, chain, .. } => format!("policy {table} {chain}"),
        Who::Program { program, .. } => program.clone(),
        Who::Socket { .. } => w.socket_text().unwrap_or_default(),
        Who::More { count } => format!("+{count}"),
    };
    let who = c.who();
    let first = who.first().map(short).unwrap_or_default();
    let more = match who.len() {
        0 | 1 => String::new(),
        n => format!(" +{}", n - 1),
    };
    match c {
        Culprit::Exact { .. } => format!("{first}{more}"),
        Culprit::Candidates { .. } => format!("maybe: {first}{more}"),
        Culprit::Unknown { .. } => "?".into(),
    }
}

/// A culprit as a metric label value: [`cell`], empty where there is none (the label is then
/// left out).
pub fn label(culprit: Option<&Culprit>) -> String {
    culprit.map(|c| cell(Some(c))).unwrap_or_default()
}

/// The lines for `culprit` (none where the row has none), its commands filled in for `row`
/// (run in the row's namespace) where given.
pub fn lines(
    culprit: Option<&Culprit>,
    row: Option<&crate::explain::fill::Target<'_>>,
) -> Vec<Line<'static>> {
    let Some(c) = culprit else {
        return Vec::new();
    };
    let t = |s: &str| sanitize::terminal(s).into_owned();
    let color = match c {
        Culprit::Exact { .. } => Color::Green,
        Culprit::Candidates { .. } => Color::Yellow,
        Culprit::Unknown { .. } => Color::DarkGray,
    };
    let mut out = vec![Line::from(vec![
        Span::styled("who: ", Style::new().add_modifier(Modifier::BOLD)),
        Span::styled(c.certainty(), Style::new().fg(color)),
    ])];
    for w in c.who() {
        out.push(Line::raw(format!("  {}", t(&w.to_string()))));
    }
    out.push(Line::styled(
        format!("  because {}", t(c.because())),
        Style::new().fg(Color::DarkGray),
    ));
    let changes = match row {
        Some(row) => c.changes_for(row),
        None => c.changes(),
    };
    for change in changes {
        out.push(Line::raw(format!("  to change: {}", t(&change))));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, Instant},
    };

    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::{Terminal, backend::TestBackend};

    use crate::{
        culprit::ruleset::{Chain, ChainId, Grown, Rule, RulesWindow, Verdict},
        model::{DropCount, DropKey, KernelReading, Reason, SessionInfo, Snapshot},
        tui::{
            state::State,
            update::{Msg, update},
            view,
        },
    };

    /// A live snapshot of one NETFILTER_DROP row whose rule counted all of its drops, the rule
    /// carrying a hostile comment.
    fn snap(attributed: bool) -> Snapshot {
        let mut key = DropKey {
            reason: Reason {
                code: 12,
                name: "NETFILTER_DROP".into(),
            },
            location: "nft_do_chain+0x3e8".into(),
            attr: Default::default(),
        };
        key.attr.netns = Some(9);
        let id = ChainId {
            family: 2,
            table: "filter".into(),
            chain: "INPUT".into(),
        };
        let mut r = KernelReading {
            attributed,
            ..Default::default()
        };
        r.rules.insert(
            9,
            RulesWindow {
                chains: vec![Chain {
                    id: id.clone(),
                    hook: Some("input".into()),
                    priority: Some(0),
                    policy_drop: false,
                }],
                rules: vec![Grown {
                    rule: Rule {
                        id,
                        handle: 4,
                        position: 2,
                        verdict: Verdict::Drop,
                        packets: Some(70),
                        comment: Some("cali:x\u{1b}[2J".into()),
                        exprs: "match counter immediate".into(),
                    },
                    grew: Some(7),
                }],
                whole: true,
                ..Default::default()
            },
        );
        Snapshot {
            elapsed: Duration::from_secs(1),
            total: 7,
            drops: vec![DropCount { key, count: 7 }],
            kernel: Some(Arc::new(r)),
            ..Default::default()
        }
    }

    fn screen_after_e(snap: Snapshot) -> String {
        let mut s = State::new(SessionInfo::default(), None, (160, 40));
        update(&mut s, Msg::Snapshot(Box::new(snap), Instant::now()));
        update(
            &mut s,
            Msg::Key(KeyEvent::new(KeyCode::Char('e'), KeyModifiers::NONE)),
        );
        let (w, h) = s.size;
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| view::render(f, &s)).expect("draw");
        let buf = t.backend().buffer();
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
            .collect()
    }

    #[test]
    fn e_says_who_dropped_the_row_and_what_to_change() {
        let out = screen_after_e(snap(true));
        assert!(out.contains("who: exact"), "{out}");
        assert!(
            out.contains("rule ip filter INPUT (input) handle 4 #2 drop"),
            "{out}"
        );
        assert!(out.contains("[counted 7]"), "{out}");
        assert!(
            out.contains("nft delete rule ip filter INPUT handle 4"),
            "{out}"
        );
        assert!(!out.contains('\u{1b}'), "{out}");
    }

    /// What to change runs where the row's drops are (`ip netns exec NAME`), and a chain's
    /// name is shell-quoted, never pasted raw (a hostile one would run as a command).
    #[test]
    fn what_to_change_runs_in_the_rows_namespace_with_names_quoted() {
        use crate::culprit::{Culprit, Who};
        use crate::explain::fill::{Target, Way};
        let rule = |chain: &str| Culprit::Exact {
            who: vec![Who::Rule {
                family: "inet".into(),
                table: "filter".into(),
                chain: chain.into(),
                hook: Some("input".into()),
                handle: 7,
                position: 1,
                verdict: crate::culprit::ruleset::Verdict::Drop,
                comment: None,
                counted: Some(3),
                exprs: String::new(),
            }],
            how: "counted".into(),
        };
        let row = Target {
            way: Way::Named("web".into()),
            device: Some("lo"),
            port: None,
        };
        let changes = rule("input").changes_for(&row);
        assert!(
            changes[0].contains("`ip netns exec web nft -a list chain inet filter input`"),
            "{changes:?}"
        );
        assert!(
            changes[0].contains("`ip netns exec web nft delete rule inet filter input handle 7`"),
            "{changes:?}"
        );
        let hostile = rule("x; rm -rf ~").changes_for(&row);
        assert!(
            hostile[0].contains("nft -a list chain inet filter 'x; rm -rf ~'`"),
            "{hostile:?}"
        );
        let control = rule("x\u{1b}]0;t\u{7}").changes();
        assert!(
            control[0].contains("chain inet filter NAME`") && !control[0].contains('\u{1b}'),
            "{control:?}"
        );
    }

    /// A clsact filter's program is named with the filter's priority and handle, and what to
    /// change deletes that very filter, in the row's namespace, the device quoted.
    #[test]
    fn a_tc_filter_is_named_by_its_priority_and_handle() {
        use crate::culprit::{Culprit, Who};
        use crate::explain::fill::{Target, Way};
        let c = Culprit::Candidates {
            who: vec![Who::Program {
                program: "prog shoot#42".into(),
                attach: "vethb tc egress (clsact filter)".into(),
                pref: Some(49152),
                handle: Some("0x1".into()),
            }],
            why: "not counted".into(),
        };
        assert!(
            c.line()
                .contains("prog shoot#42 at vethb tc egress (clsact filter) pref 49152 handle 0x1"),
            "{}",
            c.line()
        );
        let row = Target {
            way: Way::Named("web".into()),
            device: Some("vethb"),
            port: None,
        };
        let change = &c.changes_for(&row)[0];
        assert!(
            change.contains(
                "`ip netns exec web tc filter del dev vethb egress pref 49152 handle 0x1 bpf`"
            ),
            "{change}"
        );
    }

    #[test]
    fn the_table_has_a_who_column_where_a_row_has_a_culprit() {
        let out = screen_after_e(snap(true));
        let head = out.lines().find(|l| l.contains("COUNT")).expect("a header");
        assert!(head.contains("WHO"), "{out}");
        assert!(out.contains("rule filter INPUT #2"), "{out}");
    }

    #[test]
    fn a_recorded_row_says_it_was_recorded_before_attribution() {
        let out = screen_after_e(snap(false));
        assert!(out.contains("who: unknown"), "{out}");
        assert!(out.contains("recorded before attribution"), "{out}");
    }
}
