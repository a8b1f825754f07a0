//! What the read and write use cases of store versions fail with; `crate::error` maps each
//! variant onto an HTTP status at the edge.

use crate::catalog::CatalogError;
use crate::sources::SourceError;

/// A failure of a version use case.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No such store, node or chunk (a reader uses the fill value for a missing chunk).
    #[error("{0}")]
    NotFound(String),
    /// A version that does not exist (any more): a reader pinned to it must fail, not read fill.
    #[error("{0}")]
    Gone(String),
    /// A store that was deleted and not registered again.
    #[error("{0}")]
    StoreDeleted(String),
    /// A request that cannot be understood (a body that cannot be read).
    #[error("{0}")]
    BadRequest(String),
    /// The document is invalid; every problem is listed and nothing was changed.
    #[error("{title}")]
    Invalid { title: String, problems: Vec<String> },
    /// The request conflicts with the current state (a PATCH whose base moved on).
    #[error("{0}")]
    Conflict(String),
    /// The body is larger than `http.max_body_bytes`.
    #[error("the request body is larger than the limit of {0} bytes (http.max_body_bytes)")]
    TooLarge(u64),
    /// `ingest.max_concurrent` registrations are running and none ended in time.
    #[error(
        "{0} registration(s) are already running (ingest.max_concurrent) and none finished in time; nothing was changed, retry later"
    )]
    Busy(u32),
    /// A bounded pool of work is full (the builders of assembled chunks): 503, retry soon.
    #[error("{0}")]
    Overloaded(String),
    /// A source object could not be read as registered.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The catalog failed; the driver's message is logged by the edge, not returned.
    #[error("{0}")]
    Catalog(String, #[source] std::sync::Arc<CatalogError>),
    /// The scratch space a registration spills to failed.
    #[error("{0}")]
    Scratch(String),
    /// A bug or an unexpected failure.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// True when the catalog database could not be reached.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Catalog(_, e) if e.is_unreachable())
    }
}

impl From<CatalogError> for Error {
    fn from(e: CatalogError) -> Self {
        Self::Catalog(e.to_string(), std::sync::Arc::new(e))
    }
}

impl From<tokio::task::JoinError> for Error {
    fn from(e: tokio::task::JoinError) -> Self {
        Self::Internal(format!("a blocking task failed: {e}"))
    }
}

/// A version use case's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
