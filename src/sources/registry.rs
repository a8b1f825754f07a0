//! The registry of object stores: builds object_store clients from a URL prefix and options,
//! and resolves a source URL to the store with the longest matching prefix.

use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, RetryConfig};
use serde_json::{Map, Value};
use url::Url;

use super::connector::{ConfinedConnector, Sent};
use super::error::SourceConfigError;
use super::flight::Blocks;
use super::meter::StoreMeters;
use super::options::{Kind, Signing, api_policy, plain_http, string_options};
use super::readahead::{self, ReadAheadSettings};
use crate::metrics::Metrics;

/// Timeouts and retries for every client, set for a proxy: seconds, not minutes.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Budget for one upstream request, retries included.
    pub timeout: Duration,
    /// Budget for establishing a connection.
    pub connect_timeout: Duration,
    /// Retries of transient failures.
    pub retries: usize,
    /// Requests in flight to one object store at most.
    pub max_concurrent: usize,
    /// Chunks of at most this many bytes from remote object stores are read whole before the
    /// answer starts (a failure is then a clean 502/504); larger ones stream.
    pub buffer_bytes: u64,
    /// s3/gs/az stores registered over the API with no credentials of their own may use the
    /// server's ambient identity (instance metadata, workload identity); otherwise they read
    /// anonymously.
    pub api_ambient_credentials: bool,
    /// Read-ahead, coalescing and single-flight of remote object stores, unless their options
    /// say otherwise.
    pub readahead: ReadAheadSettings,
}

/// Who declared an object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The configuration file (read-only over the API).
    Config,
    /// The REST API (stored in the catalog).
    Api,
}

/// How object paths are derived from a source URL.
#[derive(Debug)]
pub(super) enum Base {
    /// A directory: paths are relative to it; canonical root for escape checks.
    Local(super::local::LocalFiles),
    /// A bucket or container: the object key is the URL path.
    Bucket,
    /// An HTTP(S) base URL: the path after the prefix.
    Http,
}

/// One registered object store.
#[derive(Debug)]
pub struct ObjectStoreEntry {
    /// Its name.
    pub name: String,
    /// Its normalised URL prefix, ending in `/`.
    pub prefix: String,
    /// Its options as given (may hold secrets).
    pub options: Map<String, Value>,
    /// Configuration file or API.
    pub origin: Origin,
    pub(super) base: Base,
    pub(super) client: Option<Arc<dyn ObjectStore>>,
    /// Its upstream counters, bound on first use.
    pub(super) meters: std::sync::OnceLock<StoreMeters>,
    /// Its HTTP requests, each attempt counted (bound with `meters`).
    pub(super) sent: Sent,
    /// Slots of requests in flight to it (`sources.max_concurrent_per_store`).
    pub(super) slots: Arc<tokio::sync::Semaphore>,
    /// Its `first_byte_timeout` option: time to the response head of each request (else
    /// `sources.timeout_seconds`).
    pub(super) first_byte_timeout: Option<Duration>,
    /// Its blocks fetched and being fetched (none when read-ahead is off, and for `file://`).
    pub(super) blocks: Option<Blocks>,
}

