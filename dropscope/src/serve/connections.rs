//! The exporter's connection limits: a cap on open connections in all and per peer, shedding
//! a connection whose last request failed basic auth, else the least recently active one, to
//! make room for a new one (so that a client holding every slot it can cannot lock a scraper
//! out), refusing a peer's new connection while all of its own wait on the server, a write
//! timeout, and the activity clock that shedding reads.
use std::{
    collections::HashMap,
    io,
    net::IpAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll, ready},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::Notify,
    time::Sleep,
};

/// Open connections at most, from all peers together.
pub const MAX_CONNECTIONS: usize = 64;
/// Open connections at most from one peer (one IPv4 address, or one IPv6 /64).
pub const MAX_CONNECTIONS_PER_PEER: usize = 16;
/// A connection must send a complete request head within this long of opening (or of the
/// TLS handshake, or of its previous response), else it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// A write that makes no progress for this long (a client that stopped reading) closes the
/// connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests answered on one connection; the last answer says `Connection: close`.
pub const MAX_REQUESTS_PER_CONNECTION: u32 = 100;
/// A response must be ready within this long.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The limits of one server (the constants above unless a test sets others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most, in all.
    pub max_connections: usize,
    /// Open connections at most per peer.
    pub per_peer: usize,
    /// Time to send a request head (and to finish a TLS handshake).
    pub idle_timeout: Duration,
    /// Time a write may make no progress.
    pub write_timeout: Duration,
    /// Requests answered per connection.
    pub max_requests: u32,
    /// Time to produce a response.
    pub response_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            per_peer: MAX_CONNECTIONS_PER_PEER,
            idle_timeout: IDLE_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            max_requests: MAX_REQUESTS_PER_CONNECTION,
            response_timeout: RESPONSE_TIMEOUT,
        }
    }
}

/// The peer a connection counts against: its IPv4 address, or its IPv6 /64 (one host usually
/// holds a whole /64).
pub fn peer_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// What the registry and a connection share: when it last moved bytes, and its shed signal.
#[derive(Debug)]
pub struct Activity {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last byte read or written.
    last_ms: AtomicU64,
    /// Whether the connection's last request failed basic auth.
    auth_failed: AtomicBool,
    /// Whether its request's password is being verified: the connection waits on the server,
    /// not idles, however long bcrypt takes on a busy machine.
    verifying: AtomicBool,
    /// Whether the server has written to it (an answer, or a TLS handshake).
    written: AtomicBool,
    shed: Notify,
}

impl Activity {
    fn new(epoch: Instant) -> Self {
        let a = Self {
            epoch,
            last_ms: AtomicU64::new(0),
            auth_failed: AtomicBool::new(false),
            verifying: AtomicBool::new(false),
            written: AtomicBool::new(false),
            shed: Notify::new(),
        };
        a.touch();
        a
    }

    /// Notes that bytes moved now.
    pub fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Notes whether the connection's last request failed basic auth.
    pub fn set_auth_failed(&self, failed: bool) {
        self.auth_failed.store(failed, Ordering::Relaxed);
    }

    fn auth_failed(&self) -> bool {
        self.auth_failed.load(Ordering::Relaxed)
    }

    /// Notes whether the connection's request is being verified now.
    pub fn set_verifying(&self, verifying: bool) {
        self.verifying.store(verifying, Ordering::Relaxed);
    }

    fn verifying(&self) -> bool {
        self.verifying.load(Ordering::Relaxed)
    }

    /// Notes that the server wrote to the connection.
    fn wrote(&self) {
        self.written.store(true, Ordering::Relaxed);
    }

    /// Whether the connection waits on the server: its password is being verified, or its
    /// first request is still unread in its socket (`socket`, a duplicate of the connection's
    /// descriptor), nothing written to it yet. A client that opened a connection and asked has
    /// asked, however busy the server is; one that opened and sent nothing has not.
    fn waiting(&self, socket: Option<&std::net::TcpStream>) -> bool {
        if self.auth_failed() {
            return false;
        }
        self.verifying()
            || (!self.written.load(Ordering::Relaxed)
                && socket.is_some_and(|s| s.peek(&mut [0u8]).is_ok_and(|n| n > 0)))
    }

    fn last(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }

    /// Resolves when the registry sheds this connection.
    pub async fn shed(&self) {
        self.shed.notified().await;
    }
}

/// What a request knows of its connection (a request extension): the peer's address and the
/// connection's activity, which basic auth marks.
#[derive(Clone, Debug)]
pub struct ConnectionInfo {
    /// The peer's address.
    pub peer: IpAddr,
    /// The connection's activity.
    pub activity: Arc<Activity>,
}

