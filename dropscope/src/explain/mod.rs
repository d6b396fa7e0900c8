//! The reason guide: what each drop reason means, its usual causes and what to check, kept as
//! data in `guide.toml` (one entry per reason, plus families of subsystem reasons by prefix).
use std::{fmt::Write as _, sync::OnceLock};

use serde::Deserialize;

use dropscope_common::reason::SUBSYS_SHIFT;

pub mod fill;

/// The guide's source, reviewed and extended as plain data.
const GUIDE_TOML: &str = include_str!("guide.toml");

/// One entry of the guide.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The reason name as dropscope shows it (no `SKB_DROP_REASON_` prefix), or, for a family,
    /// the common prefix of its names.
    pub name: String,
    /// One line: what the drop means.
    pub summary: String,
    /// One paragraph: the explanation and the usual causes.
    pub text: String,
    /// What to check or run, one item each (commands, sysctls, socket options).
    #[serde(default)]
    pub check: Vec<String>,
}

/// The parsed guide file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuideFile {
    reason: Vec<Entry>,
    #[serde(default)]
    family: Vec<Entry>,
    #[serde(default)]
    counter: Vec<Entry>,
}

/// The reason guide.
#[derive(Debug)]
pub struct Guide {
    reasons: Vec<Entry>,
    families: Vec<Entry>,
    counters: Vec<Entry>,
}

/// How a name was found in the guide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// An entry of its own.
    Exact,
    /// The entry of its family (a subsystem's common prefix).
    Family,
    /// Not in the guide: a generic text says so.
    Generic,
}

/// What the guide says about one reason name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation<'a> {
    /// The name asked about (normalized).
    pub name: String,
    /// How it was found.
    pub found: Match,
    /// One line.
    pub summary: String,
    /// One paragraph.
    pub text: String,
    /// What to check or run.
    pub check: &'a [String],
}

/// Upper case without `skb_drop_reason`'s prefixes, which dropscope does not show; control
/// characters escaped (a name may come from a recording or the command line).
fn normalize(name: &str) -> String {
    crate::model::group::reason_name(name)
        .escape_debug()
        .to_string()
}

impl Guide {
    /// Parses a guide file.
    pub fn parse(text: &str) -> Result<Self, toml::de::Error> {
        let f: GuideFile = toml::from_str(text)?;
        Ok(Self {
            reasons: f.reason,
            families: f.family,
            counters: f.counter,
        })
    }

    /// The guide built into dropscope.
    pub fn builtin() -> &'static Guide {
        static GUIDE: OnceLock<Guide> = OnceLock::new();
        GUIDE.get_or_init(|| {
            // The file is part of the binary; a unit test parses it.
            Guide::parse(GUIDE_TOML).expect("the built-in reason guide parses")
        })
    }

    /// Every entry of its own, in file order.
    pub fn reasons(&self) -> &[Entry] {
        &self.reasons
    }

    /// Every family entry, in file order.
    pub fn families(&self) -> &[Entry] {
        &self.families
    }

    /// Every layer counter entry, in file order.
    pub fn counters(&self) -> &[Entry] {
        &self.counters
    }

    /// The entry of a layer counter: by its name in a reading (`Link:eth0:rx_dropped`,
    /// `Qdisc:eth0:tbf 1::drops`) or its pattern (`Link:*:rx_dropped`).
    pub fn counter(&self, name: &str) -> Option<&Entry> {
        let key = crate::ledger::layers::classify(name).map_or(name, |c| c.guide);
        self.counters.iter().find(|e| e.name == key)
    }

    /// What the guide says about `name` (with or without the `SKB_DROP_REASON_` prefix, any
    /// case), or about a kernel counter (`TcpExt:ListenDrops`, a counter-only row's reason):
    /// where the kernel counts it, with the checks of the drop reasons of the same packets.
    pub fn explain(&self, name: &str) -> Explanation<'_> {
        if let Some(m) = crate::ledger::map::lookup(name.trim()) {
            return self.explain_counter(name.trim(), m);
        }
        let name = normalize(name);
        if let Some(e) = self.reasons.iter().find(|e| e.name == name) {
            return Explanation {
                found: Match::Exact,
                summary: e.summary.clone(),
                text: e.text.clone(),
                check: &e.check,
                name,
            };
        }
        if let Some(e) = self
            .families
            .iter()
            .filter(|e| name.starts_with(&e.name))
            .max_by_key(|e| e.name.len())
        {
            return Explanation {
                found: Match::Family,
                summary: e.summary.clone(),
                text: e.text.clone(),
                check: &e.check,
                name,
            };
        }
        // A program's verdict row (`XDP_DROP`, `TC_SHOT`) is explained by its counter's entry.
        if let Some(e) = crate::model::programs::guide_entry(&name)
            .and_then(|c| self.counters.iter().find(|e| e.name == c))
        {
            return Explanation {
                found: Match::Exact,
                summary: e.summary.clone(),
                text: e.text.clone(),
                check: &e.check,
                name,
            };
        }
        Explanation {
            found: Match::Generic,
            summary: "not in dropscope's reason guide".into(),
            text: generic_text(&name),
            check: &[],
            name,
        }
    }

    /// A kernel counter of [`crate::ledger::map`] explained as a row's reason.
    fn explain_counter(&self, name: &str, m: &crate::ledger::map::CounterMap) -> Explanation<'_> {
        let mut text = format!("A kernel counter, counted in {}. ", m.source);
        text.push_str(if m.reasons.is_empty() {
            "The kernel frees these packets without calling them drops (consume_skb), so the \
             probe never sees them: only this counter does."
        } else {
            "These are the drops it counted that the probe did not see as drops of its \
             reasons; the checks are those of the same packets' reasons."
        });
        let reasons = m.reasons.iter().map(|r| reason_name_of(r));
        let check = (reasons.clone())
            .find_map(|r| self.reasons.iter().find(|e| e.name == r))
            .map_or(&[][..], |e| &e.check);
        let of = reasons.collect::<Vec<_>>().join(", ");
        Explanation {
            found: Match::Exact,
            summary: if of.is_empty() {
                "drops only a kernel counter saw (counter only)".into()
            } else {
                format!("drops only a kernel counter saw (counter only; as drops: {of})")
            },
            text,
            check,
            name: name.escape_debug().to_string(),
        }
    }

    /// The one-paragraph hint for a reason (the JSON report's `hint`).
    pub fn hint(&self, name: &str) -> String {
        self.explain(name).text
    }

    /// The one-line summary for a reason (`dropscope reasons`).
    pub fn summary(&self, name: &str) -> String {
        self.explain(name).summary
    }
}

