//! Drop-reason names read from the running kernel: BTF first, the tracepoint format as fallback.
use std::{collections::BTreeMap, path::Path, sync::Arc};

use anyhow::{Context as _, bail};
use btf_rs::{Btf, Type};
use dropscope_common::reason::SUBSYS_SHIFT;

use crate::vocab::dims::Reason;

/// Where the reason table came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonSource {
    /// `enum skb_drop_reason` (and subsystem enums) in kernel BTF.
    Btf,
    /// The `__print_symbolic` list of the `skb:kfree_skb` tracepoint format.
    TracepointFormat,
}

/// The running kernel's drop reasons: value → name (without the `SKB_DROP_REASON_` prefix).
#[derive(Clone, Debug)]
pub struct ReasonTable {
    names: BTreeMap<u32, Arc<str>>,
    /// Where the names came from.
    pub source: ReasonSource,
}

const PREFIX: &str = "SKB_DROP_REASON_";

impl ReasonTable {
    /// Reads the table of the running kernel: BTF, else the tracepoint format file.
    ///
    /// A kernel without drop reasons (before 5.17) fails with [`NoDropReasons`] naming it.
    pub fn from_running_kernel() -> anyhow::Result<Self> {
        let btf = Path::new(super::btf::KERNEL_BTF);
        let result = match Self::from_btf_file(btf) {
            Ok(t) => Ok(t),
            Err(btf_err) if btf_err.is::<NoDropReasons>() => Err(btf_err),
            Err(btf_err) => super::tracefs::kfree_skb_format()
                .with_context(|| format!("no drop reasons in BTF ({btf_err:#})"))
                .and_then(|format| Self::from_tracepoint_format(&format)),
        };
        result.map_err(|e| match e.downcast::<NoDropReasons>() {
            Ok(_) => anyhow::Error::new(NoDropReasons(format!("Linux {}", kernel_release()))),
            Err(e) => e,
        })
    }

    /// Reads `enum skb_drop_reason` and any other `*_drop_reason` enum (subsystem reasons,
    /// whose values carry the subsystem in the high 16 bits) from a BTF file (read with a size
    /// limit; an unreadable, empty or non-BTF file is an error).
    pub fn from_btf_file(path: &Path) -> anyhow::Result<Self> {
        let bytes = super::btf::read(path)?;
        Self::from_btf_bytes(&bytes).map_err(|e| match e.downcast::<NoDropReasons>() {
            Ok(_) => anyhow::Error::new(NoDropReasons(path.display().to_string())),
            Err(e) => e.context(format!("reading the drop reasons of {}", path.display())),
        })
    }

    /// Like [`from_btf_file`](Self::from_btf_file), from the bytes of a BTF blob.
    pub fn from_btf_bytes(bytes: &[u8]) -> anyhow::Result<Self> {
        let btf = Btf::from_bytes(bytes).context("parsing BTF")?;
        let mut names = BTreeMap::new();
        let types = btf
            .resolve_types_by_name("skb_drop_reason")
            .map_err(|_| NoDropReasons("this BTF".into()))?;
        for ty in types {
            if let Type::Enum(e) = ty {
                for m in &e.members {
                    let name = btf.resolve_name(m)?;
                    // Bookkeeping values, not reasons.
                    if !name.ends_with("_MAX") && !name.ends_with("_MASK") {
                        names.insert(m.val(), clean(&name));
                    }
                }
            }
        }
        if names.is_empty() {
            // No such enum (btf-rs finds none without failing): a kernel before 5.17.
            return Err(NoDropReasons("this BTF".into()).into());
        }
        // Subsystem reasons (mac80211, openvswitch, ...) live in enums of their own.
        let mut types = btf.type_iter();
        while let Ok(Some(ty)) = fallible_next(&mut types) {
            if let Type::Enum(e) = ty {
                let Ok(enum_name) = btf.resolve_name(&e) else {
                    continue;
                };
                if enum_name == "skb_drop_reason" || !enum_name.ends_with("drop_reason") {
                    continue;
                }
                for m in &e.members {
                    if m.val() >> SUBSYS_SHIFT != 0 {
                        let name = btf.resolve_name(m)?;
                        names.entry(m.val()).or_insert_with(|| clean(&name));
                    }
                }
            }
        }
        Ok(Self {
            names,
            source: ReasonSource::Btf,
        })
    }

