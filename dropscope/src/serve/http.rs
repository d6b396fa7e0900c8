//! The HTTP server: `/metrics` rendered from the latest published exposition. A scrape makes no
//! BPF syscall and takes no lock the collector holds; requests are bounded by a header-read
//! timeout, a response timeout, a request-body limit and a cap on open connections.
use std::{
    net::SocketAddr,
    sync::{Arc, OnceLock},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{Semaphore, watch},
};
use tower_http::{limit::RequestBodyLimitLayer, timeout::TimeoutLayer};

use super::exposition::{Exposition, Format, render};

/// A client must send a request's headers within this long (also the idle keep-alive limit).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A response must be ready within this long.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request body accepted (a scrape has none).
pub const BODY_LIMIT: usize = 1024;
/// Open connections at most; further ones wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 64;

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

/// The routes with their limits.
pub fn router(latest: Latest) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(index))
        .with_state(latest)
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            RESPONSE_TIMEOUT,
        ))
}

/// Accepts connections on `listener` and serves `router` on each, until the future is dropped.
pub async fn serve(listener: TcpListener, router: Router) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: pause rather than spin.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
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
