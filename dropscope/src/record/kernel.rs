//! Kernel frames (format version 4; from version 5 with each namespace's devices by interface
//! index, from version 8 with the namespaces' cookies, from version 10 with their names): a whole reading of the kernel's own counters (growth since the session started),
//! written before the first snapshot frame that carries it. From version 5, kernel delta frames
//! ([`super::kernel_delta`]) may follow one: a seek then applies them from it.
use std::sync::Arc;

use super::format::{Malformed, Reader, put_str, put_uvarint};
use crate::{
    model::KernelReading,
    vocab::{devices::Devices, reading::Growth},
};

/// Largest kernel frame payload, decompressed: a bound on what one reading can make us keep
/// and print.
pub const MAX_KERNEL_FRAME: usize = 1 << 20;
pub(super) use super::format::{MAX_NETNS, each_netns};
/// Longest counter name (`Dev:<interface>:RxDrop`, escaped).
pub(super) const MAX_COUNTER_NAME: usize = 256;
/// Longest device name (escaped).
const MAX_DEVICE_NAME: usize = 256;
/// Longest note about a namespace that could not be read.
pub(super) const MAX_ERROR: usize = 1024;

/// Room in a frame for a reading's notes; the rest is its counters'.
const NOTES_ROOM: usize = 64 << 10;
/// Room for the frame's fixed fields and counts (varints of at most 10 bytes each).
const HEADER_ROOM: usize = 64;

/// The payload of a kernel frame, and whether it holds the whole reading: at most
/// [`MAX_KERNEL_FRAME`] bytes whatever the reading holds. Namespaces that do not fit (beyond
/// [`MAX_NETNS`], or beyond the frame's room) are left out, and a note the frame carries says
/// how many, so a host with very many namespaces or devices never stops a recording. A
/// counter or device whose name no reader takes (longer than [`MAX_COUNTER_NAME`], or not
/// plain text: a reading's names are escaped where they are read, so only another producer's
/// can be) is left out too, and a note says how many and names the first.
pub fn encode(r: &KernelReading) -> (Vec<u8>, bool) {
    let mut whole = true;
    let room = MAX_KERNEL_FRAME
        - HEADER_ROOM
        - NOTES_ROOM
        - 2 * (MAX_ERROR + 4)
        - super::cookies::ROOM
        - super::netns_names::ROOM;
    let (mut blocks, mut used) = (Vec::new(), 0);
    let (mut left_ns, mut left_counters) = (0usize, 0usize);
    // Names left out (counters, devices), and the first of each.
    let (mut odd_counters, mut odd_devices) = ((0usize, None), (0usize, None));
    for (ns, g) in &r.netns {
        let mut b = Vec::new();
        put_uvarint(&mut b, *ns);
        // What the reader would refuse is never written, and is noted.
        let (kept, odd): (Vec<_>, Vec<_>) =
            (g.iter()).partition(|(n, _)| n.len() <= MAX_COUNTER_NAME && plain(n));
        if let Some((first, _)) = odd.first() {
            odd_counters.1.get_or_insert_with(|| first.to_string());
        }
        odd_counters.0 += odd.len();
        whole &= odd.is_empty();
        put_uvarint(&mut b, kept.len() as u64);
        for (name, v) in &kept {
            put_str(&mut b, name);
            put_uvarint(&mut b, **v);
        }
        let all = r.devices.get(ns).map_or(0, |d| d.len());
        // Each name once (a dump racing a rename could give one twice: the first index wins).
        let mut names = std::collections::HashSet::new();
        let devices: Vec<_> = (r.devices.get(ns).into_iter().flatten())
            .filter(|(_, n)| {
                let recordable = n.len() <= MAX_DEVICE_NAME && plain(n);
                if !recordable {
                    odd_devices.0 += 1;
                    odd_devices.1.get_or_insert_with(|| n.to_string());
                }
                recordable && names.insert(n.as_str())
            })
            .collect();
        whole &= devices.len() == all;
        put_uvarint(&mut b, devices.len() as u64);
        for (index, name) in devices {
            put_uvarint(&mut b, u64::from(*index));
            put_str(&mut b, name);
        }
        if blocks.len() == MAX_NETNS || used + b.len() > room {
            left_ns += 1;
            left_counters += kept.len();
            continue;
        }
        used += b.len();
        blocks.push(b);
    }
    // Device lists of namespaces with no counters are not written.
    whole &= r.devices.keys().all(|ns| r.netns.contains_key(ns));
    let mut notes = notes(&r.errors);
    let odd = [(odd_counters, "counters"), (odd_devices, "device names")];
    let odd: Vec<String> = (odd.into_iter())
        .filter_map(|((n, first), what)| Some((n, first?, what)))
        .map(|(n, first, what)| {
            format!(
                "{n} {what} not recorded (e.g. {}): a recording takes names of at most \
                 {MAX_COUNTER_NAME} bytes of plain text",
                crate::sanitize::terminal_cell(&first, 96)
            )
        })
        .collect();
    if !odd.is_empty() {
        notes.push(odd.join("; "));
    }
    let mut names = Vec::new();
    let left_names = super::netns_names::put_whole(&mut names, &r.names);
    if left_names > 0 {
        whole = false;
        notes.push(format!(
            "{left_names} namespaces' names not recorded (a recording takes names of at most \
             {} bytes, within {} KiB): those namespaces are shown by inode",
            super::netns_names::MAX_NAME_BYTES,
            super::netns_names::ROOM >> 10
        ));
    }
    if left_ns > 0 {
        whole = false;
        notes.push(format!(
            "{left_ns} namespaces' counters ({left_counters}) not recorded: a recording's \
             reading holds at most {MAX_NETNS} namespaces and 1 MiB"
        ));
    }
    let mut p = Vec::new();
    put_uvarint(&mut p, r.unix_ms);
    put_uvarint(&mut p, r.initial_netns);
    put_uvarint(&mut p, blocks.len() as u64);
    for b in blocks {
        p.extend_from_slice(&b);
    }
    put_uvarint(&mut p, notes.len() as u64);
    for e in &notes {
        put_str(&mut p, e);
    }
    whole &= super::cookies::put_whole(&mut p, &r.cookies);
    p.extend_from_slice(&names);
    (p, whole)
}

