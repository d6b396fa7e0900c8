//! How the probe's [`Health`] is written: in full in keyframes, as changed fields in deltas.
use crate::model::Health;

use super::format::{Malformed, Reader, apply_zigzag, put_uvarint, zigzag_diff};

/// Number of health fields, in their fixed order on disk.
const FIELDS: usize = 13;

/// One health field: a plain count or an optional one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Plain(u64),
    Opt(Option<u64>),
}

fn fields(h: &Health) -> [Field; FIELDS] {
    use Field::{Opt, Plain};
    [
        Plain(h.keys_used),
        Plain(h.keys_capacity),
        Plain(h.stack_samples),
        Plain(h.stack_errors),
        Plain(h.stack_overflow),
        Plain(h.stack_lost),
        Plain(h.sample_period),
        Plain(h.recursion_misses),
        Opt(h.bpf_run_ns),
        Opt(h.bpf_run_cnt),
        Opt(h.self_syscalls),
        Plain(h.self_cpu_us),
        Plain(h.poll_interval_ms),
    ]
}

fn plain(f: Field) -> u64 {
    match f {
        Field::Plain(v) => v,
        Field::Opt(v) => v.unwrap_or(0),
    }
}

fn opt(f: Field) -> Option<u64> {
    match f {
        Field::Plain(v) => Some(v),
        Field::Opt(v) => v,
    }
}

fn health(f: [Field; FIELDS]) -> Health {
    Health {
        keys_used: plain(f[0]),
        keys_capacity: plain(f[1]),
        stack_samples: plain(f[2]),
        stack_errors: plain(f[3]),
        stack_overflow: plain(f[4]),
        stack_lost: plain(f[5]),
        sample_period: plain(f[6]),
        recursion_misses: plain(f[7]),
        bpf_run_ns: opt(f[8]),
        bpf_run_cnt: opt(f[9]),
        self_syscalls: opt(f[10]),
        self_cpu_us: plain(f[11]),
        poll_interval_ms: plain(f[12]),
    }
}

/// Writes every field: plain ones as varints, optional ones as a tag (0 none, 1 some) and value.
pub fn put_full(out: &mut Vec<u8>, h: &Health) {
    for f in fields(h) {
        match f {
            Field::Plain(v) => put_uvarint(out, v),
            Field::Opt(None) => out.push(0),
            Field::Opt(Some(v)) => {
                out.push(1);
                put_uvarint(out, v);
            }
        }
    }
}

/// Reads what [`put_full`] wrote.
pub fn read_full(r: &mut Reader<'_>) -> Result<Health, Malformed> {
    let mut f = fields(&Health::default());
    for field in &mut f {
        *field = match *field {
            Field::Plain(_) => Field::Plain(r.uvarint()?),
            Field::Opt(_) => Field::Opt(match r.byte()? {
                0 => None,
                1 => Some(r.uvarint()?),
                _ => return Err(Malformed("bad optional tag in health")),
            }),
        };
    }
    Ok(health(f))
}

/// Writes a bit mask of the fields that changed, then each changed field: plain ones as a zigzag
/// difference; optional ones as a tag (0 none, 1 some absolute value, 2 some zigzag difference).
pub fn put_delta(out: &mut Vec<u8>, before: &Health, now: &Health) {
    let (a, b) = (fields(before), fields(now));
    let mask = (0..FIELDS)
        .filter(|&i| a[i] != b[i])
        .fold(0u64, |m, i| m | 1 << i);
    put_uvarint(out, mask);
    for i in (0..FIELDS).filter(|&i| mask & 1 << i != 0) {
        match (a[i], b[i]) {
            (Field::Opt(Some(p)), Field::Opt(Some(v))) => {
                out.push(2);
                put_uvarint(out, zigzag_diff(p, v));
            }
            (_, Field::Opt(Some(v))) => {
                out.push(1);
                put_uvarint(out, v);
            }
            (_, Field::Opt(None)) => out.push(0),
            (p, Field::Plain(v)) => put_uvarint(out, zigzag_diff(plain(p), v)),
        }
    }
}

/// Reads what [`put_delta`] wrote, applied to `before`.
pub fn read_delta(r: &mut Reader<'_>, before: &Health) -> Result<Health, Malformed> {
    let mask = r.uvarint()?;
    if mask >> FIELDS != 0 {
        return Err(Malformed("unknown health field"));
    }
    let mut f = fields(before);
    for (i, field) in f.iter_mut().enumerate() {
        if mask & 1 << i == 0 {
            continue;
        }
        *field = match *field {
            Field::Plain(p) => Field::Plain(apply_zigzag(p, r.uvarint()?)),
            Field::Opt(p) => Field::Opt(match (r.byte()?, p) {
                (0, _) => None,
                (1, _) => Some(r.uvarint()?),
                (2, Some(p)) => Some(apply_zigzag(p, r.uvarint()?)),
                _ => return Err(Malformed("bad optional tag in health")),
            }),
        };
    }
    Ok(health(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: u64) -> Health {
        Health {
            keys_used: n,
            keys_capacity: 10240,
            stack_samples: n * 3,
            stack_errors: 1,
            stack_overflow: u64::MAX,
            stack_lost: 0,
            sample_period: 64,
            recursion_misses: 2,
            bpf_run_ns: n.is_multiple_of(2).then_some(n * 1000),
            bpf_run_cnt: Some(u64::MAX - n),
            self_syscalls: None,
            self_cpu_us: n * 7,
            poll_interval_ms: 250,
        }
    }

    #[test]
    fn health_round_trips_in_full_and_as_deltas() {
        let mut prev = Health::default();
        for n in [0, 1, 2, 2, 5, 1 << 40] {
            let h = sample(n);
            let mut full = Vec::new();
            put_full(&mut full, &h);
            let mut r = Reader::new(&full);
            assert_eq!(read_full(&mut r).as_ref(), Ok(&h));
            assert!(r.finish().is_ok());

            let mut d = Vec::new();
            put_delta(&mut d, &prev, &h);
            let mut r = Reader::new(&d);
            assert_eq!(read_delta(&mut r, &prev).as_ref(), Ok(&h));
            assert!(r.finish().is_ok());
            prev = h;
        }
        let mut same = Vec::new();
        put_delta(&mut same, &prev, &prev);
        assert_eq!(same, vec![0]);
    }
}
