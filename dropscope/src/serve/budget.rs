//! The failure budget of each peer: a burst of failed logins, then one per interval (a generic
//! cell rate: each failure adds an interval of debt, which is paid off as time passes).
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::connections::peer_of;

/// Failed logins allowed per peer (an IPv4 address or an IPv6 /64), with their pace.
pub struct Budget {
    burst: u32,
    interval: Duration,
    max_peers: usize,
    /// When each peer's debt is paid off; a peer without debt has no entry (or a past one).
    paid_at: Mutex<HashMap<IpAddr, Instant>>,
}

impl Budget {
    /// `burst` failures at once, then one per `interval`; `max_peers` in debt are tracked at
    /// most (past that, the peer closest to being paid off is forgotten).
    pub fn new(burst: u32, interval: Duration, max_peers: usize) -> Self {
        Self {
            burst: burst.max(1),
            interval,
            max_peers: max_peers.max(1),
            paid_at: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Instant>> {
        // Every change is one insert or removal: a panic cannot leave the map half-changed.
        self.paid_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn most_debt(&self) -> Duration {
        self.interval * self.burst
    }

    /// When `ip`'s budget is spent at `now`: how long until it may fail again.
    pub fn spent(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let paid_at = *self.lock().get(&peer_of(ip))?;
        let debt = paid_at.saturating_duration_since(now);
        let over = (debt + self.interval).saturating_sub(self.most_debt());
        (!over.is_zero()).then_some(over)
    }

    /// Counts a failed login of `ip` at `now`.
    pub fn fail(&self, ip: IpAddr, now: Instant) {
        let peer = peer_of(ip);
        let most = self.most_debt();
        let mut paid_at = self.lock();
        if paid_at.len() >= self.max_peers && !paid_at.contains_key(&peer) {
            paid_at.retain(|_, at| *at > now);
            if paid_at.len() >= self.max_peers
                && let Some(first) = paid_at.iter().min_by_key(|(_, at)| **at).map(|(p, _)| *p)
            {
                paid_at.remove(&first);
            }
        }
        let at = paid_at.entry(peer).or_insert(now);
        *at = ((*at).max(now) + self.interval).min(now + most);
    }

    /// Peers in debt now.
    pub fn peers(&self, now: Instant) -> usize {
        self.lock().values().filter(|at| **at > now).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval_and_peers_are_bounded() {
        let b = Budget::new(3, Duration::from_secs(6), 2);
        let t0 = Instant::now();
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        for _ in 0..3 {
            assert_eq!(b.spent(a, t0), None);
            b.fail(a, t0);
        }
        assert_eq!(b.spent(a, t0), Some(Duration::from_secs(6)));
        // More failures do not push the wait past one interval.
        b.fail(a, t0);
        assert_eq!(b.spent(a, t0), Some(Duration::from_secs(6)));
        assert_eq!(
            b.spent(a, t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(b.spent(a, t0 + Duration::from_secs(6)), None);
        // One IPv6 /64 is one peer.
        let v6 = |s: &str| s.parse::<IpAddr>().expect("ip");
        for _ in 0..3 {
            b.fail(v6("2001:db8::1"), t0);
        }
        assert!(b.spent(v6("2001:db8::ffff"), t0).is_some());
        assert_eq!(b.peers(t0), 2);
        b.fail(v6("192.0.2.9"), t0);
        assert_eq!(b.peers(t0), 2, "bounded");
    }
}
