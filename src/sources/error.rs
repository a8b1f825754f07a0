//! Why a source object cannot be read, and why an object store cannot be registered.

use std::ops::Range;

use crate::zarr::source::SourceCheck;

/// A failure reading a source object. Every variant is an upstream fault (5xx), never "missing".
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// No object store serves the URL (it was removed after registration).
    #[error("{url} is not under any registered object store")]
    Unregistered { url: String },
    /// The object is gone.
    #[error("source object {url} does not exist in object store {store} (deleted or moved?)")]
    NotFound { url: String, store: String },
    /// The object store refused access; `detail` (the upstream's answer, which may quote the
    /// signed request) is logged, not shown to clients.
    #[error(
        "object store {store} refused access to {url}: check its credentials and permissions; the server log has the upstream's answer"
    )]
    Forbidden { url: String, store: String, detail: String },
    /// The object's ETag (or, when it has none, its size) differs from the one recorded at
    /// registration.
    #[error(
        "source object {url} changed since registration (recorded: {recorded}): its bytes no longer match the manifest. \
         Register the store again from new references; or, if the file was rewritten with its bytes where the \
         references say, record it as it is now: `zarrgate stores export STORE > m.json && \
         zarrgate stores put STORE m.json --record-sources` (PUT ?record_sources=true)"
    )]
    Modified { url: String, store: String, recorded: String },
    /// The object is shorter than the manifest says.
    #[error(
        "source object {url} is shorter than the manifest says: it ends at byte {size}, the chunk needs bytes up to {needed}"
    )]
    Truncated { url: String, store: String, needed: u64, size: String },
    /// The body broke off (a reset, or fewer bytes than its Content-Length) and resuming it
    /// where it stopped failed `resumed` times; `cause` is in our words, not the upstream's.
    #[error(
        "object store {store} broke off sending {url} at byte {at} (the chunk ends at byte {end}): {cause}; {resumed} resumed read(s) failed too"
    )]
    Interrupted { url: String, store: String, at: u64, end: u64, resumed: usize, cause: String },
    /// The object store did not answer in time.
    #[error("object store {store} did not answer within {seconds} s reading {url}")]
    Timeout { url: String, store: String, seconds: u64 },
    /// As many requests as `sources.max_concurrent_per_store` allows were in flight to the
    /// object store, and none ended within the timeout.
    #[error(
        "object store {store} has {limit} requests in flight (sources.max_concurrent_per_store) and none ended within {seconds} s; retry later"
    )]
    Busy { url: String, store: String, limit: usize, seconds: u64 },
    /// Any other upstream failure; `detail` (the client library's error chain) is logged, not
    /// shown to clients.
    #[error("object store {store} failed reading {url}; the server log has the cause")]
    Upstream { url: String, store: String, detail: String },
}

impl SourceError {
    /// The message with the upstream's own words after it, for the log and for answers to
    /// administrators (registration, verify); never for a data-plane answer.
    pub fn explain(&self) -> String {
        match self {
            Self::Forbidden { detail, .. } | Self::Upstream { detail, .. } => format!("{self} (upstream: {detail})"),
            _ => self.to_string(),
        }
    }

    /// The object store involved (empty when none serves the URL).
    pub fn store(&self) -> &str {
        match self {
            Self::Unregistered { .. } => "",
            Self::NotFound { store, .. }
            | Self::Forbidden { store, .. }
            | Self::Modified { store, .. }
            | Self::Truncated { store, .. }
            | Self::Interrupted { store, .. }
            | Self::Timeout { store, .. }
            | Self::Busy { store, .. }
            | Self::Upstream { store, .. } => store,
        }
    }

    /// A short stable label for metrics and problem types.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unregistered { .. } => "unregistered",
            Self::NotFound { .. } => "not-found",
            Self::Forbidden { .. } => "forbidden",
            Self::Modified { .. } => "modified",
            Self::Truncated { .. } => "truncated",
            Self::Interrupted { .. } => "interrupted",
            Self::Timeout { .. } => "timeout",
            Self::Busy { .. } => "busy",
            Self::Upstream { .. } => "error",
        }
    }
}

/// Why an object store cannot be registered.
#[derive(Debug, thiserror::Error)]
pub enum SourceConfigError {
    /// The URL is not a supported object store URL.
    #[error("{0}")]
    Url(String),
    /// An option is unknown or has a bad value.
    #[error("{0}")]
    Option(String),
    /// The client could not be built.
    #[error("cannot build a client for {url}: {detail}")]
    Build { url: String, detail: String },
}

/// What an object_store error means for a read of `range` of `url`.
pub(super) fn classify(
    store: &str,
    url: &str,
    range: &Range<u64>,
    check: &SourceCheck<'_>,
    seconds: u64,
    e: object_store::Error,
) -> SourceError {
    let (url, store) = (url.to_owned(), store.to_owned());
    match e {
        object_store::Error::NotFound { .. } => SourceError::NotFound { url, store },
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            SourceError::Forbidden { url, store, detail: e.to_string() }
        }
        object_store::Error::Precondition { .. } => SourceError::Modified { url, store, recorded: check.to_string() },
        other => {
            let text = error_chain(&other);
            // Not "timeout": after a retry object_store's message says "retry_timeout: ..." whatever
            // the failure was (an upstream 500 would read as a 504).
            if text.contains("timed out") {
                SourceError::Timeout { url, store, seconds }
            } else if text.contains("status code: 416")
                || text.contains("Range Not Satisfiable")
                || text.contains("InvalidRange")
            {
                SourceError::Truncated { url, store, needed: range.end, size: "unknown".into() }
            } else {
                SourceError::Upstream { url, store, detail: text }
            }
        }
    }
}

/// An error with its sources, `: `-joined (object_store hides the cause behind them; a log
/// line shows a startup error so too).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
