//! Text from recordings and from the kernel, made safe for each place it is shown or written.
//!
//! Names (reasons, locations, stack frames, host and kernel names) come from a recording that
//! may have been crafted, so none of them is trusted. Each sink has its own function:
//!
//! - [`terminal`]: no C0/C1 control (so no escape sequence), no bidi override, no format (Cf)
//!   or default-ignorable character (nothing invisible: `NO_SOCK\u{ad}ET` cannot pass for
//!   `NO_SOCKET`); each such character is shown visibly escaped (`\u{1b}`, `\n`, `\u{ad}`).
//! - [`svg`]: the same, and only characters that are valid in XML 1.0 (no U+FFFE, U+FFFF).
//! - [`folded_frame`]: the same, and no `;` (the frame separator) or line break.
//! - [`json`]: JSON text left exact but with C1 controls and bidi/format characters written as
//!   `\uXXXX` escapes, so printing it on a terminal is safe.
//!
//! - [`metric_label`]: a Prometheus label value: the same characters replaced by `?`, bounded.
//! - [`kernel_name`]: a name the kernel gives (a device's), escaped where it is read as
//!   [`terminal`] escapes it, and backslashes doubled, so that it is one name in every sink.
//!
//! [`truncate`] bounds a name's length, marking the cut with `…`. One predicate
//! (`unsafe_on_terminal`) decides for every sink which characters are not shown as they are.
use std::borrow::Cow;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Marker at the end of a name that was cut.
pub const CUT: char = '…';

/// Default_Ignorable_Code_Point, from DerivedCoreProperties.txt of Unicode 16.0: characters
/// that render as nothing (soft hyphen, fillers, variation selectors, tags, ...).
const DEFAULT_IGNORABLE: &[(char, char)] = &[
    ('\u{00AD}', '\u{00AD}'),
    ('\u{034F}', '\u{034F}'),
    ('\u{061C}', '\u{061C}'),
    ('\u{115F}', '\u{1160}'),
    ('\u{17B4}', '\u{17B5}'),
    ('\u{180B}', '\u{180F}'),
    ('\u{200B}', '\u{200F}'),
    ('\u{202A}', '\u{202E}'),
    ('\u{2060}', '\u{206F}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{FE00}', '\u{FE0F}'),
    ('\u{FEFF}', '\u{FEFF}'),
    ('\u{FFA0}', '\u{FFA0}'),
    ('\u{FFF0}', '\u{FFF8}'),
    ('\u{1BCA0}', '\u{1BCA3}'),
    ('\u{1D173}', '\u{1D17A}'),
    ('\u{E0000}', '\u{E0FFF}'),
];

/// Whether `c` is invisible or reorders text: every format character (general category Cf:
/// bidi controls, zero-width characters, soft hyphen, Arabic number signs, ...), every
/// default-ignorable code point (fillers, variation selectors, tags, ...), and the line and
/// paragraph separators.
fn is_format(c: char) -> bool {
    if c.is_ascii() {
        return false;
    }
    matches!(c, '\u{2028}' | '\u{2029}')
        || c.general_category() == GeneralCategory::Format
        || DEFAULT_IGNORABLE
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
}

/// Whether `c` is a Unicode noncharacter (U+FDD0..U+FDEF, and the last two of every plane).
fn is_noncharacter(c: char) -> bool {
    let v = c as u32;
    (0xFDD0..=0xFDEF).contains(&v) || v & 0xFFFE == 0xFFFE
}

/// Whether `c` must not reach a terminal as is (C0, DEL, C1, format characters).
fn unsafe_on_terminal(c: char) -> bool {
    c.is_control() || is_format(c) || is_noncharacter(c)
}

/// Appends a visible escape of `c`: `\n`, `\t`, `\r`, or `\u{hex}`.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        c => out.extend(c.escape_unicode()),
    }
}

