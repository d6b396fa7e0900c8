//! `--web-config FILE`: TLS and basic auth in the format of Prometheus exporters
//! (prometheus/exporter-toolkit's web configuration file), read once at start.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt       # relative paths are relative to this file
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
//!   client_ca_file: clients.crt
//!   min_version: TLS12          # TLS12 (default) or TLS13; max_version likewise
//! basic_auth_users:
//!   prometheus: $2y$10$...      # bcrypt hashes, e.g. from `htpasswd -nBC 10 ""`
//! ```
//!
//! The file and those it names are opened as [`files`](super::files) says; a parse error says
//! where it is and what kind, never what the file holds (the file may be another one, e.g.
//! `/etc/shadow`).
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, bail};
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    server::WebPkiClientVerifier,
};
use serde::Deserialize;

use super::{
    auth::Users,
    files::{self, Role},
};

/// Largest web-config file read (it holds a few paths and hashes).
const MAX_FILE_SIZE: u64 = 1 << 20;
/// Largest certificate, key or CA file read (a CA bundle of a few hundred certificates).
const MAX_PEM_SIZE: u64 = 16 << 20;
/// The keys of the file and of `tls_server_config`, the only words of an unknown-key error.
const KEYS: [&str; 16] = [
    "tls_server_config",
    "basic_auth_users",
    "http_server_config",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cert",
    "key",
    "client_ca",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
];

/// The file as written. Keys of exporter-toolkit that dropscope does not implement are read
/// so that they can be refused by name, with why; any other key is an error naming it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    http_server_config: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    cert: Option<serde_yaml_ng::Value>,
    key: Option<serde_yaml_ng::Value>,
    client_ca: Option<serde_yaml_ng::Value>,
    cipher_suites: Option<serde_yaml_ng::Value>,
    curve_preferences: Option<serde_yaml_ng::Value>,
    prefer_server_cipher_suites: Option<serde_yaml_ng::Value>,
    client_allowed_sans: Option<serde_yaml_ng::Value>,
}

/// What a web-config file asks for, loaded: certificates read and hashes checked.
#[derive(Default)]
pub struct WebConfig {
    /// TLS, when `tls_server_config` is given.
    pub tls: Option<Arc<ServerConfig>>,
    /// Basic auth, when `basic_auth_users` is given (and not empty).
    pub users: Option<Arc<Users>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.as_ref().map(|u| u.len()))
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks `path`: a regular file, not a symbolic link, owned by root or by the
    /// user dropscope runs as and writable by no one else, in directories likewise (see
    /// [`files::open`]); the files it names are checked the same way.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        let bytes = files::read(path, Role::WebConfig, MAX_FILE_SIZE)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("the web config {shown} is not UTF-8 text"))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("in the web config {shown}"))
    }

    /// Parses a web config's text; relative paths in it are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> anyhow::Result<Self> {
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| yaml_error(&e))?
        };
        if file.http_server_config.is_some() {
            bail!(
                "http_server_config is not supported: dropscope serves HTTP/1.1 only and sets no \
                 extra headers; remove the key"
            );
        }
        let tls = file
            .tls_server_config
            .map(|t| tls_config(t, base))
            .transpose()?;
        let users = match file.basic_auth_users {
            Some(u) if !u.is_empty() => Some(Arc::new(Users::new(u)?)),
            _ => None,
        };
        Ok(Self { tls, users })
    }
}

/// A YAML error as where it is and what kind, without the text: the file may be another one
/// (`/etc/shadow`), whose content must not be echoed. An unknown key is not shown either; the
/// known key closest to it is.
fn yaml_error(e: &serde_yaml_ng::Error) -> anyhow::Error {
    let at = e.location().map_or_else(
        || "at the end".to_string(),
        |l| format!("at line {} column {}", l.line(), l.column()),
    );
    let msg = e.to_string();
    if let Some((_, rest)) = msg.split_once("unknown field `") {
        let unknown = rest.split('`').next().unwrap_or_default();
        // Only names of this list are shown, whatever the message holds.
        let expected: Vec<&str> = KEYS
            .into_iter()
            .filter(|k| rest.contains(&format!("`{k}`")))
            .collect();
        let closest = expected
            .iter()
            .map(|k| (strsim::jaro_winkler(unknown, k), *k))
            .filter(|(score, _)| *score >= 0.85)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        return match closest {
            Some((_, k)) => anyhow::anyhow!("unknown key {at}: did you mean {k}?"),
            None => anyhow::anyhow!("unknown key {at} (the keys there: {})", expected.join(", ")),
        };
    }
    if let Some((_, rest)) = msg.split_once("missing field `")
        && let Some(k) = KEYS
            .into_iter()
            .find(|k| rest.starts_with(&format!("{k}`")))
    {
        return anyhow::anyhow!("{k} is missing {at}");
    }
    if msg.contains("invalid type: ") {
        return anyhow::anyhow!("a value of the wrong kind {at} (see the format in the docs)");
    }
    anyhow::anyhow!("not valid YAML, or not a web config, {at}")
}

