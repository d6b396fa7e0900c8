//! Kernel struct field offsets, read from the running kernel's BTF at load time and passed to the
//! program as globals: aya emits no CO-RE relocations, so this is how one program reads
//! `sk_buff`, `net_device`, `sock` and `net` on every kernel.
use anyhow::{Context as _, bail};
use btf_rs::{Btf, BtfType, Type};
use dropscope_common::Config;

/// Fills the kernel-layout fields of the program's [`Config`] (the byte offsets of the fields
/// it reads to attribute a drop, and whether the hook passes `rx_sk`) from `btf`; an error names
/// the field the kernel lacks.
pub fn fill(btf: &Btf, cfg: &mut Config) -> anyhow::Result<()> {
    let skb = |path: &str| offset(btf, "sk_buff", path);
    cfg.skb_dev = skb("dev")?;
    cfg.skb_sk = skb("sk")?;
    cfg.skb_iif = skb("skb_iif")?;
    cfg.skb_protocol = skb("protocol")?;
    cfg.skb_head = skb("head")?;
    cfg.skb_network_header = skb("network_header")?;
    cfg.skb_transport_header = skb("transport_header")?;
    cfg.skb_len = skb("len")?;
    cfg.skb_data = skb("data")?;
    cfg.skb_data_len = skb("data_len")?;
    cfg.skb_tail = skb("tail")?;
    cfg.dev_ifindex = offset(btf, "net_device", "ifindex")?;
    cfg.dev_name = offset(btf, "net_device", "name")?;
    cfg.dev_net = offset(btf, "net_device", "nd_net.net")?;
    cfg.sk_net = offset(btf, "sock", "__sk_common.skc_net.net")?;
    cfg.net_inum = offset(btf, "net", "ns.inum")?;
    cfg.net_cookie = offset(btf, "net", "net_cookie")?;
    cfg.has_rx_sk = u32::from(kfree_skb_has_rx_sk(btf));
    cfg.sk_state = offset(btf, "sock", "__sk_common.skc_state")?;
    cfg.sk_socket = offset(btf, "sock", "sk_socket")?;
    cfg.socket_file = offset(btf, "socket", "file")?;
    cfg.file_inode = offset(btf, "file", "f_inode")?;
    cfg.inode_ino = offset(btf, "inode", "i_ino")?;
    Ok(())
}

/// Whether `tp_btf/kfree_skb` passes the receiving socket (`rx_sk`, 6.11+): its BTF
/// prototype `btf_trace_kfree_skb` takes a context and four arguments then, three before.
pub fn kfree_skb_has_rx_sk(btf: &Btf) -> bool {
    let Ok(types) = btf.resolve_types_by_name("btf_trace_kfree_skb") else {
        return false;
    };
    types.iter().any(|t| {
        let Some(bt) = t.as_btf_type() else {
            return false;
        };
        let mut ty = btf.resolve_chained_type(bt);
        for _ in 0..8 {
            match ty {
                Ok(Type::FuncProto(ref f)) => return f.parameters.len() >= 5,
                Ok(ref other) => match other.as_btf_type() {
                    Some(b) => ty = btf.resolve_chained_type(b),
                    None => return false,
                },
                Err(_) => return false,
            }
        }
        false
    })
}

/// Byte offset of the member at `path` (dot-separated) in `struct name`, looking through
/// anonymous structs and unions on the way.
pub fn offset(btf: &Btf, name: &str, path: &str) -> anyhow::Result<u32> {
    let mut ty = named_struct(btf, name)?;
    let mut total = 0;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let (bits, member_ty) = find_member(btf, &ty, part)?
            .with_context(|| format!("this kernel's struct {name} has no field {path}"))?;
        if bits % 8 != 0 {
            bail!("struct {name} field {path} is a bit-field");
        }
        total += bits / 8;
        if parts.peek().is_some() {
            ty = resolve(btf, member_ty)?;
        }
    }
    Ok(total)
}

/// The struct named `name` (the first with members, skipping forward declarations).
fn named_struct(btf: &Btf, name: &str) -> anyhow::Result<Type> {
    btf.resolve_types_by_name(name)
        .with_context(|| format!("this kernel's BTF has no struct {name}"))?
        .into_iter()
        .find(|t| matches!(t, Type::Struct(s) if !s.members.is_empty()))
        .with_context(|| format!("this kernel's BTF has no struct {name}"))
}

/// Follows typedefs and qualifiers to the type behind `id`.
fn resolve(btf: &Btf, id: u32) -> anyhow::Result<Type> {
    let mut ty = btf.resolve_type_by_id(id)?;
    for _ in 0..32 {
        match &ty {
            Type::Typedef(_) | Type::Const(_) | Type::Volatile(_) | Type::Restrict(_) => {
                ty = btf.resolve_chained_type(
                    ty.as_btf_type().context("a qualifier without a type")?,
                )?;
            }
            _ => return Ok(ty),
        }
    }
    bail!("BTF type chain too long")
}

/// The bit offset and type id of member `name`, searching anonymous members depth-first.
fn find_member(btf: &Btf, ty: &Type, name: &str) -> anyhow::Result<Option<(u32, u32)>> {
    find_member_depth(btf, ty, name, 0)
}

fn find_member_depth(
    btf: &Btf,
    ty: &Type,
    name: &str,
    depth: u32,
) -> anyhow::Result<Option<(u32, u32)>> {
    let (Type::Struct(s) | Type::Union(s)) = ty else {
        return Ok(None);
    };
    if depth > 8 {
        return Ok(None);
    }
    for m in &s.members {
        let id = m.get_type_id().context("a member without a type")?;
        let member_name = btf.resolve_name(m).unwrap_or_default();
        if member_name == name {
            return Ok(Some((m.bit_offset(), id)));
        }
        if member_name.is_empty() {
            let inner = resolve(btf, id)?;
            if let Some((bits, id)) = find_member_depth(btf, &inner, name, depth + 1)? {
                return Ok(Some((m.bit_offset() + bits, id)));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running kernel's BTF (readable without root); absent on kernels built without BTF.
    fn running() -> Btf {
        Btf::from_file("/sys/kernel/btf/vmlinux").expect("this machine's kernel has BTF")
    }

    #[test]
    fn reads_the_running_kernels_offsets() {
        let mut l = Config::default();
        fill(&running(), &mut l).expect("layout");
        // Fields in one struct are distinct, and sk_buff's small fields lie past its pointers.
        assert_ne!(l.skb_dev, l.skb_sk);
        assert!(
            l.skb_network_header > l.skb_dev && l.skb_len > l.skb_dev,
            "{l:?}"
        );
        assert!(l.dev_ifindex > 0 && l.net_inum > 0, "{l:?}");
        // The cookie is a u64 of its own, aligned, apart from the inode.
        assert!(l.net_cookie > 0 && l.net_cookie % 8 == 0, "{l:?}");
        assert_ne!(l.net_cookie, l.net_inum);
        // The dotted paths add up: nd_net is a struct holding one pointer.
        assert_eq!(
            l.dev_net,
            offset(&running(), "net_device", "nd_net").expect("nd_net")
        );
    }

    #[test]
    fn the_running_kernel_passes_rx_sk_from_6_11() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("release");
        let mut v = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        assert_eq!(
            kfree_skb_has_rx_sk(&running()),
            (major, minor) >= (6, 11),
            "{release}"
        );
    }

    #[test]
    fn a_missing_field_is_named() {
        let e = offset(&running(), "sk_buff", "no_such_field").expect_err("no field");
        assert!(format!("{e:#}").contains("no_such_field"), "{e:#}");
    }
}
