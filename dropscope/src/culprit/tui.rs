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

/// The longest WHO cell [`within`] falls back to (a program's or chain's name is its useful
/// minimum; a longer one is cut).
pub const WHO_MIN_MAX: usize = 24;

/// A culprit in one table cell: `rule filter INPUT #2`, `policy ip gate` (exact), `maybe: rule
/// t input #1 +2` (candidates), `?` (unknown), `-` (none).
pub fn cell(culprit: Option<&Culprit>) -> String {
    forms(culprit).swap_remove(0)
}

/// Who, in one cell, from the whole to the shortest: what a narrower cell leaves out first is
/// the least useful (the kind's word, a rule's table, a program's id, a socket's buffer).
fn short(w: &Who) -> Vec<String> {
    match w {
        Who::Rule {
            table,
            chain,
            position,
            ..
        } => vec![
            format!("rule {table} {chain} #{position}"),
            format!("{table} {chain} #{position}"),
            format!("{chain} #{position}"),
        ],
        Who::Policy { table, chain, .. } => vec![
            format!("policy {table} {chain}"),
            format!("policy {chain}"),
            chain.clone(),
        ],
        Who::Program { program, .. } => {
            let named = program.strip_prefix("prog ").unwrap_or(program);
            let name = named.rsplit_once('#').map_or(named, |(n, _)| n);
            vec![program.clone(), named.to_string(), name.to_string()]
        }
        Who::Socket {
            local,
            protocol,
            processes,
            ..
        } => {
            let procs = processes.join(",");
            vec![
                w.socket_text().unwrap_or_default(),
                format!("{procs} {protocol} {local}"),
                if procs.is_empty() {
                    local.clone()
                } else {
                    procs
                },
            ]
        }
        Who::More { count } => vec![format!("+{count}")],
    }
}

/// The cell's forms, the whole first, then shorter ones, the last the shortest useful one.
fn forms(culprit: Option<&Culprit>) -> Vec<String> {
    let Some(c) = culprit else {
        return vec!["-".into()];
    };
    let who = c.who();
    let mut first = who.first().map(short).unwrap_or_default();
    first.dedup();
    if first.is_empty() {
        first.push(String::new());
    }
    let more = match who.len() {
        0 | 1 => String::new(),
        n => format!(" +{}", n - 1),
    };
    match c {
        Culprit::Exact { .. } => first.iter().map(|f| format!("{f}{more}")).collect(),
        // A candidate stays one however short: `maybe: ` first, then a `?` after the name.
        Culprit::Candidates { .. } => (first.iter())
            .map(|f| format!("maybe: {f}{more}"))
            .chain(first.iter().map(|f| format!("{f}?{more}")))
            .collect(),
        Culprit::Unknown { .. } => vec!["?".into()],
    }
}

/// The cell in at most `width` characters: its longest form that fits, else its shortest
/// (which the table then cuts).
pub fn within(culprit: Option<&Culprit>, width: usize) -> String {
    let mut forms = forms(culprit);
    let fits = forms.iter().position(|f| f.chars().count() <= width);
    let i = fits.unwrap_or(forms.len() - 1);
    forms.swap_remove(i)
}