impl ObjectStoreEntry {
    /// Builds the client for `url` with `options`. `file://` URLs must name an existing directory.
    pub fn build(
        name: &str,
        url: &str,
        options: &Map<String, Value>,
        origin: Origin,
        settings: &SourceSettings,
    ) -> Result<Self, SourceConfigError> {
        let prefix = normalize_prefix(url)?;
        let parsed = Url::parse(&prefix).map_err(|e| SourceConfigError::Url(format!("{url} is not a URL: {e}")))?;
        let mut opts = string_options(options)?;
        let first_byte_timeout = first_byte_timeout(&mut opts)?;
        let local_readahead =
            opts.iter().find(|(k, _)| readahead::OPTIONS.contains(&k.as_str())).map(|(k, _)| k.clone());
        let readahead = settings.readahead.with_options(&mut opts)?;
        plain_http(&parsed, &mut opts)?;
        let sent = Sent::default();
        let (base, client): (Base, Option<Arc<dyn ObjectStore>>) = match parsed.scheme() {
            "file" => {
                if let Some(key) = local_readahead {
                    return Err(SourceConfigError::Option(format!(
                        "{key}: file:// object stores are read from disk as asked, without read-ahead"
                    )));
                }
                if !opts.is_empty() || first_byte_timeout.is_some() {
                    return Err(SourceConfigError::Option(
                        "file:// object stores take no options (first_byte_timeout and the client options apply to \
                         remote stores only)"
                            .into(),
                    ));
                }
                let dir =
                    parsed.to_file_path().map_err(|()| SourceConfigError::Url(format!("{url} is not a local path")))?;
                let root = std::fs::canonicalize(&dir)
                    .ok()
                    .filter(|p| p.is_dir())
                    .ok_or_else(|| SourceConfigError::Url(format!("{} is not an existing directory", dir.display())))?;
                (Base::Local(super::local::LocalFiles::new(root)), None)
            }
            "s3" => {
                (Base::Bucket, Some(build_bucket::<AmazonS3Builder>(&prefix, &parsed, &opts, origin, settings, &sent)?))
            }
            "gs" => (
                Base::Bucket,
                Some(build_bucket::<GoogleCloudStorageBuilder>(&prefix, &parsed, &opts, origin, settings, &sent)?),
            ),
            "az" => (
                Base::Bucket,
                Some(build_bucket::<MicrosoftAzureBuilder>(&prefix, &parsed, &opts, origin, settings, &sent)?),
            ),
            "http" | "https" => {
                // Without the trailing slash: object_store appends each path segment after a `/`,
                // so `http://h/files/` would fetch `http://h/files//a.nc` (another key on S3 or GCS).
                let mut base = parsed.clone();
                if let Ok(mut segments) = base.path_segments_mut() {
                    segments.pop_if_empty();
                }
                let mut client = client_options(settings);
                let mut keys = Vec::with_capacity(opts.len());
                for (k, v) in &opts {
                    let key = ClientConfigKey::from_str(k).map_err(|_| unknown_option(k, "http"))?;
                    keys.push((key.as_ref().to_owned(), v.as_str()));
                    client = client.with_config(key, v);
                }
                if origin == Origin::Api {
                    api_policy(Kind::Http, &keys, settings.api_ambient_credentials)?;
                }
                let b = HttpBuilder::new()
                    .with_url(base.as_str())
                    .with_retry(retry(settings))
                    .with_client_options(client)
                    .with_http_connector(ConfinedConnector::under(parsed.clone()).counting(&sent));
                (Base::Http, Some(Arc::new(b.build().map_err(|e| build_error(&prefix, e))?)))
            }
            other => {
                return Err(SourceConfigError::Url(format!(
                    "scheme {other:?} is not supported (file, s3, gs, az, http, https)"
                )));
            }
        };
        let blocks = (readahead.enabled && client.is_some()).then(|| Blocks::new(readahead));
        Ok(Self {
            name: name.to_owned(),
            prefix,
            options: options.clone(),
            origin,
            base,
            client,
            meters: std::sync::OnceLock::new(),
            sent,
            slots: Arc::new(tokio::sync::Semaphore::new(settings.max_concurrent.max(1))),
            first_byte_timeout,
            blocks,
        })
    }

    /// The directory of a `file://` store (canonical).
    pub fn local_root(&self) -> Option<&std::path::Path> {
        match &self.base {
            Base::Local(files) => Some(files.root()),
            _ => None,
        }
    }

    /// The object path of `url` (which starts with this store's prefix) inside the client.
    pub(super) fn object_path(&self, url: &str) -> Option<Path> {
        let rest = url.strip_prefix(&self.prefix)?;
        match &self.base {
            Base::Local(_) | Base::Http => Path::from_url_path(rest).ok(),
            Base::Bucket => Path::from_url_path(Url::parse(url).ok()?.path()).ok(),
        }
    }
}