    /// Parses the `__print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, ...)` list of a
    /// tracepoint format file.
    pub fn from_tracepoint_format(format: &str) -> anyhow::Result<Self> {
        if super::tracefs::field_offset(format, "reason").is_none() {
            return Err(NoDropReasons("this kernel".into()).into());
        }
        let start = format
            .find("__print_symbolic(REC->reason")
            .context("the kfree_skb tracepoint format lists no drop reasons")?;
        let mut names = BTreeMap::new();
        let mut rest = &format[start..];
        while let Some(open) = rest.find('{') {
            rest = &rest[open + 1..];
            let Some(close) = rest.find('}') else { break };
            let pair = &rest[..close];
            rest = &rest[close + 1..];
            let Some((num, name)) = pair.split_once(',') else {
                continue;
            };
            let name = name.trim().trim_matches('"');
            if let Some(v) = parse_int(num.trim()) {
                names.insert(v, clean(name));
            }
        }
        if names.is_empty() {
            bail!("could not parse the drop reasons of the kfree_skb tracepoint format");
        }
        Ok(Self {
            names,
            source: ReasonSource::TracepointFormat,
        })
    }

    /// The value of a reason by name (with or without the `SKB_DROP_REASON_` prefix).
    pub fn value_of(&self, name: &str) -> Option<u32> {
        let name = name.strip_prefix(PREFIX).unwrap_or(name);
        let name = name.strip_prefix("SKB_").unwrap_or(name);
        self.names
            .iter()
            .find(|(_, n)| n.as_ref() == name)
            .map(|(v, _)| *v)
    }

    /// The reason for a value; unknown values are named `UNKNOWN(n)`.
    pub fn reason(&self, code: u32) -> Reason {
        let name = self
            .names
            .get(&code)
            .cloned()
            .unwrap_or_else(|| format!("UNKNOWN({code})").into());
        Reason { code, name }
    }

    /// All known reasons, by value.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        self.names.iter().map(|(v, n)| (*v, n.as_ref()))
    }

    /// The reasons that are not drops, as the value all of them are below: `NOT_DROPPED_YET`
    /// (5.18+, 0) and `CONSUMED` (6.3+, 1), the enum's first values; so 2, 1 on a kernel with
    /// no `CONSUMED` (6.1) and 0 on one with neither (5.17), where every reason the kernel has
    /// counts as a drop. A kernel whose non-drop values are elsewhere is refused: the probe
    /// tests them with one compare.
    pub fn non_drop_below(&self) -> anyhow::Result<u32> {
        let not_dropped = self.value_of("NOT_DROPPED_YET");
        let consumed = self.value_of("CONSUMED");
        match (not_dropped, consumed) {
            (None, None) => Ok(0),
            (Some(0), None) => Ok(1),
            (Some(0), Some(1)) => Ok(2),
            (n, c) => {
                let show = |v: Option<u32>| v.map_or("none".to_string(), |v| v.to_string());
                anyhow::bail!(
                    "this kernel's reasons NOT_DROPPED_YET ({}) and CONSUMED ({}) are not the \
                     enum's first values (0 and 1), which dropscope takes them to be",
                    show(n),
                    show(c)
                )
            }
        }
    }
}

/// The kernel (or BTF file) has no drop reasons: `kfree_skb` gained its `reason` argument
/// and `enum skb_drop_reason` in Linux 5.17.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0} has no packet drop reasons (no `enum skb_drop_reason`, no `reason` in kfree_skb): \
     dropscope needs Linux 5.17 or later, built with BTF (CONFIG_DEBUG_INFO_BTF) or tracefs"
)]
pub struct NoDropReasons(pub String);

/// The running kernel's release, e.g. `6.1.0-27-amd64` (`unknown` if unreadable).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `SKB_DROP_REASON_NO_SOCKET` → `NO_SOCKET`; `SKB_CONSUMED` → `CONSUMED`.
fn clean(name: &str) -> Arc<str> {
    let n = name.strip_prefix(PREFIX).unwrap_or(name);
    let n = n.strip_prefix("SKB_").unwrap_or(n);
    Arc::from(n)
}

fn fallible_next(it: &mut btf_rs::TypeIter<'_>) -> btf_rs::Result<Option<Type>> {
    fallible_iterator::FallibleIterator::next(it)
}

