//! Configuration: defaults, then the TOML file, then `ZARRGATE_*` environment variables, then
//! command-line flags. Every key is documented in `config/zarrgate.toml`.

use std::net::SocketAddr;
use std::path::Path;

mod assemble;
mod files;
mod limits;
mod redacted;

pub use assemble::AssembleConfig;
pub use files::FilesConfig;
pub use limits::LimitsConfig;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The default `block_chunks`, the chunks of one stored manifest block: the pure layer's own
/// default (`zarr::grid::DEFAULT_TILE_CHUNKS`, which says why; a test keeps them equal).
pub const DEFAULT_BLOCK_CHUNKS: u32 = 1_024;

/// The largest `block_chunks`, the most chunks one stored manifest block holds (as
/// `zarr::grid::MAX_TILE_CHUNKS`; a test keeps them equal).
pub const MAX_BLOCK_CHUNKS: u32 = 65_536;

/// The whole configuration.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    pub listen: String,
    /// `postgres://...` or `sqlite://path` (created if missing).
    pub database_url: String,
    /// Connections in the catalog's pool.
    pub database_max_connections: u32,
    /// The largest number of chunk references in one stored manifest block (new versions).
    pub block_chunks: u32,
    /// Bearer tokens accepted on `/api/v1`; empty means the control plane is open.
    pub admin_tokens: Vec<String>,
    /// Bearer tokens a data-plane read needs (an admin token reads too); empty means reads are
    /// public.
    pub read_tokens: Vec<String>,
    /// Allow listening on a non-loopback address with no admin token.
    pub insecure: bool,
    /// Allow registering `file://` object stores over the API.
    pub allow_file_object_stores: bool,
    /// `text` or `json`.
    pub log_format: String,
    /// Log filter, `tracing_subscriber::EnvFilter` syntax.
    pub log_level: String,
    /// HTTP behaviour.
    pub http: HttpConfig,
    /// Cache sizes.
    pub cache: CacheConfig,
    /// Upstream (object store) behaviour.
    pub sources: SourcesConfig,
    /// Which old versions are kept.
    pub retention: RetentionConfig,
    /// Registration of large documents.
    pub ingest: IngestConfig,
    /// Bounds on what one store version may make a reader cost, checked at registration.
    pub limits: LimitsConfig,
    /// How files are read when a store is registered from them (`?format=files`).
    pub files: FilesConfig,
    /// How chunks at seams between joined files are assembled.
    pub assemble: AssembleConfig,
    /// Object stores declared here (credentials from the environment or the options).
    pub object_stores: Vec<ObjectStoreConfig>,
    /// The file this configuration was read from, if any.
    #[serde(skip)]
    pub file: Option<std::path::PathBuf>,
}

/// HTTP behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Largest manifest document accepted by `PUT /api/v1/stores/{store}`.
    pub max_body_bytes: u64,
    /// `Cache-Control: max-age` of responses under a store's current version.
    pub max_age_seconds: u64,
    /// `Access-Control-Allow-Origin: *` on the data plane.
    pub cors: bool,
    /// Seconds in-flight requests get to finish after SIGTERM.
    pub drain_seconds: u64,
    /// `"404"` or `"fill"`: how new stores registered without `?missing_chunks=` answer missing
    /// chunks (a replacement keeps the store's current policy).
    pub missing_chunks: String,
    /// Connections served at once; one more is answered 503 and closed.
    pub max_connections: u32,
    /// Seconds a request's head (request line and headers) may take to arrive, counted from
    /// its first byte, or from the connection's opening for its first request.
    pub header_read_timeout_seconds: u64,
    /// Seconds a keep-alive connection is kept open with no request in progress.
    pub idle_timeout_seconds: u64,
    /// Seconds a request body may go without sending a byte before the request is aborted.
    pub request_body_timeout_seconds: u64,
    /// Seconds a response may wait on a client that reads none of it before the connection is
    /// closed.
    pub send_timeout_seconds: u64,
    /// Largest request head (request line and headers), in bytes; a larger one is answered 431.
    pub max_header_bytes: u64,
}

