//! Prometheus metrics, declared once: each field's doc comment is its help text.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily, MetricType};
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

/// The upper bounds of every latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 15] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

impl Family for HistogramVec {
    fn build(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        HistogramVec::new(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()), labels)
    }
}

impl Family for HttpRequests {
    fn build(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        HttpRequests::new(name, help, labels)
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
    /// HTTP request latency to the response head, by route template, method and status.
    http_request_duration_seconds: HttpRequests = ["route", "method", "status"],
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
    /// Changes made through any replica (this one included) that the change feed brought and
    /// this replica applied, by kind (store: its cached heads forgotten; object_stores: the
    /// object stores reloaded). Flat while other replicas register stores: this one is not
    /// hearing of them.
    catalog_changes_applied_total: IntCounterVec = ["kind"],
    /// Catalog calls answered at once (503) because the database was found unreachable moments
    /// before.
    catalog_refused_total: IntCounter = [],
    /// Reads served from a store's last known version because the catalog was unreachable
    /// (at most `cache.unavailable_ttl_seconds` after that version was read from it).
    catalog_stale_reads_total: IntCounter = [],
    /// Store registrations, by outcome (created, replaced, rejected).
    registrations_total: IntCounterVec = ["outcome"],
    /// Files whose structure was read (`?format=files`), by parser (hdf5, netcdf3, dmrpp, fits) and
    /// outcome (ok, invalid: the file is malformed or past a `files.*` bound, upstream: reading
    /// it failed, cached: the same content's parse was found in the catalog and not made again).
    parse_files_total: IntCounterVec = ["parser", "outcome"],
    /// Bytes read from object stores to parse files (metadata only), by parser.
    parse_bytes_total: IntCounterVec = ["parser"],
    /// Ranged reads made to parse files, by parser.
    parse_requests_total: IntCounterVec = ["parser"],
    /// Time to parse one file, reads included, by parser.
    parse_duration_seconds: HistogramVec = ["parser"],
    /// Assembled chunks (made by zarrgate from pieces of joined files' chunks, at seams where the
    /// files do not line up with the chunk grid) built, by outcome: ok, invalid (a piece or the
    /// result the array's codecs refused: the read answers 500), upstream (a piece could not be
    /// read), busy (`assemble.queue` chunks were already waiting: answered 503). A chunk served
    /// from memory is a hit of cache `assembled` in zarrgate_cache_hits_total.
    assembled_chunks_total: IntCounterVec = ["outcome"],
    /// Time to build one assembled chunk, by phase: `read` (its pieces fetched), `wait` (for a
    /// worker of the bounded pool), `cpu` (decoded, cut, joined and encoded again), and `decode`
    /// (the part of `cpu` that decoded the pieces).
    assembled_chunk_seconds: HistogramVec = ["phase"],
    /// Chunks of arrays served with portable codecs (`?codecs=portable`) transcoded from their
    /// file's codecs, by outcome, as zarrgate_assembled_chunks_total counts assembled ones (they
    /// share its pool and its cache `assembled`).
    transcoded_chunks_total: IntCounterVec = ["outcome"],
    /// Time to transcode one chunk, by phase, as zarrgate_assembled_chunk_seconds's.
    transcoded_chunk_seconds: HistogramVec = ["phase"],
    /// Rescans of stores made from files under a prefix (`follow_seconds`, `POST .../sync`), by
    /// outcome (unchanged: no file added, changed or removed; new_version; failed).
    files_rescans_total: IntCounterVec = ["outcome"],
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

/// `zarrgate_http_request_duration_seconds` (a histogram) and `zarrgate_http_requests_total` (its
/// count, as a counter of its own), counted by each worker thread in series of its own and summed
/// when collected. Every request is counted in them: with one series per label set shared by
/// every thread, each request wrote five counters (the counter, the histogram's count, bucket and
/// sum) in memory that every core writes, each write a cache line taken from the other cores.
/// Here a thread's series lives in its own lines.
#[derive(Debug, Clone)]
pub struct HttpRequests(Arc<Families>);

#[derive(Debug)]
struct Families {
    durations: Desc,
    requests: Desc,
    series: Mutex<Vec<Arc<RequestSeries>>>,
}

/// One thread's counts of one route, method and status: the requests in each latency bucket
/// (the last above every bound) and their total seconds.
#[derive(Debug)]
pub struct RequestSeries {
    labels: [String; 3],
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// The total, as the bits of an `f64`: written by the series' thread only.
    seconds: AtomicU64,
}

impl RequestSeries {
    /// Counts a request that took `seconds`. Only ever called by the thread that asked for the
    /// series ([`HttpRequests::series`]): the sum is read and written back, not added atomically.
    pub fn observe(&self, seconds: f64) {
        let at = LATENCY_BUCKETS.iter().position(|bound| seconds <= *bound).unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[at].fetch_add(1, Ordering::Relaxed);
        let total = f64::from_bits(self.seconds.load(Ordering::Relaxed)) + seconds;
        self.seconds.store(total.to_bits(), Ordering::Relaxed);
    }
}

impl HttpRequests {
    fn new(name: &str, help: &str, labels: &[&str]) -> prometheus::Result<Self> {
        let labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        let requests = Desc::new(
            "zarrgate_http_requests_total".to_owned(),
            "HTTP requests by route template, method and status.".to_owned(),
            labels.clone(),
            Default::default(),
        )?;
        let durations = Desc::new(name.to_owned(), help.to_owned(), labels, Default::default())?;
        Ok(Self(Arc::new(Families { durations, requests, series: Mutex::new(Vec::new()) })))
    }

    /// A new series of `route`, `method` and `status`, for the calling thread alone.
    pub fn series(&self, route: &str, method: &str, status: &str) -> Arc<RequestSeries> {
        let series = Arc::new(RequestSeries {
            labels: [route.to_owned(), method.to_owned(), status.to_owned()],
            buckets: Default::default(),
            seconds: AtomicU64::new(0f64.to_bits()),
        });
        self.0.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(series.clone());
        series
    }
}

impl Collector for HttpRequests {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0.durations, &self.0.requests]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let this = &self.0;
        // Every thread's series of a label set summed; the count is the buckets' sum, so that
        // the histogram's buckets, its count and the counter always agree.
        let mut summed: BTreeMap<&[String; 3], ([u64; LATENCY_BUCKETS.len() + 1], f64)> = BTreeMap::new();
        let series = this.series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for one in series.iter() {
            let (buckets, seconds) = summed.entry(&one.labels).or_default();
            for (sum, bucket) in buckets.iter_mut().zip(&one.buckets) {
                *sum += bucket.load(Ordering::Relaxed);
            }
            *seconds += f64::from_bits(one.seconds.load(Ordering::Relaxed));
        }
        // Sorted by name, as the metric vectors write theirs.
        let label_pairs = |desc: &Desc, values: &[String; 3]| {
            let mut pairs: Vec<_> = desc
                .variable_labels
                .iter()
                .zip(values)
                .map(|(name, value)| {
                    let mut pair = proto::LabelPair::default();
                    pair.set_name(name.clone());
                    pair.set_value(value.clone());
                    pair
                })
                .collect();
            pairs.sort_by(|a, b| a.name().cmp(b.name()));
            pairs
        };
        let (mut durations, mut requests) = (Vec::with_capacity(summed.len()), Vec::with_capacity(summed.len()));
        for (labels, (buckets, seconds)) in &summed {
            let count: u64 = buckets.iter().sum();
            let mut histogram = proto::Histogram::default();
            histogram.set_sample_count(count);
            histogram.set_sample_sum(*seconds);
            let mut cumulative = 0;
            histogram.set_bucket(
                LATENCY_BUCKETS
                    .iter()
                    .zip(buckets)
                    .map(|(bound, n)| {
                        cumulative += n;
                        let mut bucket = proto::Bucket::default();
                        bucket.set_cumulative_count(cumulative);
                        bucket.set_upper_bound(*bound);
                        bucket
                    })
                    .collect(),
            );
            let mut metric = proto::Metric::default();
            metric.set_label(label_pairs(&this.durations, labels));
            metric.set_histogram(histogram);
            durations.push(metric);
            let mut counter = proto::Counter::default();
            counter.set_value(count as f64);
            let mut metric = proto::Metric::default();
            metric.set_label(label_pairs(&this.requests, labels));
            metric.set_counter(counter);
            requests.push(metric);
        }
        let family = |desc: &Desc, kind, metrics| {
            let mut family = MetricFamily::default();
            family.set_name(desc.fq_name.clone());
            family.set_help(desc.help.clone());
            family.set_field_type(kind);
            family.set_metric(metrics);
            family
        };
        vec![
            family(&this.durations, MetricType::HISTOGRAM, durations),
            family(&this.requests, MetricType::COUNTER, requests),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the families say, as text, for requests counted by several threads: the same text as
    /// a counter vector and a histogram vector counting the same requests in shared series.
    #[test]
    fn per_thread_series_read_as_shared_ones() {
        let metrics = Metrics::new().unwrap();
        let requests = [
            // Sums exact in binary, whatever the order they are added in.
            ("/{store}/{*key}", "GET", "200", 0.0001220703125),
            ("/{store}/{*key}", "GET", "200", 0.00390625),
            ("/{store}/{*key}", "GET", "404", 0.75),
            ("/api/v1/stores", "PUT", "201", 42.0),
        ];
        // Two threads, each with its own series of every label set.
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for (route, method, status, seconds) in requests {
                        metrics.http_request_duration_seconds.series(route, method, status).observe(seconds);
                    }
                });
            }
        });
        let reference = Registry::new();
        let labels = ["route", "method", "status"];
        let counter = IntCounterVec::new(
            Opts::new("zarrgate_http_requests_total", "HTTP requests by route template, method and status."),
            &labels,
        )
        .unwrap();
        let help = "HTTP request latency to the response head, by route template, method and status.";
        let histogram = HistogramVec::build("zarrgate_http_request_duration_seconds", help, &labels).unwrap();
        reference.register(Box::new(counter.clone())).unwrap();
        reference.register(Box::new(histogram.clone())).unwrap();
        for _ in 0..2 {
            for (route, method, status, seconds) in requests {
                counter.with_label_values(&[route, method, status]).inc();
                histogram.with_label_values(&[route, method, status]).observe(seconds);
            }
        }
        let mut expected = Vec::new();
        TextEncoder::new().encode(&reference.gather(), &mut expected).unwrap();
        let expected = String::from_utf8(expected).unwrap();
        let rendered = metrics.render();
        let ours: Vec<&str> = rendered.lines().filter(|l| l.contains("zarrgate_http_request")).collect();
        assert_eq!(ours, expected.lines().collect::<Vec<_>>());
        assert!(
            rendered.contains(r#"zarrgate_http_requests_total{method="GET",route="/{store}/{*key}",status="200"} 4"#)
        );
    }
}