fn normalize_prefix(url: &str) -> Result<String, SourceConfigError> {
    let mut parsed = Url::parse(url).map_err(|e| SourceConfigError::Url(format!("{url} is not a URL: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // The URL is listed by the API and written to logs: no secret may live in it.
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        return Err(SourceConfigError::Url(format!(
            "{parsed} (credentials removed): an object store URL must not carry credentials; \
             give them in \"options\" (they are never returned by the API)"
        )));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(SourceConfigError::Url(format!("{url}: an object store URL has no query or fragment")));
    }
    if parsed.path().split('/').any(|s| s == "..") {
        return Err(SourceConfigError::Url(format!("{url} contains `..`")));
    }
    if !parsed.path().ends_with('/') {
        let path = format!("{}/", parsed.path());
        parsed.set_path(&path);
    }
    if matches!(parsed.scheme(), "s3" | "gs" | "az") && parsed.host_str().is_none_or(str::is_empty) {
        return Err(SourceConfigError::Url(format!("{url} names no bucket")));
    }
    Ok(parsed.to_string())
}

/// zarrgate's own option `first_byte_timeout` (a duration, `"2s"`), taken out of the options
/// given to object_store, which does not know it.
fn first_byte_timeout(opts: &mut Vec<(String, String)>) -> Result<Option<Duration>, SourceConfigError> {
    let Some(at) = opts.iter().position(|(k, _)| k == FIRST_BYTE_TIMEOUT) else { return Ok(None) };
    let (_, value) = opts.remove(at);
    match humantime::parse_duration(&value) {
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        _ => Err(SourceConfigError::Option(format!(
            "{FIRST_BYTE_TIMEOUT} must be a duration such as \"2s\" or \"500ms\", not {value:?}"
        ))),
    }
}

/// The option naming the time to the response head of each upstream request.
pub(super) const FIRST_BYTE_TIMEOUT: &str = "first_byte_timeout";

fn unknown_option(key: &str, kind: &str) -> SourceConfigError {
    SourceConfigError::Option(format!("unknown {kind} option {key:?}"))
}

fn build_error(url: &str, e: object_store::Error) -> SourceConfigError {
    SourceConfigError::Build { url: url.to_owned(), detail: e.to_string() }
}

fn retry(settings: &SourceSettings) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: settings.retries,
        retry_timeout: settings.timeout,
    }
}

/// No limit on a whole request: a large chunk streamed to a slow reader may take minutes. The
/// time to the response head is bounded by the fetch itself (`sources.timeout_seconds`), a
/// connection by `connect_timeout`, and a body that stalls by the same budget between reads.
fn client_options(settings: &SourceSettings) -> ClientOptions {
    ClientOptions::new()
        .with_timeout_disabled()
        .with_read_timeout(settings.timeout)
        .with_connect_timeout(settings.connect_timeout)
}

fn bucket_url(parsed: &Url) -> String {
    format!("{}://{}", parsed.scheme(), parsed.host_str().unwrap_or_default())
}

/// The builders of the bucket object stores (s3, gs, az), which differ only in their types.
trait BucketBuilder: Sized {
    type Key: FromStr + AsRef<str>;
    const KIND: Kind;
    fn fresh(origin: Origin) -> Self;
    fn url(self, url: String) -> Self;
    fn settings(self, s: &SourceSettings, sent: &Sent) -> Self;
    fn config(self, key: Self::Key, value: &str) -> Self;
    fn finish(self) -> object_store::Result<Arc<dyn ObjectStore>>;
}

macro_rules! bucket_builder {
    ($builder:ty, $key:ty, $kind:expr) => {
        impl BucketBuilder for $builder {
            type Key = $key;
            const KIND: Kind = $kind;
            /// Stores declared in the configuration file also read credentials from the environment.
            fn fresh(origin: Origin) -> Self {
                if origin == Origin::Config { <$builder>::from_env() } else { <$builder>::new() }
            }
            fn url(self, url: String) -> Self {
                self.with_url(url)
            }
            fn settings(self, s: &SourceSettings, sent: &Sent) -> Self {
                self.with_retry(retry(s))
                    .with_client_options(client_options(s))
                    .with_http_connector(ConfinedConnector::same_origin().counting(sent))
            }
            fn config(self, key: $key, value: &str) -> Self {
                self.with_config(key, value)
            }
            fn finish(self) -> object_store::Result<Arc<dyn ObjectStore>> {
                Ok(Arc::new(self.build()?))
            }
        }
    };
}