/// The text for a name the guide does not know.
fn generic_text(name: &str) -> String {
    let subsys = name
        .strip_prefix("UNKNOWN(")
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|v| v.parse::<u32>().ok())
        .map(|v| v >> SUBSYS_SHIFT);
    let mut t =
        format!("dropscope's reason guide has no entry for {name}, so this is generic advice. ");
    match subsys {
        Some(s) if s != 0 => {
            let _ = write!(
                t,
                "The value carries subsystem {s} in its high 16 bits: a subsystem reason from a \
                 module (mac80211, openvswitch, ...) whose names this kernel's BTF does not list; \
                 loading the module's BTF (or the module) names it. "
            );
        }
        Some(_) => t.push_str(
            "The kernel reported a value its reason table does not name (a newer kernel than \
             the table, or a corrupt recording). ",
        ),
        None => t.push_str(
            "Look the name up in the kernel's include/net/dropreason-core.h (or the subsystem's \
             drop.h), whose comment says what it means. ",
        ),
    }
    t.push_str(
        "Open the row's stacks (Enter) to see which kernel path drops, and compare with the \
         kernel's own counters (`nstat -az`, `ip -s link`).",
    );
    t
}

/// The whole entry as text, for `dropscope explain NAME`; `counters` are the kernel counters
/// that count drops of this reason (see [`crate::kcounters`]).
pub fn render(e: &Explanation<'_>, counters: &[&str]) -> String {
    let mut out = format!("{}: {}\n\n", e.name, e.summary);
    out.push_str(&wrap(&e.text, 78));
    out.push('\n');
    if e.found == Match::Family {
        out.push_str("\n(from the guide's entry for its family of subsystem reasons)\n");
    }
    if !e.check.is_empty() {
        out.push_str("\nWhat to check:\n");
        for c in e.check {
            let _ = writeln!(out, "  - {c}");
        }
    }
    if !counters.is_empty() {
        let _ = writeln!(
            out,
            "\nKernel counters that count these drops: {}",
            counters.join(", ")
        );
    }
    out
}

/// A layer counter's entry as text, for `dropscope explain COUNTER`.
pub fn render_counter(name: &str, e: &Entry) -> String {
    let mut out = format!("{name}: {}\n\n", e.summary);
    out.push_str(&wrap(&e.text, 78));
    out.push('\n');
    if e.name != name {
        let _ = writeln!(out, "\n(the guide's entry for {})", e.name);
    }
    if !e.check.is_empty() {
        out.push_str("\nWhat to check:\n");
        for c in &e.check {
            let _ = writeln!(out, "  - {c}");
        }
    }
    out
}

/// A kernel counter of the drop ledger (`TcpExt:ListenDrops`, `Udp:NoPorts`, `Dev:eth0:RxDrop`,
/// as the `c` panel and the ledger print them) as text, for `dropscope explain COUNTER`: where
/// the kernel counts it, and the drop reasons of the same packets with what each means (or
/// that the kernel frees them without a drop reason, so only the counter sees them).
pub fn render_kernel_counter(name: &str, m: &crate::ledger::map::CounterMap) -> String {
    let guide = Guide::builtin();
    let scope = match m.scope {
        crate::ledger::map::Scope::Netns => "per network namespace",
        crate::ledger::map::Scope::Global => "for the whole machine",
    };
    let mut out = format!(
        "{name}: a kernel counter ({scope})

"
    );
    let _ = writeln!(out, "{}", wrap(&format!("Counted in {}.", m.source), 78));
    if m.reasons.is_empty() {
        out.push_str(&wrap(
            "The kernel frees these packets without calling them drops (consume_skb), so the \
             probe never sees them: dropscope shows them as unseen drops, from this counter \
             alone.",
            78,
        ));
        out.push('\n');
        return out;
    }
    let reasons: Vec<&str> = m.reasons.iter().map(|r| reason_name_of(r)).collect();
    let _ = writeln!(
        out,
        "\nThe drop reasons of the same packets: {}",
        m.reasons.join(", ")
    );
    for r in reasons {
        let e = guide.explain(r);
        let _ = writeln!(out, "\n{}: {}", e.name, e.summary);
        out.push_str(&wrap(&e.text, 78));
        out.push('\n');
    }
    out
}

/// The reason of a map entry (`NO_SOCKET@__udp4_lib_rcv` → `NO_SOCKET`).
fn reason_name_of(spec: &str) -> &str {
    crate::ledger::map::reason_name(spec)
}

/// Wraps a paragraph at `width` columns (words longer than that stay whole).
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out
}

#[cfg(test)]
mod tests;
