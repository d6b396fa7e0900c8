//! Frames as function names: `function+0xoffset [module]` becomes `function [module]`, so one
//! function is one tower of a flamegraph rather than one per call site.
use std::{borrow::Cow, sync::Arc};

use crate::model::snapshot::StackCount;

/// `frame` without its `+0x…` offset (and a `/0x…` size after it), module kept.
pub fn function_name(frame: &str) -> Cow<'_, str> {
    let Some(at) = frame.rfind("+0x") else {
        return Cow::Borrowed(frame);
    };
    let rest = &frame[at + 3..];
    let hex = rest
        .find(|c: char| !c.is_ascii_hexdigit() && c != '/' && c != 'x')
        .unwrap_or(rest.len());
    let digits = &rest[..hex];
    let well_formed = !digits.is_empty()
        && digits.split('/').enumerate().all(|(i, part)| {
            let part = if i == 0 {
                Some(part)
            } else {
                part.strip_prefix("0x")
            };
            part.is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit()))
        });
    let after = &rest[hex..];
    if !well_formed || !(after.is_empty() || after.starts_with(' ')) {
        return Cow::Borrowed(frame);
    }
    Cow::Owned(format!("{}{after}", &frame[..at]))
}

/// `stacks` with every frame and drop location reduced to its function name; stacks that
/// become identical are merged when folded.
pub fn without_offsets(stacks: &[StackCount]) -> Vec<StackCount> {
    stacks
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if let Cow::Owned(loc) = function_name(&s.key.location) {
                s.key.location = loc.into();
            }
            s.frames = s
                .frames
                .iter()
                .map(|f| match function_name(f) {
                    Cow::Borrowed(_) => Arc::clone(f),
                    Cow::Owned(name) => Arc::from(name),
                })
                .collect();
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_go_modules_stay() {
        assert_eq!(
            function_name("__udp4_lib_rcv+0x5d [kernel]"),
            "__udp4_lib_rcv [kernel]"
        );
        assert_eq!(function_name("ip_rcv+0x4f"), "ip_rcv");
        assert_eq!(
            function_name("nf_hook_slow+0xa2/0x100 [nf]"),
            "nf_hook_slow [nf]"
        );
        // Not an offset: left as is.
        assert_eq!(function_name("a+0xzz"), "a+0xzz");
        assert_eq!(function_name("a+0x"), "a+0x");
        assert_eq!(function_name("plain"), "plain");
        assert_eq!(function_name("x+0x1y"), "x+0x1y");
    }

    #[test]
    fn call_sites_of_one_function_fold_into_one_line() {
        let stacks = super::super::synthetic::synthetic_stacks(40);
        let names = without_offsets(&stacks);
        let folded = crate::flamegraph::folded(&names);
        assert!(!folded.contains("+0x"), "{folded}");
        assert!(crate::flamegraph::folded(&stacks).contains("+0x"));
        assert!(folded.lines().count() < crate::flamegraph::folded(&stacks).lines().count());
    }
}
