//! Format version 7: a key's socket (identity in the key, what was found of it written when it
//! changes), its bounds, and recordings of version 6 read as before.
use std::time::Duration;

use crate::record::{
    Recording, encode,
    format::{FILE_HEADER_LEN, Reader},
    socket,
    tests::{decode_all, key, session},
};
use crate::{
    model::{DropCount, DropKey, Snapshot},
    vocab::socket::{About, Found, Holder, MAX_HOLDERS, Socket, Via},
};

fn with_socket(inode: u32, about: About) -> DropKey {
    let mut k = key(6, "SOCKET_RCVBUFF", "udp_queue_rcv_one_skb+0x437");
    k.attr.socket = Some(std::sync::Arc::new(Socket {
        via: Via::Receiving,
        inode,
        about,
    }));
    k
}

fn found(pid: u32, comm: &str) -> About {
    About::Exact(Found {
        holders: vec![Holder {
            pid,
            comm: comm.into(),
        }],
        more_holders: 0,
        protocol: Some("udp".into()),
        local: Some("127.0.0.1:5353".into()),
        rcvbuf: Some(4608),
    })
}

fn snap(i: u64, drops: Vec<DropCount>) -> Snapshot {
    Snapshot {
        elapsed: Duration::from_millis(250 * (i + 1)),
        total: drops.iter().map(|d| d.count).sum(),
        drops,
        ..Default::default()
    }
}

fn about_of(s: &Snapshot, inode: u32) -> About {
    let d = (s.drops.iter())
        .find(|d| d.key.attr.socket.as_ref().is_some_and(|s| s.inode == inode))
        .expect("the socket's row");
    d.key.attr.socket.as_ref().expect("socket").about.clone()
}

/// A socket first unknown, then found, is one key whose description is the one found; a second
/// socket of the same reason and location is a key of its own.
#[test]
fn a_sockets_description_follows_it_and_sockets_are_keys() {
    let story = [
        snap(
            0,
            vec![DropCount {
                key: with_socket(77, About::unknown("not looked up yet")),
                count: 3,
            }],
        ),
        snap(
            1,
            vec![
                DropCount {
                    key: with_socket(77, found(812, "nginx")),
                    count: 9,
                },
                DropCount {
                    key: with_socket(78, About::unknown("no process holds it")),
                    count: 1,
                },
            ],
        ),
    ];
    let bytes = encode(&session(), &story).expect("encode");
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    // As a key's names, its socket's description is an attribute: the one read is the last
    // written, in every frame.
    assert_eq!(about_of(&back[0], 77), found(812, "nginx"));
    assert_eq!(about_of(&back[1], 77), found(812, "nginx"));
    assert_eq!(
        about_of(&back[1], 78),
        About::unknown("no process holds it")
    );
    assert_eq!(back[1].drops.len(), 2);
    assert_eq!(back[1].total, 10);
}

/// A description that keeps changing (a process renaming itself) is written 9 times, then the
/// last written stays: a recording cannot be made to grow by it.
#[test]
fn a_description_is_written_a_bounded_number_of_times() {
    let story: Vec<Snapshot> = (0..40)
        .map(|i| {
            snap(
                i,
                vec![DropCount {
                    key: with_socket(5, found(100, &format!("name{i}"))),
                    count: i + 1,
                }],
            )
        })
        .collect();
    let bytes = encode(&session(), &story).expect("encode");
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    assert_eq!(about_of(&back[8], 5), found(100, "name8"));
    assert_eq!(about_of(&back[39], 5), found(100, "name8"));
}

/// What a hostile file can say of a socket is refused beyond the bounds: too many holders, a
/// description of a key without a socket, an unknown kind of socket.
#[test]
fn hostile_descriptions_are_refused() {
    let strings: Vec<std::sync::Arc<str>> = vec!["x".into()];
    let string = |id: u64| {
        strings
            .get(id as usize)
            .cloned()
            .ok_or(crate::record::format::Malformed("undefined string"))
    };
    let many = About::Exact(Found {
        holders: (0..MAX_HOLDERS as u32 + 1)
            .map(|pid| Holder {
                pid,
                comm: "x".into(),
            })
            .collect(),
        ..Found::default()
    });
    // The writer names at most MAX_HOLDERS and counts the rest.
    let written = socket::encode(&many, |_| 0);
    let mut n = 0;
    let back = socket::decode(&mut Reader::new(&written), string, &mut n).expect("decodes");
    let About::Exact(f) = back else {
        panic!("{back:?}");
    };
    assert_eq!((f.holders.len(), f.more_holders), (MAX_HOLDERS, 1));
    // A file that lists more is refused.
    let mut bytes = vec![1, MAX_HOLDERS as u8 + 1];
    for pid in 0..=MAX_HOLDERS as u8 {
        bytes.extend([pid, 0]);
    }
    bytes.extend([0, 0, 0, 0]);
    assert!(socket::decode(&mut Reader::new(&bytes), string, &mut n).is_err());
    assert!(socket::from_identity(3 << 32 | 5).is_err());
    let mut keys = vec![key(2, "NO_SOCKET", "x")];
    let section = [1, 0, 0, 0];
    let e = socket::read_section(
        &mut Reader::new(&section),
        &mut keys,
        &mut Vec::new(),
        string,
        &mut n,
    );
    assert!(e.is_err(), "a key without a socket has no description");
}

/// A recording of version 6 (no sockets) reads as it did; a socket's bit in it is refused.
#[test]
fn version_6_recordings_read_without_sockets() {
    let plain = vec![DropCount {
        key: key(2, "NO_SOCKET", "__udp4_lib_rcv+0x8a4"),
        count: 7,
    }];
    let mut bytes = encode(&session(), &[snap(0, plain.clone())]).expect("encode");
    bytes[FILE_HEADER_LEN - 2..FILE_HEADER_LEN].copy_from_slice(&6u16.to_le_bytes());
    let back = decode_all(&Recording::from_bytes(&bytes).expect("open"));
    assert_eq!(back[0].drops, plain);

    let sock = vec![DropCount {
        key: with_socket(9, About::unknown("x")),
        count: 7,
    }];
    let mut bytes = encode(&session(), &[snap(0, sock)]).expect("encode");
    bytes[FILE_HEADER_LEN - 2..FILE_HEADER_LEN].copy_from_slice(&6u16.to_le_bytes());
    let r = Recording::from_bytes(&bytes).and_then(|r| r.snapshot_at(Duration::MAX));
    assert!(
        r.is_err(),
        "a socket in a version 6 file is not of that version"
    );
}
