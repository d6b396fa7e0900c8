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
use std::{
    collections::BTreeMap,
    io::Read as _,
    os::unix::fs::MetadataExt as _,
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

use super::auth::Users;

/// Largest web-config file read (it holds a few paths and hashes).
const MAX_FILE_SIZE: u64 = 1 << 20;

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
    /// Reads and checks `path`: it must be a regular file that only its owner can write, and
    /// when dropscope runs as root, owned by root (it names the key and the users allowed in).
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        let file =
            std::fs::File::open(path).with_context(|| format!("opening the web config {shown}"))?;
        // The checks are made on the file opened, not on its name, so it cannot be swapped
        // in between.
        let meta = file
            .metadata()
            .with_context(|| format!("reading the web config {shown}"))?;
        check_owner(&meta, path, geteuid())?;
        let mut text = String::new();
        file.take(MAX_FILE_SIZE + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading the web config {shown}"))?;
        if text.len() as u64 > MAX_FILE_SIZE {
            bail!("the web config {shown} is larger than {MAX_FILE_SIZE} bytes");
        }
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("in the web config {shown}"))
    }

    /// Parses a web config's text; relative paths in it are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> anyhow::Result<Self> {
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?
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

/// The effective user id.
fn geteuid() -> u32 {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Refuses a web config that others could write, or that a user other than root owns while
/// dropscope runs as root: whoever can change the file can choose who gets in and which key
/// the server presents.
pub(super) fn check_owner(meta: &std::fs::Metadata, path: &Path, euid: u32) -> anyhow::Result<()> {
    let shown = path.display();
    if !meta.is_file() {
        bail!("the web config {shown} is not a regular file");
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        bail!(
            "refusing the web config {shown}: it is {} (mode {mode:04o}), and it holds \
             secrets (who may log in, which key the server uses); make it writable by its owner \
             only: `chmod go-w {shown}`",
            if mode & 0o002 != 0 {
                "world-writable"
            } else {
                "group-writable"
            }
        );
    }
    if euid == 0 && meta.uid() != 0 {
        bail!(
            "refusing the web config {shown}: dropscope runs as root and the file is owned by \
             uid {}, who could change who may log in and which key the server uses; make root \
             its owner: `chown root {shown}`",
            meta.uid()
        );
    }
    Ok(())
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
            Some(other) => {
                bail!("tls_server_config.{key}: unknown version {other:?} (TLS12 or TLS13)")
            }
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
    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("reading cert_file {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        bail!("cert_file {} holds no certificate", cert_path.display());
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| anyhow::anyhow!("reading key_file {}: {e}", key_path.display()))?;

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
        let cas = CertificateDer::pem_file_iter(&ca_path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| anyhow::anyhow!("reading client_ca_file {}: {e}", ca_path.display()))?;
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
        Some(other) => bail!(
            "tls_server_config.client_auth_type: unknown value {other:?} (NoClientCert, \
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