/// The characters of the cell's shortest form: what a narrower WHO column would cut into.
pub fn min_width(culprit: Option<&Culprit>) -> usize {
    forms(culprit).last().map_or(1, |f| f.chars().count())
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
        render(&s)
    }

    /// The screen of `s`, drawn at its size.
    fn render(s: &State) -> String {
        let (w, h) = s.size;
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| view::render(f, s)).expect("draw");
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

    /// A live snapshot of a `TC_INGRESS` row on `veth-web0` whose tc program `dsdrop_ingress`
    /// is a candidate (its verdicts not counted), in a namespace named `web`.
    fn candidate_program() -> Snapshot {
        use crate::culprit::programs::{Attached, TcFilter};
        let mut key = DropKey {
            reason: Reason {
                code: 40,
                name: "TC_INGRESS".into(),
            },
            location: "tcf_classify+0x2a1".into(),
            attr: Default::default(),
        };
        key.attr.netns = Some(9);
        key.attr.netns_name = Some("web".into());
        key.attr.device = Some("veth-web0".into());
        key.attr.protocol = Some("udp".into());
        let mut r = KernelReading {
            attributed: true,
            ..Default::default()
        };
        r.attached.insert(
            9,
            vec![Attached {
                device: "veth-web0".into(),
                hook: "ingress".into(),
                prog: 4242,
                name: "dsdrop_ingress".into(),
                filter: Some(TcFilter {
                    pref: 49152,
                    handle: 1,
                }),
            }],
        );
        Snapshot {
            elapsed: Duration::from_secs(1),
            total: 12_345,
            drops: vec![DropCount { key, count: 12_345 }],
            kernel: Some(Arc::new(r)),
            ..Default::default()
        }
    }

    /// In a 100-column terminal the WHO cell of a candidate program keeps the program's name
    /// (the kind's word and its id go first), never `maybe: p`.
    #[test]
    fn at_100_columns_who_keeps_a_candidate_programs_name() {
        let mut s = State::new(SessionInfo::default(), None, (100, 20));
        update(
            &mut s,
            Msg::Snapshot(Box::new(candidate_program()), Instant::now()),
        );
        let out = render(&s);
        let head = out.lines().find(|l| l.contains("COUNT")).expect("a header");
        assert!(head.contains("WHO"), "{out}");
        let row = (out.lines())
            .find(|l| l.contains("TC_INGRESS"))
            .expect("the row");
        assert!(row.contains("dsdrop_ingress"), "{out}");
        assert!(row.contains("12,345"), "{out}");
    }

    #[test]
    fn a_cell_leaves_out_the_least_useful_parts_first() {
        use super::{cell, min_width, within};
        use crate::culprit::{Culprit, Who};
        let c = Culprit::Candidates {
            who: vec![
                Who::Program {
                    program: "prog dsdrop_ingress#4242".into(),
                    attach: "veth-web0 tc ingress".into(),
                    pref: None,
                    handle: None,
                },
                Who::More { count: 1 },
            ],
            why: "not counted".into(),
        };
        assert_eq!(cell(Some(&c)), "maybe: prog dsdrop_ingress#4242 +1");
        assert_eq!(within(Some(&c), 30), "maybe: dsdrop_ingress#4242 +1");
        assert_eq!(within(Some(&c), 25), "maybe: dsdrop_ingress +1");
        assert_eq!(within(Some(&c), 20), "dsdrop_ingress? +1");
        assert_eq!(min_width(Some(&c)), "dsdrop_ingress? +1".len());
        assert_eq!(
            within(Some(&c), 5),
            "dsdrop_ingress? +1",
            "the shortest, then cut"
        );
        assert_eq!(within(None, 1), "-");
    }

    /// In a replay, what to change runs in the row's namespace as the recording names it
    /// (`ip netns exec web`, as `report --input` fills it), never `nsenter` with a PID to find.
    #[test]
    fn a_replays_e_panel_enters_the_recorded_namespace_by_name() {
        let mut snap = snap(true);
        snap.drops[0].key.attr.netns_name = Some("web".into());
        let mut s = State::new(SessionInfo::default(), None, (160, 40));
        s.replay = Some(crate::source::ReplayStatus::default());
        update(&mut s, Msg::Snapshot(Box::new(snap), Instant::now()));
        update(
            &mut s,
            Msg::Key(KeyEvent::new(KeyCode::Char('e'), KeyModifiers::NONE)),
        );
        let out = render(&s);
        assert!(
            out.contains("`ip netns exec web nft -a list chain ip filter INPUT`"),
            "{out}"
        );
        assert!(!out.contains("nsenter"), "{out}");
    }
}