/// A reading's notes as a frame holds them: those of at most [`MAX_ERROR`] bytes, within
/// 64 KiB.
pub(super) fn notes(errors: &[String]) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    let mut used = 0;
    for e in errors.iter().filter(|e| e.len() <= MAX_ERROR) {
        if used + e.len() + 2 > NOTES_ROOM {
            break;
        }
        used += e.len() + 2;
        notes.push(e.clone());
    }
    notes
}

/// Whether a name from a file is shown as it is: no control or format characters (the
/// reader's own names are escaped before they are recorded).
pub(super) fn plain(s: &str) -> bool {
    !s.is_empty() && crate::sanitize::terminal(s) == s
}

/// Decodes a kernel frame's payload of a recording of format `version`, refusing anything the
/// writer would not have written.
pub fn decode(payload: &[u8], version: u16) -> Result<KernelReading, Malformed> {
    if payload.len() > MAX_KERNEL_FRAME {
        return Err(Malformed("a kernel frame beyond 1 MiB"));
    }
    let mut r = Reader::new(payload);
    let unix_ms = r.uvarint()?;
    let initial_netns = r.uvarint()?;
    let mut out = KernelReading {
        unix_ms,
        initial_netns,
        ..Default::default()
    };
    each_netns(&mut r, |r, ns| {
        let mut g = Growth::new();
        for _ in 0..r.count(2)? {
            let name = read_counter_name(r)?;
            let v = r.uvarint()?;
            if g.insert(Arc::from(name), v).is_some() {
                return Err(Malformed("a kernel counter twice in one namespace"));
            }
        }
        if version >= 5 {
            let devices = devices(r)?;
            if !devices.is_empty() {
                out.devices.insert(ns, devices);
            }
        }
        out.netns.insert(ns, g);
        Ok(())
    })?;
    out.errors = read_notes(&mut r)?;
    if version >= 8 {
        out.cookies = super::cookies::read_whole(&mut r)?;
    }
    if version >= 10 {
        out.names = super::netns_names::read_whole(&mut r)?;
    }
    r.finish()?;
    Ok(out)
}

