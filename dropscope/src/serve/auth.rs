//! Basic auth against bcrypt hashes (`basic_auth_users` of the web config), with successful
//! verifications remembered so that a scrape every second does not cost a bcrypt each time.
use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use anyhow::Context as _;
use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use ring::{hmac, rand::SystemRandom};
use tokio::sync::Semaphore;

/// What a 401 asks for.
pub const CHALLENGE: &str = "Basic realm=\"dropscope\", charset=\"UTF-8\"";

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
    key: hmac::Key,
    /// One bcrypt at a time: wrong passwords sent in a loop cost at most one core.
    bcrypt: Semaphore,
}

impl Users {
    /// Checks every hash and prepares the cache.
    pub fn new(users: BTreeMap<String, String>) -> anyhow::Result<Self> {
        let mut cost = bcrypt::DEFAULT_COST;
        for (name, hash) in &users {
            let parts: bcrypt::HashParts = hash.parse().map_err(|e| {
                anyhow::anyhow!(
                    "basic_auth_users.{name}: not a bcrypt hash ({e}); make one with \
                     `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                )
            })?;
            cost = cost.max(parts.get_cost());
        }
        let decoy = bcrypt::hash("dropscope: no such user", cost).context("making a hash")?;
        let rng = SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow::anyhow!("no random numbers for the password cache"))?;
        Ok(Self {
            hashes: users.into_iter().collect(),
            decoy,
            verified: Mutex::new(HashMap::new()),
            key,
            bcrypt: Semaphore::new(1),
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

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, hmac::Tag>> {
        self.verified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `user` may log in with `password`.
    pub async fn check(self: &Arc<Self>, user: &str, password: &[u8]) -> bool {
        let hash = self.hashes.get(user);
        if hash.is_some()
            && let Some(tag) = self.cache().get(user)
            && hmac::verify(&self.key, password, tag.as_ref()).is_ok()
        {
            return true;
        }
        let hash = hash.cloned();
        let known = hash.is_some();
        let verify_against = hash.unwrap_or_else(|| self.decoy.clone());
        let Ok(_turn) = self.bcrypt.acquire().await else {
            return false;
        };
        let pw = password.to_vec();
        let ok = tokio::task::spawn_blocking(move || {
            bcrypt::verify(&pw, &verify_against).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let ok = ok && known;
        if ok {
            self.cache()
                .insert(user.to_string(), hmac::sign(&self.key, password));
        }
        ok
    }

    /// Whether a password of `user` that verified is remembered.
    pub fn remembers(&self, user: &str) -> bool {
        self.cache().contains_key(user)
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

/// The middleware: requests without valid credentials get 401 and a Basic challenge.
pub async fn require(State(users): State<Arc<Users>>, request: Request, next: Next) -> Response {
    let allowed = match request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(credentials)
    {
        Some((user, password)) => users.check(&user, &password).await,
        None => false,
    };
    if allowed {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, CHALLENGE)],
        "unauthorized\n",
    )
        .into_response()
}
