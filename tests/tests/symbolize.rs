//! The symbolizer on the real kernel. Needs root: /proc/kallsyms shows zero addresses to other
//! users (run by `cargo xtask test`).
use dropscope::symbolize::Symbolizer;

#[test]
fn symbolizes_a_known_kernel_function() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test needs root (kallsyms addresses are hidden otherwise): run `cargo xtask test`"
    );
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    let addr = kallsyms
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (a, _t, n) = (f.next()?, f.next()?, f.next()?);
            (n == "kfree_skb_reason" || n == "sk_skb_reason_drop")
                .then(|| u64::from_str_radix(a, 16).ok())
                .flatten()
        })
        .expect("a kfree_skb function in kallsyms");
    let mut s = Symbolizer::new();
    s.prefetch([addr + 4, addr + 4]);
    let name = s.name(addr + 4);
    assert!(name.ends_with("+0x4"), "{name}");
    assert!(name.contains("skb"), "{name}");
    assert_eq!(s.cached(), 1);
}
