//! Basic auth against bcrypt hashes (`basic_auth_users` of the web config). bcrypt runs one at
//! a time; a user's last good password and the last wrong ones are remembered (as keyed MACs) so
//! that a scrape every second, or a wrong password sent again, costs no bcrypt; and each peer
//! has a failure budget, past which its failures are answered 429.
use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, Ipv4Addr},
    num::NonZeroUsize,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use lru::LruCache;
use ring::{hmac, rand::SystemRandom};
use tokio::sync::Semaphore;

use super::{budget::Budget, connections::ConnectionInfo};

/// What a 401 asks for.
pub const CHALLENGE: &str = "Basic realm=\"dropscope\", charset=\"UTF-8\"";
/// Failed logins a peer (an IPv4 address or an IPv6 /64) may make at once before its failures
/// are answered 429.
pub const FAILURE_BUDGET: u32 = 10;
/// Then one more failed login per this long.
pub const FAILURE_INTERVAL: Duration = Duration::from_secs(6);
/// Wrong (user, password) pairs remembered, the least recently sent forgotten first.
pub const WRONG_PASSWORDS_KEPT: usize = 4096;
/// Peers whose failures are counted at most.
pub const PEERS_COUNTED: usize = 4096;

/// The answer to a request's credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let in.
    Allowed,
    /// 401: no credentials, or wrong ones.
    Refused,
    /// 429: wrong credentials from a peer past its failure budget, which may fail again after
    /// this long.
    Throttled(Duration),
}

