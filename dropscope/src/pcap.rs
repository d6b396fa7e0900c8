//! Sampled packets as a pcapng file (`--pcap`): one raw-IP interface, one enhanced packet block
//! per sampled packet, its first bytes from the network header on. Wireshark and tshark read it.
use std::io::{self, Write};

use crate::model::{KeySamples, Sample};

/// `LINKTYPE_RAW`: packets begin with an IPv4 or IPv6 header.
const LINKTYPE_RAW: u16 = 101;
/// Bytes kept per packet (the probe keeps at most 128).
const SNAPLEN: u32 = 128;

/// Writes every sampled packet of `samples`, oldest first, as pcapng; returns how many.
pub fn write(samples: &[KeySamples], mut out: impl Write) -> io::Result<usize> {
    let mut packets: Vec<&Sample> = samples.iter().flat_map(|k| &k.packets).collect();
    packets.sort_by_key(|p| p.unix_ms);
    // Section header: byte-order magic, version 1.0, section length unknown.
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut out, 0x0A0D_0D0A, &shb)?;
    // Interface description: raw IP, snap length, microsecond timestamps (the default).
    let mut idb = Vec::new();
    idb.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&SNAPLEN.to_le_bytes());
    block(&mut out, 1, &idb)?;
    for p in &packets {
        let data = &p.bytes[..p.bytes.len().min(SNAPLEN as usize)];
        // Original length: the whole packet from its network header, at least what was kept.
        let orig = (p.len as usize).max(data.len()) as u32;
        let micros = p.unix_ms.saturating_mul(1000);
        let mut epb = Vec::with_capacity(20 + data.len() + 3);
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&((micros >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(micros as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&orig.to_le_bytes());
        epb.extend_from_slice(data);
        epb.resize(epb.len().next_multiple_of(4), 0);
        block(&mut out, 6, &epb)?;
    }
    out.flush()?;
    Ok(packets.len())
}

/// One block: type, total length, body (already 4-byte aligned), total length again.
fn block(out: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    out.write_all(&kind.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&total.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DropKey, Reason};

    #[test]
    fn blocks_are_aligned_and_lengths_agree() {
        let key = DropKey {
            reason: Reason {
                code: 3,
                name: "NO_SOCKET".into(),
            },
            location: "f".into(),
            attr: Default::default(),
        };
        let packet = |n: u8, ms| Sample {
            unix_ms: ms,
            len: 29,
            l3proto: 0x0800,
            bytes: vec![0x45; usize::from(n)].into(),
        };
        let samples = [KeySamples {
            key,
            packets: vec![packet(29, 2), packet(3, 1)],
        }];
        let mut out = Vec::new();
        assert_eq!(write(&samples, &mut out).expect("write"), 2);
        // Walk the blocks: each total length is a multiple of 4 and repeated at its end.
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < out.len() {
            let word = |i: usize| u32::from_le_bytes(out[i..i + 4].try_into().expect("4 bytes"));
            let (kind, len) = (word(at), word(at + 4) as usize);
            assert_eq!(len % 4, 0);
            assert_eq!(word(at + len - 4) as usize, len);
            kinds.push(kind);
            at += len;
        }
        assert_eq!(at, out.len());
        assert_eq!(kinds, [0x0A0D_0D0A, 1, 6, 6]);
        // Oldest first: the 3-byte packet (at 1 ms) comes before the 29-byte one.
        assert_eq!(
            u32::from_le_bytes(out[28 + 20 + 20..28 + 20 + 24].try_into().expect("4")),
            3
        );
    }
}
