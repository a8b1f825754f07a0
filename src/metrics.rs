//! Prometheus metrics, declared once: each field's doc comment is its help text.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// A metric family that can be built from a name, help text and label names.
trait Family: Sized + Clone + prometheus::core::Collector + 'static {
    fn build(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self>;
}

impl Family for IntCounterVec {
    fn build(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        IntCounterVec::new(Opts::new(name, help), labels)
    }
}

impl Family for IntGaugeVec {
    fn build(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        IntGaugeVec::new(Opts::new(name, help), labels)
    }
}

/// A metric without labels.
impl Family for IntGauge {
    fn build(name: &str, help: &str, _labels: &[&str]) -> prometheus::Result<Self> {
        IntGauge::with_opts(Opts::new(name, help))
    }
}

/// A metric without labels.
impl Family for IntCounter {
    fn build(name: &str, help: &str, _labels: &[&str]) -> prometheus::Result<Self> {
        IntCounter::with_opts(Opts::new(name, help))
    }
}

impl Family for HistogramVec {
    fn build(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        let buckets = vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
    }
}

macro_rules! metrics {
    ($($(#[doc = $help:literal])+ $field:ident: $ty:ty = [$($label:literal),*],)*) => {
        /// Every metric the server exports, prefixed `zarrgate_`.
        #[derive(Debug, Clone)]
        pub struct Metrics {
            registry: Registry,
            $($(#[doc = $help])+ pub $field: $ty,)*
        }

        impl Metrics {
            /// Creates and registers every metric.
            pub fn new() -> prometheus::Result<Self> {
                let registry = Registry::new();
                $(
                    let help = [$($help.trim()),+].join(" ");
                    let $field = <$ty as Family>::build(concat!("zarrgate_", stringify!($field)), &help, &[$($label),*])?;
                    registry.register(Box::new($field.clone()))?;
                )*
                Ok(Self { registry, $($field,)* })
            }
        }
    };
}

metrics! {
    /// HTTP requests by route template, method and status.
    http_requests_total: IntCounterVec = ["route", "method", "status"],
    /// HTTP request latency to the response head, by route template, method and status.
    http_request_duration_seconds: HistogramVec = ["route", "method", "status"],
    /// HTTP connections being served now.
    http_connections_open: IntGauge = [],
    /// HTTP connections closed, by reason: `client` (the client closed it, or it ended after a
    /// response), `header_read_timeout`, `idle_timeout`, `send_timeout` (the watchdog closed a
    /// client too slow), `header_too_large` (answered 431), `protocol_error` (a request hyper
    /// could not parse, or a socket error), `refused` (beyond `http.max_connections`: answered
    /// 503) and `dropped` (beyond it while as many refusals were already under way: closed
    /// without a word).
    http_connections_closed_total: IntCounterVec = ["reason"],
    /// Requests to source object stores, by object store and outcome (ok or an error kind).
    upstream_requests_total: IntCounterVec = ["object_store", "outcome"],
    /// HTTP requests sent to remote object stores, by object store: every attempt, object_store's
    /// own retries of a failed request (up to `sources.retries`) included, so this exceeds
    /// `upstream_requests_total` by those retries.
    upstream_http_requests_total: IntCounterVec = ["object_store"],
    /// Upstream bodies that broke off and were resumed where they stopped (a ranged GET
    /// conditional on the first answer's ETag), by object store.
    upstream_retries_total: IntCounterVec = ["object_store"],
    /// Bytes received from source object stores.
    upstream_bytes_total: IntCounterVec = ["object_store"],
    /// Latency of source object store requests to the first byte.
    upstream_request_duration_seconds: HistogramVec = ["object_store"],
    /// Bytes of source objects served to readers, by object store (against
    /// zarrgate_upstream_bytes_total, the bytes fetched: coalescing and read-ahead fetch more).
    upstream_served_bytes_total: IntCounterVec = ["object_store"],
    /// Reads that joined an upstream request already in flight for the same bytes
    /// (single-flight) instead of making their own, by object store.
    upstream_joins_total: IntCounterVec = ["object_store"],
    /// Reads answered wholly from bytes already fetched (read ahead, or brought by a nearby
    /// read) with no upstream request, by object store.
    readahead_hits_total: IntCounterVec = ["object_store"],
    /// Bytes fetched ahead of or around reads that no read used (to a 64th of a block), counted
    /// when their block has left the read-ahead cache, by object store.
    readahead_wasted_bytes_total: IntCounterVec = ["object_store"],
    /// Cache lookups that found the value, by cache.
    cache_hits_total: IntCounterVec = ["cache"],
    /// Cache lookups that had to load the value, by cache.
    cache_misses_total: IntCounterVec = ["cache"],
    /// Bytes held by each byte-weighted cache (metadata, blocks, fills), as weighed.
    cache_bytes: IntGaugeVec = ["cache"],
    /// Entries in each cache.
    cache_entries: IntGaugeVec = ["cache"],
    /// Catalog query latency, by operation.
    catalog_query_duration_seconds: HistogramVec = ["operation"],
    /// 1 while the catalog database answers, 0 from a call that found it unreachable until one
    /// that succeeds (the server then serves cached stores only: degraded).
    catalog_up: IntGauge = [],
    /// 1 while the PostgreSQL change feed (LISTEN/NOTIFY) follows changes, 0 while it is lost
    /// (cached current versions are then trusted for `cache.current_version_ttl_ms` only).
    catalog_change_feed_up: IntGauge = [],
    /// Catalog calls answered at once (503) because the database was found unreachable moments
    /// before.
    catalog_refused_total: IntCounter = [],
    /// Reads served from a store's last known version because the catalog was unreachable
    /// (at most `cache.unavailable_ttl_seconds` after that version was read from it).
    catalog_stale_reads_total: IntCounter = [],
    /// Store registrations, by outcome (created, replaced, rejected).
    registrations_total: IntCounterVec = ["outcome"],
    /// Always 1; the labels say which build is running.
    build_info: IntGaugeVec = ["version"],
}

impl Metrics {
    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if TextEncoder::new().encode(&self.registry.gather(), &mut out).is_err() {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