/// `s` with every character for which `bad` holds replaced by `replace`; borrowed when clean.
fn map_chars<'a>(
    s: &'a str,
    bad: impl Fn(char) -> bool,
    replace: impl Fn(&mut String, char),
) -> Cow<'a, str> {
    let Some(first) = s.find(&bad) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if bad(c) {
            replace(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Text safe to print on a terminal: controls, bidi and invisible format characters escaped.
pub fn terminal(s: &str) -> Cow<'_, str> {
    map_chars(s, unsafe_on_terminal, push_escaped)
}

/// A name from the kernel (a device, a qdisc's kind, a driver's statistic, a namespace's), as
/// dropscope keeps, records and shows it: [`terminal`]'s escapes, and `\` written `\\` so that
/// no name can pass for another's escape. Escaped once, where it is read: every sink then
/// shows it as it is, and a recording takes it.
pub fn kernel_name(s: &str) -> Cow<'_, str> {
    map_chars(
        s,
        |c| c == '\\' || unsafe_on_terminal(c),
        |out, c| match c {
            '\\' => out.push_str("\\\\"),
            c => push_escaped(out, c),
        },
    )
}

/// Text safe in SVG character data: what [`terminal`] gives, which is also valid XML 1.0
/// (the XML escaping of `<`, `&` and quotes is the SVG writer's job).
pub fn svg(s: &str) -> Cow<'_, str> {
    // Everything XML 1.0 refuses (C0 but tab/LF/CR, U+FFFE/U+FFFF) is a control or a
    // noncharacter, so the terminal rule covers it; tab, LF and CR are escaped too.
    terminal(s)
}

