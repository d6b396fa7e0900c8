//! Checks shared by the integration tests.

/// Names of loaded BPF programs that dropscope loads. The kernel frees a program shortly after
/// its last reference goes (after an RCU grace period, slow on a loaded machine), so this
/// waits up to 60 s for them to go before answering.
pub fn dropscope_programs() -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = loaded();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn loaded() -> Vec<String> {
    use dropscope_common::programs as p;
    const OURS: [&str; 6] = [
        p::KFREE_SKB_BTF,
        p::KFREE_SKB_COUNT,
        p::KFREE_SKB_NETDEV,
        p::KFREE_SKB_DEFAULT,
        p::KFREE_SKB_TP,
        p::SYS_ENTER,
    ];
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_string))
        .filter(|n| OURS.contains(&n.as_str()))
        .collect()
}