/// Which old versions are kept (the current version always is).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// The newest versions of each store kept whatever their age.
    pub keep_versions: u32,
    /// Versions younger than this are kept whatever their number, in seconds.
    pub keep_seconds: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self { keep_versions: 10, keep_seconds: 7 * 86_400 }
    }
}

/// Registration of large documents.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Bytes of parsed references one registration keeps in memory before it spills to disk.
    pub memory_bytes: u64,
    /// Directory of the spill files; empty for the system's temporary directory.
    pub scratch_dir: String,
    /// Registrations (PUT and PATCH) running at once; each may hold `memory_bytes`.
    pub max_concurrent: u32,
    /// Seconds a registration waits for its turn before it is answered 503.
    pub queue_seconds: u64,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self { memory_bytes: 256 << 20, scratch_dir: String::new(), max_concurrent: 2, queue_seconds: 60 }
    }
}

/// Cache sizes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Bytes of decoded manifest blocks kept in memory.
    pub blocks_bytes: u64,
    /// Bytes of rendered metadata (zarr.json documents) kept in memory.
    pub metadata_bytes: u64,
    /// Bytes of encoded fill-value chunks (stores with `missing_chunks = "fill"`) kept in memory.
    pub fill_chunks_bytes: u64,
    /// Bytes of rendered quick looks (PNG and scale) kept in memory.
    pub quicklooks_bytes: u64,
    /// Bytes of assembled chunks (encoded) kept in memory.
    pub assembled_bytes: u64,
    /// How long a replica trusts its idea of a store's current version, in milliseconds.
    pub current_version_ttl_ms: u64,
    /// While the catalog is unreachable, how long after it was last read from the catalog a
    /// store's version keeps being served, in seconds (0: not at all).
    pub unavailable_ttl_seconds: u64,
}

/// Upstream behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourcesConfig {
    /// Budget for one upstream request, retries included.
    pub timeout_seconds: u64,
    /// Budget for connecting.
    pub connect_timeout_seconds: u64,
    /// Retries of transient upstream failures.
    pub retries: usize,
    /// Source objects asked for their ETag and size at once when a store is registered.
    pub verify_concurrency: usize,
    /// Requests in flight to one object store at most (a read holds its slot until its body
    /// has passed); more wait up to `timeout_seconds`, then answer 503.
    pub max_concurrent_per_store: usize,
    /// Chunks of remote object stores up to this many bytes are read whole before the answer
    /// starts, so that an upstream failing mid-body is a clean 502/504; larger ones stream.
    pub buffer_chunk_bytes: u64,
    /// s3/gs/az stores registered over the API without credentials use the server's ambient
    /// identity (instance metadata, workload identity) instead of reading anonymously.
    pub api_ambient_credentials: bool,
    /// Remote object stores share, widen and read ahead of upstream requests (each store's
    /// `readahead` option overrides it).
    pub readahead: bool,
    /// The most bytes read past a read once reads of an object come in order (`readahead_window`).
    pub readahead_window_bytes: u64,
    /// Reads are widened to aligned blocks of this many bytes (`readahead_gap`).
    pub readahead_gap_bytes: u64,
    /// Bytes each remote object store holds for reads to come (`readahead_cache`).
    pub readahead_cache_bytes: u64,
}

