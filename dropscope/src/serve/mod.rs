//! `dropscope serve`: the live snapshot stream as Prometheus metrics over HTTP.
//!
//! The collector runs as for the TUI and sends owned snapshots; one task applies the series caps
//! ([`series`], [`cap`]) to each and publishes the result in a `watch` channel; a scrape clones the latest `Arc` and
//! renders it (once per snapshot and format). A scrape therefore makes no BPF syscall and never
//! holds anything the collector waits for, and any number of scrapes can run at once.
//!
//! Connections are bounded ([`connections`]): a client holding every connection it can does
//! not lock a scraper out. TLS and basic auth come from a [`webconfig`] file.
pub mod auth;
pub mod budget;
pub mod cap;
pub mod connections;
pub mod exposition;
pub mod files;
pub mod http;
pub mod series;
pub mod webconfig;

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::{Context as _, bail};
use tokio::sync::watch;

use crate::source::{Feed, Stopper};

use self::{
    connections::Limits, exposition::Exposition, http::Published, series::Selection,
    webconfig::WebConfig,
};

/// How often `serve` reads the kernel's counters (packets per device and namespace, the
/// denominators of drop ratios, and the drop ledger's layers): as the live view does while its
/// panels are closed. Scrapes come every 15 s or more in most set-ups, and a reading of 100
/// namespaces of 10 devices costs about 60 ms of CPU: 0.6% of a core at this pace.
pub const KERNEL_READ: std::time::Duration = std::time::Duration::from_secs(10);

/// What `dropscope serve` is asked to do (the command line's options, plain).
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address and port to listen on.
    pub listen: SocketAddr,
    /// Series exported per metric family at most.
    pub max_series: usize,
    /// The web config (TLS, basic auth), if any.
    pub web_config: Option<PathBuf>,
    /// Connection limits.
    pub limits: Limits,
    /// Whether the probe counts every drop (no drop filter), so that the drops only a kernel
    /// counter saw can be exported.
    pub counts_all: bool,
    /// Keep the snapshot stream in this history directory (`--history`).
    pub history: Option<crate::history::HistoryOptions>,
}

/// Applies the caps to every snapshot of `feed` and publishes the result, until the feed ends.
/// Each snapshot is selected anew, even one with the same counts as the last: its names may
/// have resolved since.
pub async fn publish(feed: Feed, tx: watch::Sender<Option<Arc<Published>>>, max: usize) {
    publish_selected(feed, tx, Selection::new(max), max, None).await;
}

/// [`publish`] with the caps of `selection`.
async fn publish_selected(
    mut feed: Feed,
    tx: watch::Sender<Option<Arc<Published>>>,
    mut selection: Selection,
    max: usize,
    history: Option<Arc<crate::history::Status>>,
) {
    while let Some(mut snap) = feed.snapshots.recv().await {
        // Only the newest of the snapshots waiting matters.
        while let Ok(newer) = feed.snapshots.try_recv() {
            snap = newer;
        }
        let selected = selection.select(&snap);
        let mut exposition = Exposition::new(&feed.info, &snap, selected, max);
        exposition.history = history.as_ref().map(|h| h.view());
        tx.send_replace(Some(Arc::new(Published::new(exposition))));
    }
}

/// Runs `dropscope serve` until SIGINT, SIGTERM, SIGHUP or SIGQUIT: reads the web config,
/// takes the port, then calls `start` for the live feed (attaching the probe), and at the end
/// stops it (detaching the probe).
pub async fn run(
    opts: ServeOptions,
    start: impl FnOnce() -> anyhow::Result<(Feed, Stopper)>,
) -> anyhow::Result<()> {
    let mut interrupt = crate::signals::Interrupt::new()?;
    // The web config and the port come before the probe is attached, so that a mistake in
    // either costs nothing.
    let web = match &opts.web_config {
        Some(path) => WebConfig::load(path)?,
        None => WebConfig::default(),
    };
    let listener = http::bind(opts.listen).await?;
    // So is the history directory (created, locked): a second writer is refused here.
    let history = opts
        .history
        .clone()
        .map(crate::history::HistoryWriter::open)
        .transpose()?;
    let local = listener
        .local_addr()
        .context("reading the listening address")?;
    let (feed, stopper) = start()?;
    let status = history.as_ref().map(crate::history::HistoryWriter::status);
    let (feed, writing) = match history {
        Some(h) => {
            let dir = crate::sanitize::terminal(&h.dir().to_string_lossy()).into_owned();
            let (feed, running) = h.tee(feed)?;
            eprintln!("dropscope: keeping history in {dir}");
            (feed, Some(running))
        }
        None => (feed, None),
    };
    eprintln!(
        "dropscope: counting drops with {}; serving metrics on {}://{local}/metrics{} until \
         Ctrl-C or SIGTERM",
        feed.info.probe,
        if web.tls.is_some() { "https" } else { "http" },
        if web.users.is_some() {
            " (basic auth)"
        } else {
            ""
        },
    );
    let (tx, rx) = watch::channel(None);
    let selection = Selection::new(opts.max_series).counting_all(opts.counts_all);
    let publisher = publish_selected(feed, tx, selection, opts.max_series, status);
    let router = http::router(rx, web.users, &opts.limits);
    let tls = web.tls.map(tokio_rustls::TlsAcceptor::from);
    let server = http::serve(listener, router, opts.limits, tls);
    let collector_died = tokio::select! {
        () = publisher => true,
        () = server => false,
        () = interrupt.recv() => false,
    };
    // The server and its connections end with this function; the probe is detached here.
    let stopped = stopper.finish();
    // The last snapshots are written and the segment finished whatever ended the collector.
    if let Some(w) = writing {
        w.finish().await;
    }
    stopped?;
    if collector_died {
        bail!("the collector stopped unexpectedly");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