bucket_builder!(AmazonS3Builder, AmazonS3ConfigKey, Kind::S3);
bucket_builder!(GoogleCloudStorageBuilder, GoogleConfigKey, Kind::Gcs);
bucket_builder!(MicrosoftAzureBuilder, AzureConfigKey, Kind::Azure);

fn build_bucket<B: BucketBuilder>(
    prefix: &str,
    parsed: &Url,
    opts: &[(String, String)],
    origin: Origin,
    s: &SourceSettings,
    sent: &Sent,
) -> Result<Arc<dyn ObjectStore>, SourceConfigError> {
    let mut b = B::fresh(origin).url(bucket_url(parsed)).settings(s, sent);
    let mut keys = Vec::with_capacity(opts.len());
    for (k, v) in opts {
        let key = B::Key::from_str(k).map_err(|_| unknown_option(k, B::KIND.name()))?;
        keys.push((key.as_ref().to_owned(), v.as_str()));
        b = b.config(key, v);
    }
    // Whoever holds an admin token must not publish what the server's own cloud identity can
    // read: a store registered over the API without credentials of its own reads anonymously.
    if origin == Origin::Api && api_policy(B::KIND, &keys, s.api_ambient_credentials)? == Signing::Anonymous {
        let key = B::Key::from_str("skip_signature").map_err(|_| unknown_option("skip_signature", B::KIND.name()))?;
        b = b.config(key, "true");
    }
    b.finish().map_err(|e| build_error(prefix, e))
}

/// All object stores, resolved by longest prefix.
#[derive(Debug)]
pub struct SourceRegistry {
    entries: RwLock<Arc<Vec<Arc<ObjectStoreEntry>>>>,
    /// Timeouts and retries for every client.
    pub settings: SourceSettings,
    /// Where upstream reads are counted (none in unit tests).
    pub(super) metrics: Option<Metrics>,
}

impl SourceRegistry {
    /// An empty registry.
    pub fn new(settings: SourceSettings) -> Self {
        Self { entries: RwLock::new(Arc::new(Vec::new())), settings, metrics: None }
    }

    /// An empty registry counting its upstream reads in `metrics`.
    pub fn metered(settings: SourceSettings, metrics: &Metrics) -> Self {
        Self { metrics: Some(metrics.clone()), ..Self::new(settings) }
    }

    /// Replaces every entry.
    pub fn replace(&self, mut entries: Vec<Arc<ObjectStoreEntry>>) {
        if let Some(metrics) = &self.metrics {
            for entry in &entries {
                entry.sent.get_or_init(|| metrics.upstream_http_requests_total.with_label_values(&[&entry.name]));
            }
        }
        entries.sort_by(|a, b| b.prefix.len().cmp(&a.prefix.len()).then_with(|| a.name.cmp(&b.name)));
        if let Ok(mut guard) = self.entries.write() {
            *guard = Arc::new(entries);
        }
    }

    /// Every entry, longest prefix first.
    pub fn entries(&self) -> Arc<Vec<Arc<ObjectStoreEntry>>> {
        self.entries.read().map(|g| g.clone()).unwrap_or_default()
    }