struct Entry {
    peer: IpAddr,
    activity: Arc<Activity>,
    /// A duplicate of the connection's descriptor, non-blocking, to see whether its request
    /// waits unread (`None` where there is no socket, in tests).
    socket: Option<std::net::TcpStream>,
}

/// The open connections, for the caps and for shedding.
pub struct Registry {
    limits: Limits,
    epoch: Instant,
    conns: Mutex<(u64, HashMap<u64, Entry>)>,
}

/// A connection's place in the registry, given back when dropped.
pub struct Slot {
    registry: Arc<Registry>,
    id: u64,
    activity: Arc<Activity>,
}

impl Slot {
    /// The connection's activity clock and shed signal.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.lock().1.remove(&self.id);
    }
}

impl Registry {
    /// An empty registry enforcing `limits`.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            epoch: Instant::now(),
            conns: Mutex::new((0, HashMap::new())),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<u64, Entry>)> {
        // A panic elsewhere cannot leave the map half-changed: every change is one call.
        self.conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.lock().1.len()
    }

    /// Takes a slot for a new connection from `ip`. At the per-peer cap a connection of this
    /// peer is shed first; at the total cap, any connection whose last request failed basic
    /// auth, else one of the peer holding the most connections. Among those, one whose last
    /// request failed auth goes first, then the least recently active: a client that holds
    /// connections without using them, or keeps failing auth on them, loses them to one that
    /// asks now. At the per-peer cap, while every connection of the peer waits on the server
    /// (being verified, or its first request unread), the new one is refused instead (`None`):
    /// a local flood's newer connections never push out a login the busy server has not read
    /// yet. `socket` duplicates the new connection's descriptor, non-blocking. Returns the
    /// slot and whether one was shed.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        socket: Option<std::net::TcpStream>,
    ) -> Option<(Slot, bool)> {
        let peer = peer_of(ip);
        let mut guard = self.lock();
        let (next, conns) = &mut *guard;
        let mut per_peer: HashMap<IpAddr, usize> = HashMap::new();
        for e in conns.values() {
            *per_peer.entry(e.peer).or_default() += 1;
        }
        let shed = if per_peer.get(&peer).copied().unwrap_or(0) >= self.limits.per_peer {
            let id = first_to_shed(conns.iter().filter(|(_, e)| e.peer == peer));
            if id.is_some_and(|id| conns[&id].activity.waiting(conns[&id].socket.as_ref())) {
                return None;
            }
            id
        } else if conns.len() >= self.limits.max_connections {
            first_to_shed(conns.iter().filter(|(_, e)| e.activity.auth_failed())).or_else(|| {
                let busiest = per_peer.iter().max_by_key(|(_, n)| **n).map(|(p, _)| *p)?;
                first_to_shed(conns.iter().filter(|(_, e)| e.peer == busiest))
            })
        } else {
            None
        };
        if let Some(id) = shed
            && let Some(e) = conns.remove(&id)
        {
            e.activity.shed.notify_one();
        }
        let id = *next;
        *next += 1;
        let activity = Arc::new(Activity::new(self.epoch));
        conns.insert(
            id,
            Entry {
                peer,
                activity: Arc::clone(&activity),
                socket,
            },
        );
        drop(guard);
        Some((
            Slot {
                registry: Arc::clone(self),
                id,
                activity,
            },
            shed.is_some(),
        ))
    }
}

/// Of `candidates`, the one to shed: one whose last request failed auth, else one not waiting
/// on the server (a login waits however long bcrypt takes, and so does a first request the
/// busy server has not read yet: newer connections of a flood never push them out), else the
/// least recently active.
fn first_to_shed<'a>(candidates: impl Iterator<Item = (&'a u64, &'a Entry)>) -> Option<u64> {
    candidates
        .min_by_key(|(id, e)| {
            (
                !e.activity.auth_failed(),
                e.activity.waiting(e.socket.as_ref()),
                e.activity.last(),
                **id,
            )
        })
        .map(|(id, _)| *id)
}

/// A connection's byte stream with its activity noted and a write timeout: a write (or flush)
/// that makes no progress for the timeout fails with `TimedOut`, which closes the connection.
pub struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    write_timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> Tracked<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, activity: Arc<Activity>, write_timeout: Duration) -> Self {
        Self {
            inner,
            activity,
            write_timeout,
            stalled: None,
        }
    }

    /// The stream inside.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// After a write poll: progress clears the timer, no progress starts it or checks it.
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.stalled = None;
                if r.is_ok() {
                    self.activity.touch();
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.write_timeout;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                ready!(sleep.as_mut().poll(cx));
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client read nothing for {}",
                        crate::format::duration(timeout)
                    ),
                )))
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        if r.is_ok() && buf.filled().len() > before {
            self.activity.touch();
        }
        Poll::Ready(r)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        self.after_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        self.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.after_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.after_write(cx, r)
    }
}