/// An object store declared in the configuration file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// Its name.
    pub name: String,
    /// Its URL prefix.
    pub url: String,
    /// object_store builder options.
    #[serde(default)]
    pub options: Map<String, Value>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            database_url: "sqlite://./data/zarrgate.db".into(),
            database_max_connections: 16,
            block_chunks: DEFAULT_BLOCK_CHUNKS,
            admin_tokens: Vec::new(),
            read_tokens: Vec::new(),
            insecure: false,
            allow_file_object_stores: true,
            log_format: "text".into(),
            log_level: "info".into(),
            http: HttpConfig::default(),
            cache: CacheConfig::default(),
            sources: SourcesConfig::default(),
            retention: RetentionConfig::default(),
            ingest: IngestConfig::default(),
            limits: LimitsConfig::default(),
            files: FilesConfig::default(),
            assemble: AssembleConfig::default(),
            object_stores: Vec::new(),
            file: None,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 30,
            max_age_seconds: 60,
            cors: true,
            drain_seconds: 30,
            missing_chunks: "404".into(),
            max_connections: 1024,
            header_read_timeout_seconds: 10,
            idle_timeout_seconds: 60,
            request_body_timeout_seconds: 30,
            send_timeout_seconds: 30,
            max_header_bytes: 64 << 10,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            blocks_bytes: 512 << 20,
            metadata_bytes: 512 << 20,
            fill_chunks_bytes: 64 << 20,
            quicklooks_bytes: 32 << 20,
            assembled_bytes: 256 << 20,
            current_version_ttl_ms: 1_000,
            unavailable_ttl_seconds: 300,
        }
    }
}

impl Default for SourcesConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: 30,
            connect_timeout_seconds: 5,
            retries: 3,
            verify_concurrency: 32,
            max_concurrent_per_store: 256,
            buffer_chunk_bytes: 4 << 20,
            api_ambient_credentials: false,
            readahead: true,
            readahead_window_bytes: 4 << 20,
            readahead_gap_bytes: 64 << 10,
            readahead_cache_bytes: 64 << 20,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &crate::redact::redact_url(&self.database_url))
            .field("admin_tokens", &format_args!("[{} redacted]", self.admin_tokens.len()))
            .field("read_tokens", &format_args!("[{} redacted]", self.read_tokens.len()))
            .field("insecure", &self.insecure)
            .field("allow_file_object_stores", &self.allow_file_object_stores)
            .field("http", &self.http)
            .field("cache", &self.cache)
            .field("sources", &self.sources)
            .field("retention", &self.retention)
            .field("ingest", &self.ingest)
            .field("limits", &self.limits)
            .field("files", &self.files)
            .field("object_stores", &self.object_stores.iter().map(|o| (&o.name, &o.url)).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Loads defaults, then `file` if given, then the environment as `vars` gives it.
    pub fn load(file: Option<&Path>, vars: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let mut table = toml::Value::try_from(Config::default())?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let from_file: toml::Value =
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
            merge(&mut table, from_file);
        }
        let defaults = toml::Value::try_from(Config::default())?;
        apply_env(&mut table, &defaults, "ZARRGATE", &vars)?;
        if vars("ZARRGATE_DATABASE_URL").is_none()
            && let Some(url) = vars("DATABASE_URL")
        {
            table["database_url"] = toml::Value::String(url);
        }
        let mut config: Config = table.try_into().context("invalid configuration")?;
        config.file = file.map(Path::to_path_buf);
        config.check()?;
        Ok(config)
    }

    /// Files of zarrgate's own that no `file://` object store may expose: the SQLite catalog
    /// (with its journal beside it) and the configuration file.
    pub fn own_files(&self) -> Vec<std::path::PathBuf> {
        let mut files: Vec<std::path::PathBuf> = self.file.iter().cloned().collect();
        if let Some(rest) = self.database_url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//").split('?').next().unwrap_or_default();
            if !path.is_empty() && path != ":memory:" {
                files.push(path.into());
            }
        }
        files
    }

    /// The listen address: `host:port`, where the host is an address or a name that resolves
    /// (`localhost:8080`; of the addresses a name has, the first IPv4 one, as most clients try
    /// it).
    pub fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        if let Ok(addr) = self.listen.parse() {
            return Ok(addr);
        }
        let hint = "give host:port, such as 127.0.0.1:8080, localhost:8080, [::1]:8080 or 0.0.0.0:8080";
        let resolved: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(self.listen.as_str())
            .with_context(|| format!("listen address {:?}: {hint}", self.listen))?
            .collect();
        resolved
            .iter()
            .find(|a| a.is_ipv4())
            .or(resolved.first())
            .copied()
            .with_context(|| format!("listen address {:?} resolves to no address: {hint}", self.listen))
    }

    fn check(&self) -> anyhow::Result<()> {
        self.listen_addr()?;
        if !matches!(self.log_format.as_str(), "text" | "json") {
            bail!("log_format must be \"text\" or \"json\", not {:?}", self.log_format);
        }
        if !matches!(self.http.missing_chunks.as_str(), "404" | "fill") {
            bail!("http.missing_chunks must be \"404\" or \"fill\", not {:?}", self.http.missing_chunks);
        }
        self.http.check()?;
        if !(1..=MAX_BLOCK_CHUNKS).contains(&self.block_chunks) {
            bail!("block_chunks must be between 1 and {MAX_BLOCK_CHUNKS}, not {}", self.block_chunks);
        }
        if self.ingest.max_concurrent == 0 {
            bail!("ingest.max_concurrent must be at least 1");
        }
        if self.admin_tokens.iter().any(|t| t.len() < 16) {
            bail!("admin tokens must be at least 16 characters long");
        }
        if self.read_tokens.iter().any(|t| t.len() < 16) {
            bail!("read tokens must be at least 16 characters long");
        }
        Ok(())
    }
}

