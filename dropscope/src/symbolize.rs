//! Kernel address symbolization with blazesym: one long-lived symbolizer, cached, batched.
use std::{collections::HashMap, path::PathBuf, sync::Arc};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer as Blaze,
    source::{Kernel, Source},
};

/// Turns kernel addresses into `function+0xoffset [module]`, caching every answer.
pub struct Symbolizer {
    blaze: Blaze,
    source: Source<'static>,
    cache: HashMap<u64, Arc<str>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer over the running kernel's `/proc/kallsyms` (addresses KASLR-adjusted already).
    pub fn new() -> Self {
        let kernel = Kernel {
            kallsyms: blazesym::MaybeDefault::Some(PathBuf::from("/proc/kallsyms")),
            vmlinux: blazesym::MaybeDefault::None,
            ..Default::default()
        };
        Self {
            blaze: Blaze::new(),
            source: Source::Kernel(kernel),
            cache: HashMap::new(),
        }
    }

    /// Loads and indexes the kernel's symbols now, so that the cost (reading all of
    /// /proc/kallsyms) is paid at start-up rather than when the first drops arrive.
    pub fn warm_up(&self) {
        let _ = self
            .blaze
            .symbolize(&self.source, Input::AbsAddr(&[u64::MAX]));
    }

    /// Symbolizes every address not yet cached, in one batch.
    pub fn prefetch(&mut self, addrs: impl IntoIterator<Item = u64>) {
        let mut todo: Vec<u64> = addrs
            .into_iter()
            .filter(|a| !self.cache.contains_key(a))
            .collect();
        if todo.is_empty() {
            return;
        }
        todo.sort_unstable();
        todo.dedup();
        let names: Vec<Arc<str>> = match self.blaze.symbolize(&self.source, Input::AbsAddr(&todo)) {
            Ok(syms) => syms
                .iter()
                .zip(&todo)
                .map(|(s, a)| format_sym(s, *a))
                .collect(),
            Err(_) => todo.iter().map(|a| unknown(*a)).collect(),
        };
        self.cache.extend(todo.into_iter().zip(names));
    }

    /// The name of an address (symbolizing it now if it was not prefetched).
    pub fn name(&mut self, addr: u64) -> Arc<str> {
        if let Some(n) = self.cache.get(&addr) {
            return n.clone();
        }
        self.prefetch([addr]);
        self.cache
            .get(&addr)
            .cloned()
            .unwrap_or_else(|| unknown(addr))
    }

    /// Number of cached addresses.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

fn format_sym(sym: &Symbolized<'_>, addr: u64) -> Arc<str> {
    match sym {
        Symbolized::Sym(s) => {
            let module = s
                .module
                .as_ref()
                .map(|m| m.to_string_lossy())
                .filter(|m| !m.is_empty() && !m.contains("kallsyms") && !m.contains("vmlinux"));
            match module {
                Some(m) => format!("{}+{:#x} [{}]", s.name, s.offset, m).into(),
                None => format!("{}+{:#x}", s.name, s.offset).into(),
            }
        }
        Symbolized::Unknown(_) => unknown(addr),
    }
}

/// An address that no symbol covers. The raw address is not shown (it reveals the KASLR base).
fn unknown(_addr: u64) -> Arc<str> {
    Arc::from("[unknown]")
}
