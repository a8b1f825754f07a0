//! Upstream metering: requests by outcome, bytes and time to the response head, by object store,
//! with each store's label handles bound once (not looked up on every read).

use prometheus::{Histogram, IntCounter};

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
        }
    }
}

/// Counts a read that failed before its first byte, by its kind.
pub(super) fn count_failure(metrics: &Metrics, e: &SourceError) {
    metrics.upstream_requests_total.with_label_values(&[e.store(), e.kind()]).inc();
}
