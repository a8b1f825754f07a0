//! Upstream metering: requests by outcome, bytes and time to the response head, by object store,
//! with each store's label handles bound once (not looked up on every read).

use prometheus::{Histogram, IntCounter, IntCounterVec};

use super::SourceError;
use crate::metrics::Metrics;

/// One object store's upstream counters.
#[derive(Debug, Clone)]
pub(super) struct StoreMeters {
    /// Reads whose last byte has passed.
    pub ok: IntCounter,
    /// Reads that failed mid-body (the response was aborted).
    pub aborted: IntCounter,
    /// Bytes received.
    pub bytes: IntCounter,
    /// Bodies that broke off and were resumed where they stopped.
    pub retries: IntCounter,
    /// Time to the response head.
    pub duration: Histogram,
    /// Bytes served to readers (against `bytes`, those fetched).
    pub served: IntCounter,
    /// Reads that joined an upstream request in flight for the same bytes.
    pub joins: IntCounter,
    /// Reads answered from blocks already fetched, with no upstream request.
    pub hits: IntCounter,
    /// Bytes fetched (ahead of or around reads) and evicted unread.
    pub wasted: IntCounter,
    /// Requests by outcome, for failures counted by kind.
    requests: IntCounterVec,
}

impl StoreMeters {
    /// Binds the label handles of object store `store`.
    pub fn bind(metrics: &Metrics, store: &str) -> Self {
        Self {
            ok: metrics.upstream_requests_total.with_label_values(&[store, "ok"]),
            aborted: metrics.upstream_requests_total.with_label_values(&[store, "aborted"]),
            bytes: metrics.upstream_bytes_total.with_label_values(&[store]),
            retries: metrics.upstream_retries_total.with_label_values(&[store]),
            duration: metrics.upstream_request_duration_seconds.with_label_values(&[store]),
            served: metrics.upstream_served_bytes_total.with_label_values(&[store]),
            joins: metrics.upstream_joins_total.with_label_values(&[store]),
            hits: metrics.readahead_hits_total.with_label_values(&[store]),
            wasted: metrics.readahead_wasted_bytes_total.with_label_values(&[store]),
            requests: metrics.upstream_requests_total.clone(),
        }
    }

    /// Counts a request that failed before its first byte, by its kind.
    pub fn failed(&self, e: &SourceError) {
        self.requests.with_label_values(&[e.store(), e.kind()]).inc();
    }
}

/// Counts a read that failed before its first byte, by its kind.
pub(super) fn count_failure(metrics: &Metrics, e: &SourceError) {
    metrics.upstream_requests_total.with_label_values(&[e.store(), e.kind()]).inc();
}