fn merge(base: &mut toml::Value, over: toml::Value) {
    match (base, over) {
        (toml::Value::Table(b), toml::Value::Table(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Every scalar or list key of the defaults can be set as `ZARRGATE_<SECTION>_<KEY>`.
fn apply_env(
    table: &mut toml::Value,
    defaults: &toml::Value,
    prefix: &str,
    vars: &impl Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    let toml::Value::Table(defaults) = defaults else { return Ok(()) };
    for (key, default) in defaults {
        let name = format!("{prefix}_{}", key.to_ascii_uppercase());
        if let toml::Value::Table(_) = default {
            if let Some(slot) = table.get_mut(key) {
                apply_env(slot, default, &name, vars)?;
            }
            continue;
        }
        let Some(raw) = vars(&name) else { continue };
        let value = match default {
            toml::Value::Boolean(_) => toml::Value::Boolean(match raw.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" | "" => false,
                _ => bail!("{name}={raw:?} is not a boolean"),
            }),
            toml::Value::Integer(_) => {
                toml::Value::Integer(raw.trim().parse().with_context(|| format!("{name}={raw:?} is not an integer"))?)
            }
            toml::Value::Array(_) if key == "object_stores" => {
                bail!("{name}: declare object stores in the configuration file")
            }
            toml::Value::Array(_) => toml::Value::Array(
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| toml::Value::String(s.into()))
                    .collect(),
            ),
            _ => toml::Value::String(raw),
        };
        if let toml::Value::Table(t) = table {
            t.insert(key.clone(), value);
        }
    }
    Ok(())
}

impl HttpConfig {
    /// hyper reads a request head into a buffer of at most about 400 KiB.
    const MAX_HEADER_BYTES: u64 = 256 << 10;

    fn check(&self) -> anyhow::Result<()> {
        if self.max_connections == 0 {
            bail!("http.max_connections must be at least 1");
        }
        let timeouts = [
            ("header_read_timeout_seconds", self.header_read_timeout_seconds),
            ("idle_timeout_seconds", self.idle_timeout_seconds),
            ("request_body_timeout_seconds", self.request_body_timeout_seconds),
            ("send_timeout_seconds", self.send_timeout_seconds),
        ];
        if let Some((name, _)) = timeouts.iter().find(|(_, seconds)| *seconds == 0) {
            bail!("http.{name} must be at least 1");
        }
        if !(1024..=Self::MAX_HEADER_BYTES).contains(&self.max_header_bytes) {
            bail!(
                "http.max_header_bytes must be between 1024 and {}, not {}",
                Self::MAX_HEADER_BYTES,
                self.max_header_bytes
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_listen_address_may_name_its_host() {
        let at = |listen: &str| Config { listen: listen.into(), ..Config::default() }.listen_addr();
        assert_eq!(at("localhost:8080").map(|a| a.to_string()).unwrap_or_default(), "127.0.0.1:8080");
        assert_eq!(at("[::1]:9000").map(|a| a.to_string()).unwrap_or_default(), "[::1]:9000");
        let refused = at("localhost").err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(refused.contains("give host:port, such as 127.0.0.1:8080, localhost:8080"), "{refused}");
    }

    #[test]
    fn defaults_then_file_then_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("z.toml");
        std::fs::write(&file, "listen = \"0.0.0.0:9000\"\n[cache]\nblocks_bytes = 1000\n[[object_stores]]\nname = \"d\"\nurl = \"s3://b/\"\n").unwrap();
        let c = Config::load(
            Some(&file),
            env(&[
                ("ZARRGATE_CACHE_BLOCKS_BYTES", "2000"),
                ("DATABASE_URL", "postgres://u:pw@h/db"),
                ("ZARRGATE_ADMIN_TOKENS", "aaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbb"),
                ("ZARRGATE_READ_TOKENS", "rrrrrrrrrrrrrrrr"),
                ("ZARRGATE_HTTP_CORS", "false"),
            ]),
        )
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:9000");
        assert_eq!(c.cache.blocks_bytes, 2000);
        assert_eq!(c.cache.metadata_bytes, CacheConfig::default().metadata_bytes);
        assert_eq!(c.database_url, "postgres://u:pw@h/db");
        assert_eq!(c.admin_tokens.len(), 2);
        assert!(!c.http.cors);
        assert_eq!(c.object_stores[0].url, "s3://b/");
        assert_eq!(c.read_tokens, ["rrrrrrrrrrrrrrrr"]);
        let shown = format!("{c:?}");
        assert!(!shown.contains("pw") && !shown.contains("aaaa") && !shown.contains("rrrr"), "{shown}");
    }

    /// The shipped file, uncommented, is a valid configuration equal to the defaults, and it
    /// documents every key.
    #[test]
    fn the_shipped_file_documents_every_default() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/zarrgate.toml")).unwrap();
        let mut uncommented = String::new();
        for line in text.lines() {
            if line.starts_with('[') {
                uncommented.push_str(line);
                uncommented.push('\n');
                continue;
            }
            let Some(rest) = line.strip_prefix("# ") else { continue };
            let is_setting = rest.starts_with('[') && !rest.starts_with("[[")
                || rest.split_once(" = ").is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            if is_setting && !rest.starts_with("name") && !rest.starts_with("url") && !rest.starts_with("options") {
                uncommented.push_str(rest);
                uncommented.push('\n');
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("z.toml");
        std::fs::write(&file, &uncommented).unwrap();
        let loaded = Config::load(Some(&file), env(&[])).unwrap();
        let as_toml = |c: &Config| toml::Value::try_from(c).unwrap();
        assert_eq!(as_toml(&loaded), as_toml(&Config::default()), "documented defaults differ from the real ones");
        let documented: toml::Value = toml::from_str(&uncommented).unwrap();
        fn keys(v: &toml::Value, prefix: &str, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = v {
                for (k, v) in t {
                    let name = format!("{prefix}{k}");
                    if v.is_table() { keys(v, &format!("{name}."), out) } else { out.push(name) }
                }
            }
        }
        let (mut want, mut have) = (Vec::new(), Vec::new());
        keys(&as_toml(&Config::default()), "", &mut want);
        keys(&documented, "", &mut have);
        want.retain(|k| k != "object_stores");
        want.sort();
        have.sort();
        assert_eq!(have, want, "config/zarrgate.toml must document every key");
    }

    #[test]
    fn mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("z.toml");
        std::fs::write(&file, "[cache]\nblock_bytes = 1\n").unwrap();
        let err = format!("{:#}", Config::load(Some(&file), env(&[])).unwrap_err());
        assert!(err.contains("block_bytes"), "{err}");
        let err = format!("{:#}", Config::load(None, env(&[("ZARRGATE_HTTP_CORS", "maybe")])).unwrap_err());
        assert!(err.contains("ZARRGATE_HTTP_CORS"), "{err}");
        assert!(Config::load(None, env(&[("ZARRGATE_ADMIN_TOKENS", "short")])).is_err());
        assert!(Config::load(None, env(&[("ZARRGATE_LISTEN", "nowhere")])).is_err());
    }
}
