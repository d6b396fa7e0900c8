//! `dropscope serve`: the live snapshot stream as Prometheus metrics over HTTP.
//!
//! The collector runs as for the TUI and sends owned snapshots; one task applies the series cap
//! to each and publishes the result in a `watch` channel; a scrape clones the latest `Arc` and
//! renders it (once per snapshot and format). A scrape therefore makes no BPF syscall and never
//! holds anything the collector waits for, and any number of scrapes can run at once.
pub mod exposition;
pub mod http;
pub mod series;

use std::sync::Arc;

use anyhow::{Context as _, bail};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};

use crate::{cli::ServeArgs, source::Feed};

use self::{
    exposition::Exposition,
    http::Published,
    series::{Selected, Selection},
};

/// Applies the cap to every snapshot of `feed` and publishes the result, until the feed ends.
pub async fn publish(mut feed: Feed, tx: watch::Sender<Option<Arc<Published>>>, max: usize) {
    let mut selection = Selection::new(max);
    let mut last: Option<(u64, usize, Selected)> = None;
    while let Some(mut snap) = feed.snapshots.recv().await {
        // Only the newest of the snapshots waiting matters.
        while let Ok(newer) = feed.snapshots.try_recv() {
            snap = newer;
        }
        // Counts only grow: the same total over the same keys means the same counts.
        let selected = match &last {
            Some((total, keys, sel)) if *total == snap.total && *keys == snap.drops.len() => {
                sel.clone()
            }
            _ => selection.select(&snap),
        };
        let exposition = Exposition::new(&feed.info, &snap, selected.clone(), max);
        last = Some((snap.total, snap.drops.len(), selected));
        tx.send_replace(Some(Arc::new(Published::new(exposition))));
    }
}

/// Runs `dropscope serve` until SIGINT, SIGTERM, SIGHUP or SIGQUIT, then detaches the probe.
pub async fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let mut signals = Vec::new();
    for (kind, name) in [
        (SignalKind::interrupt(), "SIGINT"),
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::hangup(), "SIGHUP"),
        (SignalKind::quit(), "SIGQUIT"),
    ] {
        signals.push(signal(kind).with_context(|| format!("installing a {name} handler"))?);
    }
    let any_signal = futures::future::select_all(signals.iter_mut().map(|s| Box::pin(s.recv())));
    // The port is taken before the probe is attached, so a busy port costs nothing.
    let listener = http::bind(args.listen).await?;
    let local = listener
        .local_addr()
        .context("reading the listening address")?;
    let (feed, stopper) = crate::cmd::live::start_live(&args.live)?;
    eprintln!(
        "dropscope: counting drops with {}; serving metrics on http://{local}/metrics until \
         Ctrl-C or SIGTERM",
        feed.info.probe
    );
    let (tx, rx) = watch::channel(None);
    let max = usize::try_from(args.max_series).unwrap_or(usize::MAX);
    let publisher = publish(feed, tx, max);
    let server = http::serve(listener, http::router(rx));
    let collector_died = tokio::select! {
        () = publisher => true,
        () = server => false,
        _ = any_signal => false,
    };
    // The server and its connections end with this function; the probe is detached here.
    stopper.finish()?;
    if collector_died {
        bail!("the collector stopped unexpectedly");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