/// The users allowed in, by name, with their bcrypt hashes.
pub struct Users {
    hashes: HashMap<String, String>,
    /// A hash of no one's password, verified for unknown names so that they take as long as
    /// known ones (names cannot be told apart by timing).
    decoy: String,
    /// Keyed MACs of the last password that verified, per user: one entry per configured
    /// (user, hash), so the cache is bounded by the file. A MAC rather than the password, so
    /// that the plain password is not kept in memory.
    verified: Mutex<HashMap<String, hmac::Tag>>,
    /// Keyed MACs of (user, password) pairs that bcrypt refused: the hashes never change while
    /// the server runs, so such a pair is refused again without bcrypt.
    wrong: Mutex<LruCache<[u8; 32], ()>>,
    key: hmac::Key,
    /// One bcrypt at a time: wrong passwords sent in a loop cost at most one core.
    bcrypt: Arc<Semaphore>,
    /// Peers past their failure budget go through this one at a time before taking their turn
    /// at bcrypt, so that together they hold at most one place in its queue.
    over_budget: Semaphore,
    budget: Budget,
    /// bcrypt verifications run so far.
    bcrypt_runs: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every change is one insert: a panic elsewhere cannot leave a cache half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Users {
    /// The bcrypt cost of the decoy hash an unknown user's password is checked against.
    #[cfg(test)]
    pub(super) fn decoy_cost(&self) -> Option<u32> {
        self.decoy
            .parse::<bcrypt::HashParts>()
            .ok()
            .map(|p| p.get_cost())
    }

    /// Checks every hash and prepares the caches.
    pub fn new(users: BTreeMap<String, String>) -> anyhow::Result<Self> {
        // The decoy an unknown user's password is checked against costs what the dearest
        // user's hash costs: an unknown name takes as long as a known one, no longer.
        let mut cost = None;
        for (name, hash) in &users {
            // The hash is not shown: the file may not be a web config at all.
            let parts: bcrypt::HashParts = hash.parse().map_err(|_| {
                anyhow::anyhow!(
                    "basic_auth_users.{name}: not a bcrypt hash; make one with \
                     `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                )
            })?;
            cost = cost.max(Some(parts.get_cost()));
        }
        let cost = cost.unwrap_or(bcrypt::DEFAULT_COST);
        let decoy = bcrypt::hash("dropscope: no such user", cost).context("making a hash")?;
        let rng = SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow::anyhow!("no random numbers for the password cache"))?;
        let kept = NonZeroUsize::new(WRONG_PASSWORDS_KEPT).unwrap_or(NonZeroUsize::MIN);
        Ok(Self {
            hashes: users.into_iter().collect(),
            decoy,
            verified: Mutex::new(HashMap::new()),
            wrong: Mutex::new(LruCache::new(kept)),
            key,
            bcrypt: Arc::new(Semaphore::new(1)),
            over_budget: Semaphore::new(1),
            budget: Budget::new(FAILURE_BUDGET, FAILURE_INTERVAL, PEERS_COUNTED),
            bcrypt_runs: AtomicU64::new(0),
        })
    }

    /// Users configured.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Whether `password` is the one of `user` that verified last.
    fn remembered(&self, user: &str, password: &[u8]) -> bool {
        self.hashes.contains_key(user)
            && lock(&self.verified)
                .get(user)
                .is_some_and(|tag| hmac::verify(&self.key, password, tag.as_ref()).is_ok())
    }

    /// The keyed MAC of a (user, password) pair, the user's length first so that no two
    /// pairs share one.
    fn pair_mac(&self, user: &str, password: &[u8]) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&(user.len() as u64).to_be_bytes());
        ctx.update(user.as_bytes());
        ctx.update(password);
        let mut mac = [0u8; 32];
        mac.copy_from_slice(ctx.sign().as_ref());
        mac
    }

    fn known_wrong(&self, mac: &[u8; 32]) -> bool {
        lock(&self.wrong).get(mac).is_some()
    }

    /// Counts a failure of `peer`: 429 when its budget was spent already, else 401.
    fn failed(&self, peer: IpAddr) -> Verdict {
        let now = Instant::now();
        let spent = self.budget.spent(peer, now);
        self.budget.fail(peer, now);
        spent.map_or(Verdict::Refused, Verdict::Throttled)
    }

    /// Whether a request from `peer` with `credentials` (user, password) may come in.
    ///
    /// The last good password of a user comes in without bcrypt, and a (user, password) pair
    /// that bcrypt refused before is refused without it. Any other password is verified, even
    /// from a peer past its budget: every local user is one peer on loopback, and a local
    /// scraper's first login must get through a local flood. Such peers take one place in the
    /// bcrypt queue at a time, so they cannot delay other peers' logins by more than one
    /// verification.
    pub async fn verdict(
        self: &Arc<Self>,
        peer: IpAddr,
        credentials: Option<(&str, &[u8])>,
    ) -> Verdict {
        let Some((user, password)) = credentials else {
            return self.failed(peer);
        };
        if self.remembered(user, password) {
            return Verdict::Allowed;
        }
        let mac = self.pair_mac(user, password);
        if self.known_wrong(&mac) {
            return self.failed(peer);
        }
        let side_door = if self.budget.spent(peer, Instant::now()).is_some() {
            match self.over_budget.acquire().await {
                Ok(permit) => Some(permit),
                Err(_) => return self.failed(peer),
            }
        } else {
            None
        };
        let Ok(turn) = Arc::clone(&self.bcrypt).acquire_owned().await else {
            return self.failed(peer);
        };
        drop(side_door);
        // The same pair may have been verified while this one waited.
        if self.remembered(user, password) {
            return Verdict::Allowed;
        }
        if self.known_wrong(&mac) {
            return self.failed(peer);
        }
        // The verification and its record run to the end, with the turn held, even when the
        // connection that asked is shed meanwhile: a flood cannot make bcrypt's work vanish
        // unrecorded, nor run two at once.
        let me = Arc::clone(self);
        let (user, password) = (user.to_string(), password.to_vec());
        let ok = tokio::task::spawn_blocking(move || {
            let ok = me.verify(&user, &password, mac);
            drop(turn);
            ok
        })
        .await
        .unwrap_or(false);
        if ok {
            Verdict::Allowed
        } else {
            self.failed(peer)
        }
    }

    /// bcrypt itself, its answer remembered: whether `password` is `user`'s.
    fn verify(&self, user: &str, password: &[u8], mac: [u8; 32]) -> bool {
        let hash = self.hashes.get(user);
        self.bcrypt_runs.fetch_add(1, Ordering::Relaxed);
        let matches = bcrypt::verify(password, hash.unwrap_or(&self.decoy)).unwrap_or(false);
        if matches && hash.is_some() {
            lock(&self.verified).insert(user.to_string(), hmac::sign(&self.key, password));
            true
        } else {
            lock(&self.wrong).put(mac, ());
            false
        }
    }

    /// Whether `user` may log in with `password` (from no peer in particular).
    pub async fn check(self: &Arc<Self>, user: &str, password: &[u8]) -> bool {
        let anyone = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        self.verdict(anyone, Some((user, password))).await == Verdict::Allowed
    }

    /// bcrypt verifications run so far.
    pub fn bcrypt_runs(&self) -> u64 {
        self.bcrypt_runs.load(Ordering::Relaxed)
    }

    /// Whether a password of `user` that verified is remembered.
    pub fn remembers(&self, user: &str) -> bool {
        lock(&self.verified).contains_key(user)
    }
}

/// The user and password of an `Authorization: Basic` header.
pub fn credentials(value: &HeaderValue) -> Option<(String, Vec<u8>)> {
    let value = value.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

/// The middleware: requests without valid credentials get 401 and a Basic challenge, or 429
/// and `Retry-After` from a peer past its failure budget; the connection is marked for
/// shedding first while its last request failed.
pub async fn require(State(users): State<Arc<Users>>, request: Request, next: Next) -> Response {
    let conn = request.extensions().get::<ConnectionInfo>().cloned();
    let peer = conn
        .as_ref()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.peer);
    let creds = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(credentials);
    if let Some(c) = &conn {
        c.activity.set_verifying(true);
    }
    let verdict = users
        .verdict(
            peer,
            creds.as_ref().map(|(u, p)| (u.as_str(), p.as_slice())),
        )
        .await;
    if let Some(c) = &conn {
        c.activity.set_verifying(false);
        c.activity.set_auth_failed(verdict != Verdict::Allowed);
    }
    match verdict {
        Verdict::Allowed => next.run(request).await,
        Verdict::Refused => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, CHALLENGE)],
            "unauthorized\n",
        )
            .into_response(),
        Verdict::Throttled(wait) => {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, seconds.max(1).to_string())],
                format!(
                    "too many failed logins from this address: retry in {} s\n",
                    seconds.max(1)
                ),
            )
                .into_response()
        }
    }
}