    /// Closes, every `every`, the local files kept open past their time, for as long as the
    /// registry lives (see `local::LocalFiles::close_expired`): an idle file is closed within
    /// two ticks of its time ending.
    pub async fn close_expired_files(registry: std::sync::Weak<Self>, every: std::time::Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(registry) = registry.upgrade() else { return };
            for entry in registry.entries().iter() {
                if let Base::Local(files) = &entry.base {
                    files.close_expired();
                }
            }
        }
    }

    /// The store serving `url`: the one with the longest prefix of it.
    pub fn resolve(&self, url: &str) -> Option<Arc<ObjectStoreEntry>> {
        self.entries().iter().find(|e| url.starts_with(&e.prefix)).cloned()
    }

    /// The entry named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<ObjectStoreEntry>> {
        self.entries().iter().find(|e| e.name == name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> SourceSettings {
        SourceSettings {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            retries: 1,
            max_concurrent: 4,
            buffer_bytes: 1 << 20,
            api_ambient_credentials: false,
            readahead: ReadAheadSettings::default(),
        }
    }

    fn entry(name: &str, url: &str, options: Value) -> Result<ObjectStoreEntry, SourceConfigError> {
        ObjectStoreEntry::build(name, url, options.as_object().unwrap(), Origin::Api, &settings())
    }

    #[test]
    fn longest_prefix_wins() {
        let registry = SourceRegistry::new(settings());
        registry.replace(vec![
            Arc::new(entry("all", "s3://bucket", json!({"region": "eu-west-1", "skip_signature": true})).unwrap()),
            Arc::new(entry("deep", "s3://bucket/era5/", json!({"region": "eu-west-1"})).unwrap()),
        ]);
        assert_eq!(registry.resolve("s3://bucket/era5/x.nc").unwrap().name, "deep");
        assert_eq!(registry.resolve("s3://bucket/era50/x.nc").unwrap().name, "all");
        assert!(registry.resolve("s3://other/x.nc").is_none());
        let deep = registry.get("deep").unwrap();
        assert_eq!(deep.object_path("s3://bucket/era5/a%20b.nc").unwrap().as_ref(), "era5/a b.nc");
    }

    #[test]
    fn plain_http_is_allowed_when_asked_for_and_a_contradiction_is_refused() {
        for (url, options) in [
            ("http://example.org/files/", json!({})),
            ("s3://bucket/", json!({"endpoint": "http://127.0.0.1:9000", "region": "us-east-1"})),
        ] {
            assert!(entry("plain", url, options.clone()).is_ok(), "{url} {options}");
            let mut refused = options;
            refused["allow_http"] = json!(false);
            let e = entry("plain", url, refused).unwrap_err().to_string();
            assert!(e.contains("allow_http is false"), "{e}");
        }
    }

    #[test]
    fn gcs_and_azure_stores_build_and_resolve() {
        let registry = SourceRegistry::new(settings());
        registry.replace(vec![
            Arc::new(entry("gcs", "gs://era5-bucket/ar/", json!({"skip_signature": true})).unwrap()),
            Arc::new(
                entry("azure", "az://container/data", json!({"account_name": "acct", "skip_signature": true})).unwrap(),
            ),
        ]);
        assert_eq!(registry.resolve("gs://era5-bucket/ar/t.nc").unwrap().name, "gcs");
        assert_eq!(registry.resolve("az://container/data/t.nc").unwrap().name, "azure");
        assert_eq!(
            registry.get("azure").unwrap().object_path("az://container/data/x%201.nc").unwrap().as_ref(),
            "data/x 1.nc"
        );
        assert!(registry.resolve("gs://era5-bucket/other/t.nc").is_none());
        let unknown = entry("g", "gs://b/", json!({"regoin": "x"})).unwrap_err().to_string();
        assert!(unknown.contains("regoin"), "{unknown}");
    }

    #[test]
    fn credentials_in_urls_are_refused_without_being_echoed() {
        let e = entry("h", "https://user:s3cret@example.org/files/", json!({})).unwrap_err().to_string();
        assert!(e.contains("must not carry credentials") && !e.contains("s3cret") && !e.contains("user"), "{e}");
    }

    #[test]
    fn local_stores_need_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let url = Url::from_directory_path(dir.path()).unwrap();
        let e = entry("local", url.as_str(), json!({})).unwrap();
        assert!(e.prefix.ends_with('/'));
        assert_eq!(e.object_path(&format!("{}sub/x.nc", e.prefix)).unwrap().as_ref(), "sub/x.nc");
        let missing = entry("gone", "file:///no/such/dir/", json!({})).unwrap_err().to_string();
        assert!(missing.contains("not an existing directory"), "{missing}");
    }

    #[test]
    fn bad_urls_and_options_are_named() {
        assert!(
            entry("x", "s3://bucket/", json!({"regoin": "x"}))
                .unwrap_err()
                .to_string()
                .contains("unknown s3 option \"regoin\"")
        );
        assert!(entry("x", "ftp://host/", json!({})).unwrap_err().to_string().contains("not supported"));
        assert!(entry("x", "s3:///", json!({})).is_err());
        assert!(
            entry("x", "https://h/a/../b/", json!({})).is_err()
                || entry("x", "https://h/a/../b/", json!({})).unwrap().prefix == "https://h/b/"
        );
    }
}