/// Appends `frame` to a folded line: terminal-safe, `;` as `:`, whitespace as one space,
/// trimmed, at most `max_chars` characters (cut with `…`), `[unknown]` when nothing is left.
pub fn folded_frame(out: &mut String, frame: &str, max_chars: usize) {
    let start = out.len();
    let mut chars = 0usize;
    let mut cut = false;
    for c in frame.chars() {
        if chars >= max_chars {
            cut = true;
            break;
        }
        let before = out.len();
        match c {
            ';' => out.push(':'),
            ' ' | '\t' | '\n' | '\r' => {
                if out.len() > start && !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c if unsafe_on_terminal(c) => push_escaped(out, c),
            c if c.is_whitespace() => {
                if out.len() > start && !out.ends_with(' ') {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
        if out.len() > before {
            chars += 1;
        }
    }
    let end = out[start..].trim_end_matches(' ').len() + start;
    out.truncate(end);
    if cut {
        out.push(CUT);
    }
    if out.len() == start {
        out.push_str("[unknown]");
    }
}

/// JSON text with C1 controls, bidi and invisible format characters (which JSON allows raw in
/// strings) written as `\uXXXX` escapes: the same JSON value, safe on a terminal.
///
/// `json` must be the output of a JSON serializer (such characters then only occur in strings).
pub fn json(json: &str) -> Cow<'_, str> {
    // C0 controls in strings are escaped by every JSON serializer; outside strings, LF and
    // spaces are the layout. DEL, C1 and format characters are left raw by serializers.
    let bad = |c: char| (c >= '\u{7f}' && c.is_control()) || is_format(c) || is_noncharacter(c);
    map_chars(json, bad, |out, c| {
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            out.push_str(&format!("\\u{u:04x}"));
        }
    })
}

/// `s` cut to at most `max_chars` characters, the last one replaced by `…` when cut.
pub fn truncate(s: &str, max_chars: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max_chars) {
        None => Cow::Borrowed(s),
        Some(_) if max_chars == 0 => Cow::Borrowed(""),
        Some(_) => {
            let end = s
                .char_indices()
                .nth(max_chars - 1)
                .map_or(s.len(), |(i, _)| i);
            let mut out = String::with_capacity(end + CUT.len_utf8());
            out.push_str(&s[..end]);
            out.push(CUT);
            Cow::Owned(out)
        }
    }
}

/// [`terminal`] then [`truncate`]: a name for one table cell or status line.
///
/// Only the first `max_chars + 1` characters of `s` are read (escaping only lengthens text),
/// so a cell costs the same however long the name.
pub fn terminal_cell(s: &str, max_chars: usize) -> String {
    let head = s
        .char_indices()
        .nth(max_chars.saturating_add(1))
        .map_or(s, |(i, _)| &s[..i]);
    truncate(&terminal(head), max_chars).into_owned()
}

/// A label value for the metrics exporter: every character [`terminal`] escapes replaced by
/// `?` (the exposition escapes `\`, `"` and line feeds itself), cut to at most `max_bytes`
/// bytes on a character boundary with `…`.
pub fn metric_label(value: &str, max_bytes: usize) -> std::sync::Arc<str> {
    let clean = |c: char| if unsafe_on_terminal(c) { '?' } else { c };
    if value.len() <= max_bytes {
        return match map_chars(value, unsafe_on_terminal, |out, _| out.push('?')) {
            Cow::Borrowed(b) => b.into(),
            Cow::Owned(o) => o.into(),
        };
    }
    let keep = max_bytes.saturating_sub(CUT.len_utf8());
    let mut out = String::with_capacity(max_bytes);
    for c in value.chars().map(clean) {
        if out.len() + c.len_utf8() > keep {
            break;
        }
        out.push(c);
    }
    out.push(CUT);
    out.into()
}

/// The invisible characters of a security review, which once reached tables raw.
#[cfg(test)]
pub(crate) const INVISIBLE: &[char] = &[
    '\u{00AD}',
    '\u{0600}',
    '\u{0601}',
    '\u{0602}',
    '\u{0603}',
    '\u{0604}',
    '\u{0605}',
    '\u{06DD}',
    '\u{034F}',
    '\u{115F}',
    '\u{1160}',
    '\u{3164}',
    '\u{FFA0}',
    '\u{180B}',
    '\u{180C}',
    '\u{180D}',
    '\u{180E}',
    '\u{180F}',
    '\u{FE00}',
    '\u{FE0F}',
    '\u{E0100}',
    '\u{E01EF}',
    '\u{E0001}',
    '\u{110BD}',
    '\u{1D173}',
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character that must never reach a terminal raw.
    fn hostile() -> Vec<char> {
        let mut v: Vec<char> = (0u32..0x20)
            .chain(0x7f..0xa0)
            .filter_map(char::from_u32)
            .collect();
        v.extend([
            '\u{202E}', '\u{202A}', '\u{2066}', '\u{2069}', '\u{200F}', '\u{061C}',
        ]);
        v.extend([
            '\u{200B}',
            '\u{2028}',
            '\u{FEFF}',
            '\u{FFFE}',
            '\u{FFFF}',
            '\u{1FFFE}',
        ]);
        v
    }

    #[test]
    fn terminal_escapes_every_control_and_bidi_character_visibly() {
        for c in hostile() {
            let s = format!("a{c}b");
            let t = terminal(&s);
            assert!(!t.contains(c), "{c:?} passed");
            assert!(t.starts_with("a\\") && t.ends_with('b'), "{t}");
        }
        assert_eq!(terminal("\x1b]52;c;aGk=\x07"), "\\u{1b}]52;c;aGk=\\u{7}");
        assert_eq!(terminal("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(terminal("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(terminal("evil\u{202E}txt.exe"), "evil\\u{202e}txt.exe");
    }

    #[test]
    fn every_format_and_default_ignorable_character_is_escaped_in_every_sink() {
        for &c in INVISIBLE {
            let name = format!("NO_SOCK{c}ET");
            let escaped = c.escape_unicode().to_string();
            assert_eq!(terminal(&name), format!("NO_SOCK{escaped}ET"), "{c:?}");
            assert_eq!(svg(&name), format!("NO_SOCK{escaped}ET"), "{c:?}");
            assert!(!terminal_cell(&name, 48).contains(c), "{c:?}");
            let mut folded = String::new();
            folded_frame(&mut folded, &name, 100);
            assert!(!folded.contains(c), "{c:?} in {folded:?}");
            assert!(!metric_label(&name, 64).contains(c), "{c:?}");
            let raw = serde_json::to_string(&name).expect("json");
            let safe = json(&raw);
            assert!(!safe.contains(c), "{c:?} in {safe}");
            let back: String = serde_json::from_str(&safe).expect("still json");
            assert_eq!(back, name);
        }
        // Every Cf character and every default-ignorable one, from the tables themselves.
        let all = (0..=0x10FFFFu32).filter_map(char::from_u32);
        for c in all.filter(|c| {
            c.general_category() == GeneralCategory::Format
                || DEFAULT_IGNORABLE
                    .iter()
                    .any(|&(lo, hi)| (lo..=hi).contains(c))
        }) {
            assert!(unsafe_on_terminal(c), "{c:?}");
        }
        // Visible text is left alone, emoji and combining accents included.
        for s in ["e\u{301}", "漢字", "\u{1F600}", "ŕ", "a-b"] {
            assert!(matches!(terminal(s), Cow::Borrowed(_)), "{s}");
        }
    }

    #[test]
    fn metric_labels_replace_what_a_terminal_escapes_and_are_bounded() {
        assert_eq!(&*metric_label("a\u{1b}[2Jb\r\nc\0", 64), "a?[2Jb??c?");
        assert_eq!(&*metric_label("NO\u{202e}SOCK\u{ad}ET", 64), "NO?SOCK?ET");
        assert_eq!(&*metric_label("plain+0x1 [mod]", 64), "plain+0x1 [mod]");
        let v = metric_label(&"é".repeat(100), 64);
        assert!(v.len() <= 64 && v.ends_with(CUT), "{v}");
    }

    #[test]
    fn clean_text_is_borrowed_unchanged() {
        for s in [
            "__udp4_lib_rcv+0x4bc [kernel]",
            "ünïcode ✓ 漢字",
            "",
            "a\\u{1b}",
        ] {
            assert!(matches!(terminal(s), Cow::Borrowed(b) if b == s));
            assert!(matches!(svg(s), Cow::Borrowed(b) if b == s));
        }
    }

    #[test]
    fn svg_text_is_valid_xml_characters_only() {
        let all: String = hostile().into_iter().collect();
        let s = svg(&all);
        let xml_char = |c: char| matches!(c as u32, 0x9 | 0xA | 0xD | 0x20..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF);
        assert!(s.chars().all(xml_char), "{s}");
        assert!(!s.contains('\u{FFFE}'));
    }

    #[test]
    fn folded_frames_cannot_break_a_line_or_a_stack() {
        let mut out = String::new();
        folded_frame(&mut out, "  a;b\nc\x1b[2J\u{202E} ", 100);
        assert_eq!(out, "a:b c\\u{1b}[2J\\u{202e}");
        let mut out = String::new();
        folded_frame(&mut out, " \t\r\n ", 100);
        assert_eq!(out, "[unknown]");
        let mut out = String::from("R;");
        folded_frame(&mut out, &"x".repeat(1000), 10);
        assert_eq!(out, format!("R;{}…", "x".repeat(10)));
    }

    #[test]
    fn json_keeps_the_value_and_escapes_what_a_terminal_would_obey() {
        let name = "a\u{9b}2J\u{202E}b\u{1F600}";
        let raw = serde_json::to_string_pretty(&[name]).expect("json");
        let safe = json(&raw);
        assert!(
            safe.chars().all(|c| c == '\n' || !unsafe_on_terminal(c)),
            "{safe}"
        );
        let back: Vec<String> = serde_json::from_str(&safe).expect("still json");
        assert_eq!(back, [name]);
    }

    #[test]
    fn truncate_marks_the_cut_and_counts_characters() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abcd", 4), "abcd");
        assert_eq!(truncate("ééééé", 3), "éé…");
        assert_eq!(truncate("abc", 0), "");
        assert_eq!(terminal_cell("\x1b[31mred", 8), "\\u{1b}[…");
    }
}
