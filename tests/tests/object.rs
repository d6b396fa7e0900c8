//! The compiled eBPF object this dropscope embeds, as the probe loads it: these need the eBPF
//! toolchain (a dropscope built without it embeds an empty object), so they live with the
//! tests `cargo xtask test` runs after building it, not with the unit tests of a plain
//! `cargo test`.
use dropscope::probe::{embedded_object, kfunc};

#[test]
fn the_program_types_headers_through_marked_calls_that_are_all_rewritten() {
    let object = embedded_object();
    assert!(
        !object.is_empty(),
        "this dropscope was built without its eBPF program: run `cargo xtask test`, which \
         installs the eBPF toolchain and builds it"
    );
    let (_, marked) = kfunc::patch(object, Some(1)).expect("patch");
    assert!(marked > 0, "the compiled program calls no bpf_rdonly_cast");
    for cast in [Some(1), None] {
        let (patched, _) = kfunc::patch(object, cast).expect("patch");
        let (_, left) = kfunc::patch(patched.bytes(), cast).expect("patch again");
        assert_eq!(
            left, 0,
            "a marked call is left after rewriting for {cast:?}"
        );
    }
}
