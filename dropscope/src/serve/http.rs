//! The HTTP server: `/metrics` rendered from the latest published exposition. A scrape makes no
//! BPF syscall and takes no lock the collector holds. Each connection is bounded by the
//! [`Limits`] (idle and write timeouts, requests per connection, caps on connections in all and
//! per peer that shed one that failed auth, else the least recently active one), requests by a
//! response timeout and a body limit; with a web config, by TLS and basic auth.
use std::{
    net::SocketAddr,
    os::fd::AsFd as _,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tokio_rustls::TlsAcceptor;
use tower_http::{limit::RequestBodyLimitLayer, timeout::TimeoutLayer};

use super::{
    auth::{self, Users},
    connections::{ConnectionInfo, Limits, Registry, Tracked},
    exposition::{Exposition, Format, render},
};

/// Largest request body accepted (a scrape has none).
pub const BODY_LIMIT: usize = 1024;

/// One snapshot's exposition, rendered at most once per format, on the first scrape that asks.
#[derive(Debug)]
pub struct Published {
    exposition: Exposition,
    text: OnceLock<Bytes>,
    openmetrics: OnceLock<Bytes>,
}

impl Published {
    /// Wraps an exposition; nothing is rendered yet.
    pub fn new(exposition: Exposition) -> Self {
        Self {
            exposition,
            text: OnceLock::new(),
            openmetrics: OnceLock::new(),
        }
    }

    /// The body in `format`, rendered now if no scrape asked for it before.
    pub fn body(&self, format: Format) -> Bytes {
        let cell = match format {
            Format::Text => &self.text,
            Format::OpenMetrics => &self.openmetrics,
        };
        cell.get_or_init(|| Bytes::from(render(&self.exposition, format)))
            .clone()
    }
}

/// The latest exposition (`None` before the first snapshot).
pub type Latest = watch::Receiver<Option<Arc<Published>>>;

async fn metrics(State(latest): State<Latest>, headers: HeaderMap) -> Response {
    // Clone the Arc and let go of the watch's lock before rendering.
    let current = latest.borrow().clone();
    let Some(published) = current else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no snapshot yet: the collector is starting\n",
        )
            .into_response();
    };
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    (
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from(published.body(format)),
    )
        .into_response()
}

async fn index() -> &'static str {
    "dropscope: kernel packet drops for Prometheus; metrics at /metrics\n"
}

/// The routes with their limits; with `users`, every route asks for basic auth.
pub fn router(latest: Latest, users: Option<Arc<Users>>, limits: &Limits) -> Router {
    let routes = Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(index))
        .with_state(latest);
    let routes = match users {
        Some(users) => routes.layer(axum::middleware::from_fn_with_state(users, auth::require)),
        None => routes,
    };
    routes
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.response_timeout,
        ))
}

/// Accepts connections on `listener` and serves `router` on each (over TLS with `tls`), within
/// `limits`, until the future is dropped (which closes every connection).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
) {
    let registry = Registry::new(limits);
    // Dropped with this future: every connection task ends with it.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            // Reap finished connection tasks as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // A duplicate of the descriptor (closed with the slot), to see whether its request
        // waits unread; without one the connection counts as not waiting.
        let socket = stream
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(std::net::TcpStream::from);
        let Some((slot, shed)) = registry.admit(peer.ip(), socket) else {
            tracing::debug!("at {peer}'s cap, all its connections waiting: refused a new one");
            continue;
        };
        if shed {
            tracing::debug!("at a connection cap: shed the least recently active connection");
        }
        let router = router.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let activity = Arc::clone(slot.activity());
            let io = Tracked::new(stream, Arc::clone(&activity), limits.write_timeout);
            let info = ConnectionInfo {
                peer: peer.ip(),
                activity: Arc::clone(&activity),
            };
            tokio::select! {
                r = connection(io, info, router, limits, tls) => {
                    if let Err(e) = r {
                        tracing::debug!("connection from {peer}: {e}");
                    }
                }
                () = activity.shed() => tracing::debug!("connection from {peer} shed"),
            }
            drop(slot);
        });
    }
}

/// Go's answer to plain HTTP sent to a TLS port, which Prometheus users know.
const PLAIN_TO_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; \
    charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// One connection: the TLS handshake if any, then HTTP/1.1 until the client leaves, a timeout
/// or the request cap.
async fn connection(
    mut io: Tracked<TcpStream>,
    info: ConnectionInfo,
    router: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
) -> anyhow::Result<()> {
    let Some(acceptor) = tls else {
        return http1(io, info, router, limits).await;
    };
    let handshake = async {
        // A TLS connection opens with a handshake record (0x16); anything else is refused.
        let mut first = [0u8; 1];
        let n = io.get_ref().peek(&mut first).await?;
        if n == 0 || first[0] != 0x16 {
            io.write_all(PLAIN_TO_TLS).await?;
            io.shutdown().await?;
            return Ok(None);
        }
        acceptor.accept(io).await.map(Some)
    };
    match tokio::time::timeout(limits.idle_timeout, handshake).await {
        Ok(Ok(Some(stream))) => http1(stream, info, router, limits).await,
        Ok(Ok(None)) => Ok(()),
        Ok(Err(e)) => Err(anyhow::anyhow!("TLS handshake: {e}")),
        Err(_) => Err(anyhow::anyhow!("no TLS handshake within the idle timeout")),
    }
}

/// HTTP/1.1 on `io`: at most `limits.max_requests` requests, the last answered with
/// `Connection: close`; the idle timeout bounds the wait for each request head. Each request
/// carries `info` as an extension.
async fn http1<I>(io: I, info: ConnectionInfo, router: Router, limits: Limits) -> anyhow::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(router);
    let served = AtomicU32::new(0);
    let counted = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
        req.extensions_mut().insert(info.clone());
        let last = served.fetch_add(1, Ordering::Relaxed) + 1 >= limits.max_requests;
        let answer = hyper::service::Service::call(&service, req);
        async move {
            let mut response = answer.await?;
            if last {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .serve_connection(TokioIo::new(io), counted)
        .await?;
    Ok(())
}

/// Binds the listening socket, with an actionable message when the address is taken.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                ": another program listens there (see `ss -ltnp 'sport = :{}'`); \
                 choose another with --listen ADDR:PORT",
                addr.port()
            ),
            std::io::ErrorKind::AddrNotAvailable => {
                ": no interface of this machine has that address".into()
            }
            std::io::ErrorKind::PermissionDenied => {
                ": ports below 1024 need CAP_NET_BIND_SERVICE".into()
            }
            _ => String::new(),
        };
        anyhow::anyhow!("cannot listen on {addr}: {e}{hint}")
    })
}