/// A kernel frame's notes (whole or delta). Notes are prose: shown escaped, like every name
/// from a file.
pub(super) fn read_notes(r: &mut Reader) -> Result<Vec<String>, Malformed> {
    let mut notes = Vec::new();
    for _ in 0..r.count(1)? {
        let e = r.str()?;
        if e.len() > MAX_ERROR {
            return Err(Malformed("a kernel frame note too long"));
        }
        notes.push(crate::sanitize::terminal(e).into_owned());
    }
    Ok(notes)
}

/// A kernel frame's counter name (whole or delta): refused unless 1 to 256 bytes of plain text.
pub(super) fn read_counter_name<'a>(r: &mut Reader<'a>) -> Result<&'a str, Malformed> {
    let name = r.str()?;
    if name.len() > MAX_COUNTER_NAME || !plain(name) {
        return Err(Malformed(
            "a kernel counter name that is empty, too long or not plain text",
        ));
    }
    Ok(name)
}

/// A namespace's devices (version 5 on): each interface index and each name at most once.
fn devices(r: &mut Reader) -> Result<Devices, Malformed> {
    let mut devices = Devices::new();
    let mut names = std::collections::HashSet::new();
    for _ in 0..r.count(2)? {
        let index = u32::try_from(r.uvarint()?)
            .map_err(|_| Malformed("an interface index beyond 32 bits"))?;
        let name = r.str()?;
        if name.len() > MAX_DEVICE_NAME || !plain(name) {
            return Err(Malformed(
                "a device name that is empty, too long or not plain text",
            ));
        }
        if !names.insert(name) || devices.insert(index, name.to_owned()).is_some() {
            return Err(Malformed("a device twice in one namespace"));
        }
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::format::VERSION;

    fn reading() -> KernelReading {
        let mut r = KernelReading {
            unix_ms: 1_750_000_000_123,
            initial_netns: 4026531840,
            errors: vec!["namespace 7: gone".into()],
            ..Default::default()
        };
        r.netns
            .entry(4026531840)
            .or_default()
            .insert("Udp:NoPorts".into(), 300);
        r.netns
            .entry(4026532999)
            .or_default()
            .insert("Dev:veth0:RxPackets".into(), 1000);
        r.devices
            .insert(4026532999, [(7, "veth0".to_owned())].into());
        r.cookies = [(4026531840, 1), (4026532999, 4096)].into();
        r.names = [(4026532999, "docker:web".into())].into();
        r
    }

    #[test]
    fn round_trips() {
        let r = reading();
        assert_eq!(decode(&encode(&r).0, VERSION).expect("decodes"), r);
        // Format 9 has no names: a frame written without them reads as one.
        let mut old = r.clone();
        old.names.clear();
        let mut p = encode(&old).0;
        assert_eq!(p.pop(), Some(0), "the empty names section ends the frame");
        assert_eq!(decode(&p, 9).expect("decodes as format 9"), old);
        assert!(decode(&p, VERSION).is_err(), "format 10 has the section");
    }

    #[test]
    fn a_reading_too_large_for_a_frame_is_cut_with_a_note() {
        let mut r = reading();
        for ns in 0..5_000u64 {
            let g = r.netns.entry(10_000 + ns).or_default();
            for c in 0..40 {
                g.insert(format!("Link:veth{c:0>20}:rx_dropped").into(), 1 + c);
            }
        }
        r.errors = vec!["n".repeat(MAX_ERROR); 1_000];
        let p = encode(&r).0;
        assert!(p.len() <= MAX_KERNEL_FRAME, "{}", p.len());
        let back = decode(&p, VERSION).expect("decodes");
        assert!(back.netns.len() > 100 && back.netns.len() < r.netns.len());
        let note = back.errors.last().expect("a note");
        let left = r.netns.len() - back.netns.len();
        assert!(
            note.starts_with(&format!("{left} namespaces' counters (")),
            "{note}"
        );
        // What was kept is as it was read.
        for (ns, g) in &back.netns {
            assert_eq!(Some(g), r.netns.get(ns));
        }
    }

    #[test]
    fn refuses_what_the_writer_never_writes() {
        // A name with a control character: never written, and refused where written.
        let mut r = reading();
        r.netns
            .entry(1)
            .or_default()
            .insert("Dev:\u{1b}[2J:RxDrop".into(), 1);
        let back = decode(&encode(&r).0, VERSION).expect("decodes");
        assert_eq!(back.growth(1, "Dev:\u{1b}[2J:RxDrop"), 0);
        let mut p = Vec::new();
        for v in [1, 1, 1, 5, 1] {
            put_uvarint(&mut p, v);
        }
        put_str(&mut p, "Dev:\u{1b}[2J:RxDrop");
        put_uvarint(&mut p, 1);
        put_uvarint(&mut p, 0);
        assert!(decode(&p, VERSION).is_err());
        // Truncated anywhere: an error, never a panic.
        let p = encode(&reading()).0;
        for n in 0..p.len() {
            assert!(decode(&p[..n], VERSION).is_err(), "{n}");
        }
        // Namespaces out of order.
        let mut p = Vec::new();
        for v in [1, 1, 2, 9, 0, 0, 3, 0, 0, 0] {
            put_uvarint(&mut p, v);
        }
        assert!(decode(&p, VERSION).is_err());
    }

    #[test]
    fn a_name_given_twice_is_written_once() {
        let mut r = reading();
        r.devices.insert(
            4026532999,
            [(7, "veth0".to_owned()), (9, "veth0".to_owned())].into(),
        );
        let (p, whole) = encode(&r);
        assert!(!whole);
        let back = decode(&p, VERSION).expect("what is written decodes");
        assert_eq!(back.devices[&4026532999], [(7, "veth0".to_owned())].into());
    }

    #[test]
    fn devices_are_refused_twice_and_absent_before_version_5() {
        // A version 4 frame: no device lists.
        let mut p = Vec::new();
        for v in [1, 1, 1, 9, 1] {
            put_uvarint(&mut p, v);
        }
        put_str(&mut p, "Link:eth0:rx_dropped");
        put_uvarint(&mut p, 4);
        put_uvarint(&mut p, 0);
        let back = decode(&p, 4).expect("a version 4 frame decodes");
        assert_eq!(back.growth(9, "Link:eth0:rx_dropped"), 4);
        assert!(back.devices.is_empty());
        assert!(decode(&p, 5).is_err(), "a version 5 frame has device lists");
        // An index or a name twice, an index beyond 32 bits.
        for (a, b) in [
            ((3, "a"), (3, "b")),
            ((3, "a"), (4, "a")),
            ((1 << 32, "a"), (4, "b")),
        ] {
            let mut p = Vec::new();
            for v in [1, 1, 1, 9, 0, 2] {
                put_uvarint(&mut p, v);
            }
            for (i, n) in [a, b] {
                put_uvarint(&mut p, i);
                put_str(&mut p, n);
            }
            put_uvarint(&mut p, 0);
            assert!(decode(&p, 5).is_err(), "{a:?} {b:?}");
        }
    }
}