fn parse_int(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: &str = r#"name: kfree_skb
ID: 1535
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:void * skbaddr;	offset:8;	size:8;	signed:0;
	field:void * location;	offset:16;	size:8;	signed:0;
	field:unsigned short protocol;	offset:32;	size:2;	signed:0;
	field:enum skb_drop_reason reason;	offset:36;	size:4;	signed:0;

print fmt: "skbaddr=%p rx_sk=%p protocol=%u location=%pS reason: %s", REC->skbaddr, REC->rx_sk, REC->protocol, REC->location, __print_symbolic(REC->reason, { 0, "NOT_DROPPED_YET" }, { 1, "CONSUMED" }, { 2, "NOT_SPECIFIED" }, { 3, "NO_SOCKET" }, { 0x10000, "SUBSYS_THING" })
"#;

    #[test]
    fn parses_the_tracepoint_format_list() {
        let t = ReasonTable::from_tracepoint_format(FORMAT).expect("parse");
        assert_eq!(t.source, ReasonSource::TracepointFormat);
        assert_eq!(&*t.reason(3).name, "NO_SOCKET");
        assert_eq!(&*t.reason(0x10000).name, "SUBSYS_THING");
        assert_eq!(t.non_drop_below().expect("non-drop"), 2);
        assert_eq!(t.iter().count(), 5);
    }

    /// The 6.1 format: no `CONSUMED`, `NOT_SPECIFIED` is 1, reason at offset 28.
    const FORMAT_6_1: &str = r#"format:
	field:void * location;	offset:16;	size:8;	signed:0;
	field:unsigned short protocol;	offset:24;	size:2;	signed:0;
	field:enum skb_drop_reason reason;	offset:28;	size:4;	signed:0;

print fmt: "skbaddr=%p protocol=%u location=%p reason: %s", REC->skbaddr, REC->protocol, REC->location, __print_symbolic(REC->reason, { 0, "NOT_DROPPED_YET" }, { 1, "NOT_SPECIFIED" }, { 2, "NO_SOCKET" })
"#;

    #[test]
    fn a_kernel_without_consumed_still_has_its_non_drop_value() {
        let t = ReasonTable::from_tracepoint_format(FORMAT_6_1).expect("parse");
        assert_eq!(t.non_drop_below().expect("non-drop"), 1);
        assert_eq!(t.value_of("NOT_SPECIFIED"), Some(1));
    }

    #[test]
    fn non_drop_values_elsewhere_than_first_are_refused() {
        let f = FORMAT.replace(
            "{ 1, \"CONSUMED\" }, { 2, \"NOT_SPECIFIED\" }",
            "{ 2, \"CONSUMED\" }, { 1, \"NOT_SPECIFIED\" }",
        );
        let t = ReasonTable::from_tracepoint_format(&f).expect("parse");
        let e = t.non_drop_below().expect_err("CONSUMED is 2");
        assert!(e.to_string().contains("CONSUMED (2)"), "{e}");
    }

    #[test]
    fn a_5_17_kernel_has_no_non_drop_values_at_all() {
        let f = FORMAT_6_1.replace(
            "{ 0, \"NOT_DROPPED_YET\" }, { 1, \"NOT_SPECIFIED\" }, { 2,",
            "{ 0, \"NOT_SPECIFIED\" }, { 1,",
        );
        let t = ReasonTable::from_tracepoint_format(&f).expect("parse");
        assert_eq!(t.value_of("NOT_SPECIFIED"), Some(0));
        assert_eq!(t.non_drop_below().expect("non-drop"), 0);
    }

    #[test]
    fn a_kernel_without_the_reason_field_is_named_as_too_old() {
        let old = "format:\n\tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;\n";
        let err = ReasonTable::from_tracepoint_format(old).expect_err("no reasons");
        assert!(err.is::<NoDropReasons>(), "{err:#}");
        assert!(format!("{err}").contains("5.17"), "{err}");
    }

    #[test]
    fn btf_without_the_enum_is_named_as_too_old() {
        let err = ReasonTable::from_btf_bytes(&crate::probe::btf::tests::tiny_btf())
            .expect_err("no enum");
        assert!(err.is::<NoDropReasons>(), "{err:#}");
    }

    #[test]
    fn unknown_values_are_named_unknown() {
        let t = ReasonTable::from_tracepoint_format(FORMAT).expect("parse");
        assert_eq!(&*t.reason(999).name, "UNKNOWN(999)");
    }

    #[test]
    fn a_format_without_reasons_is_an_error() {
        assert!(ReasonTable::from_tracepoint_format("print fmt: \"x\"").is_err());
    }

    #[test]
    fn names_lose_their_prefixes() {
        assert_eq!(&*clean("SKB_DROP_REASON_NO_SOCKET"), "NO_SOCKET");
        assert_eq!(&*clean("SKB_CONSUMED"), "CONSUMED");
        assert_eq!(&*clean("SKB_NOT_DROPPED_YET"), "NOT_DROPPED_YET");
    }

    #[test]
    fn reads_this_kernels_btf() {
        // The machines this project supports have BTF; see the README's requirements.
        let path = Path::new("/sys/kernel/btf/vmlinux");
        let t = ReasonTable::from_btf_file(path).expect("BTF reasons");
        assert_eq!(t.source, ReasonSource::Btf);
        assert!(t.value_of("NO_SOCKET").is_some());
        assert!(t.value_of("NOT_DROPPED_YET").is_some());
    }
}