/// A PEM error in words of its own: the crate's quote lines of the file.
fn pem_error(e: &rustls::pki_types::pem::Error) -> &'static str {
    use rustls::pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { .. } => "a PEM section has no END line",
        Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed",
        Error::Base64Decode(_) => "a PEM section is not base64",
        Error::NoItemsFound => "no PEM item of the kind needed",
        _ => "not PEM",
    }
}

/// The certificates in `path`, read as `role`.
fn certificates(path: &Path, role: Role) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let bytes = files::read(path, role, MAX_PEM_SIZE)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("reading {}: {}", path.display(), pem_error(&e)))?;
    if certs.is_empty() {
        bail!("{} holds no certificate", path.display());
    }
    Ok(certs)
}

fn tls_config(t: TlsFile, base: &Path) -> anyhow::Result<Arc<ServerConfig>> {
    for (key, set) in [
        ("cert", t.cert.is_some()),
        ("key", t.key.is_some()),
        ("client_ca", t.client_ca.is_some()),
    ] {
        if set {
            bail!(
                "tls_server_config.{key} (inline PEM) is not supported: put it in a file and \
                 name it with {key}_file"
            );
        }
    }
    for (key, set) in [
        ("cipher_suites", t.cipher_suites.is_some()),
        ("curve_preferences", t.curve_preferences.is_some()),
        (
            "prefer_server_cipher_suites",
            t.prefer_server_cipher_suites.is_some(),
        ),
        ("client_allowed_sans", t.client_allowed_sans.is_some()),
    ] {
        if set {
            bail!(
                "tls_server_config.{key} is not supported: dropscope uses rustls's safe defaults \
                 (TLS 1.2 and 1.3, their modern cipher suites and curves); remove the key"
            );
        }
    }
    let (Some(cert_file), Some(key_file)) = (t.cert_file, t.key_file) else {
        bail!("tls_server_config needs both cert_file and key_file");
    };
    let version = |v: &Option<String>, key: &str| -> anyhow::Result<Option<u8>> {
        match v.as_deref() {
            None => Ok(None),
            Some("TLS12") => Ok(Some(2)),
            Some("TLS13") => Ok(Some(3)),
            Some(other @ ("TLS10" | "TLS11")) => {
                bail!("tls_server_config.{key}: {other} is not offered (TLS12 or TLS13)")
            }
            Some(_) => bail!("tls_server_config.{key}: an unknown version (TLS12 or TLS13)"),
        }
    };
    let min = version(&t.min_version, "min_version")?.unwrap_or(2);
    let max = version(&t.max_version, "max_version")?.unwrap_or(3);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (min..=max).contains(v))
            .map(|(_, p)| p)
            .collect();
    if versions.is_empty() {
        bail!("tls_server_config: min_version is above max_version");
    }

    let cert_path = base.join(cert_file);
    let key_path = base.join(key_file);
    let certs = certificates(&cert_path, Role::Cert).context("cert_file")?;
    let key_pem = files::read(&key_path, Role::Key, MAX_PEM_SIZE)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        anyhow::anyhow!("reading key_file {}: {}", key_path.display(), pem_error(&e))
    })?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .context("choosing the TLS versions")?;
    let client_ca = |required: bool| -> anyhow::Result<_> {
        let Some(ca) = &t.client_ca_file else {
            bail!(
                "tls_server_config.client_auth_type {} needs client_ca_file",
                t.client_auth_type.as_deref().unwrap_or_default()
            );
        };
        let ca_path = base.join(ca);
        let mut roots = rustls::RootCertStore::empty();
        let cas = certificates(&ca_path, Role::ClientCa).context("client_ca_file")?;
        for c in cas {
            roots
                .add(c)
                .with_context(|| format!("a certificate in {}", ca_path.display()))?;
        }
        let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider));
        let b = if required {
            b
        } else {
            b.allow_unauthenticated()
        };
        b.build()
            .with_context(|| format!("client_ca_file {}", ca_path.display()))
    };
    let builder = match t.client_auth_type.as_deref() {
        None | Some("NoClientCert") => {
            if t.client_ca_file.is_some() {
                bail!(
                    "tls_server_config.client_ca_file is set but client_auth_type is not: set \
                     client_auth_type: RequireAndVerifyClientCert (or VerifyClientCertIfGiven)"
                );
            }
            builder.with_no_client_auth()
        }
        Some("RequireAndVerifyClientCert") => builder.with_client_cert_verifier(client_ca(true)?),
        Some("VerifyClientCertIfGiven") => builder.with_client_cert_verifier(client_ca(false)?),
        Some(other @ ("RequestClientCert" | "RequireAnyClientCert")) => bail!(
            "tls_server_config.client_auth_type {other} is not supported: it accepts \
             certificates nobody verified; use RequireAndVerifyClientCert with client_ca_file"
        ),
        Some(_) => bail!(
            "tls_server_config.client_auth_type: an unknown value (NoClientCert, \
             VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
        ),
    };
    let mut config = builder.with_single_cert(certs, key).with_context(|| {
        format!(
            "the key in {} does not fit the certificate in {}",
            key_path.display(),
            cert_path.display()
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
