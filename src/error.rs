//! The one error type at the HTTP edge, rendered as `application/problem+json` (RFC 9457).
//! A 5xx body says only what a client can act on; the cause goes to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::catalog::CatalogError;
use crate::sources::SourceError;
use crate::versions;

/// Everything a request can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// 404: no such store, node, chunk or resource.
    #[error("{0}")]
    NotFound(String),
    /// 410: a pinned version that does not exist (any more). Not 404: Zarr clients read a 404
    /// chunk as fill values, and a reader pinned to a removed version must fail, not get zeros.
    #[error("{0}")]
    Gone(String),
    /// 410: a store that was deleted (and not registered again), for the same reason.
    #[error("{0}")]
    StoreDeleted(String),
    /// 400: the request cannot be understood.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no or a wrong bearer token.
    #[error("a valid bearer token is required: send Authorization: Bearer <token>")]
    Unauthorized,
    /// 401: a data-plane read without a valid read token, when reads need one.
    #[error("reading this server's stores needs a token: send Authorization: Bearer <token>")]
    ReadUnauthorized,
    /// 403: the request may not be made this way (an open control plane addressed by a name
    /// other than localhost).
    #[error("{0}")]
    Forbidden(String),
    /// 422: the document or resource is invalid; every problem is listed.
    #[error("{title}")]
    Invalid { title: String, problems: Vec<String> },
    /// 409: the request conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// 412: a write's `If-Match` or `If-None-Match` does not hold of the store's current version.
    #[error("{0}")]
    PreconditionFailed(String),
    /// 413: the body is larger than the limit (bytes) that the second field names.
    #[error("the request body is larger than the limit of {0} bytes ({1}); nothing was changed")]
    TooLarge(u64, &'static str),
    /// 415: the body is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 416: the Range cannot be satisfied; `len` is the full length.
    #[error("the requested range is not satisfiable: the resource is {len} bytes")]
    RangeNotSatisfiable { len: u64 },
    /// 502/504: a source object could not be read as registered.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// 503: as many registrations as `ingest.max_concurrent` allows are running, and none ended
    /// within `ingest.queue_seconds`.
    #[error(
        "{0} registration(s) are already running (ingest.max_concurrent) and none finished in time; nothing was changed, retry later"
    )]
    Busy(u32),
    /// 503: the catalog cannot be reached; the cause (the driver's message) is logged, not
    /// returned.
    #[error("the catalog database is unavailable; the server log has the cause")]
    Unavailable(String),
    /// 503: a bounded pool of work (the builders of assembled chunks) has as much waiting as it
    /// may; retry in a moment.
    #[error("{0}")]
    Overloaded(String),
    /// 507: the scratch space a registration spills to is full or unwritable; the cause is
    /// logged, not returned.
    #[error("the server ran out of scratch space while reading this document; nothing was changed")]
    Scratch(String),
    /// 500: a bug or an unexpected failure; the detail is logged, not returned.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The status code.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Gone(_) | Self::StoreDeleted(_) => StatusCode::GONE,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized | Self::ReadUnauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PreconditionFailed(_) => StatusCode::PRECONDITION_FAILED,
            Self::TooLarge(..) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            Self::Source(SourceError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
            Self::Source(SourceError::Busy { .. }) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Source(_) => StatusCode::BAD_GATEWAY,
            Self::Unavailable(_) | Self::Busy(_) | Self::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Scratch(_) => StatusCode::INSUFFICIENT_STORAGE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The problem type, a stable machine-readable name.
    pub fn problem_type(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not-found",
            Self::Gone(_) => "version-gone",
            Self::StoreDeleted(_) => "store-deleted",
            Self::BadRequest(_) => "bad-request",
            Self::Unauthorized | Self::ReadUnauthorized => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::Invalid { .. } => "invalid",
            Self::Conflict(_) => "conflict",
            Self::PreconditionFailed(_) => "precondition-failed",
            Self::TooLarge(..) => "too-large",
            Self::UnsupportedMediaType(_) => "unsupported-media-type",
            Self::RangeNotSatisfiable { .. } => "range-not-satisfiable",
            Self::Source(e) => match e {
                SourceError::Modified { .. } => "source-modified",
                SourceError::NotFound { .. } => "source-not-found",
                SourceError::Forbidden { .. } => "source-forbidden",
                SourceError::Truncated { .. } => "source-truncated",
                SourceError::Interrupted { .. } => "source-interrupted",
                SourceError::Timeout { .. } => "source-timeout",
                SourceError::Busy { .. } => "source-busy",
                SourceError::Unregistered { .. } => "source-unregistered",
                SourceError::Upstream { .. } => "source-error",
            },
            Self::Unavailable(_) => "catalog-unavailable",
            Self::Busy(_) => "busy",
            Self::Overloaded(_) => "overloaded",
            Self::Scratch(_) => "scratch-space",
            Self::Internal(_) => "internal",
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        Self::from_catalog(&e)
    }
}

impl ApiError {
    /// A catalog failure, by cause: unreachable or busy is 503, a named conflict 409.
    fn from_catalog(e: &CatalogError) -> Self {
        match e {
            e if e.is_unreachable() => Self::Unavailable(e.to_string()),
            // SQLite's writer lock held past busy_timeout (SQLITE_BUSY, SQLITE_LOCKED and their
            // extended codes): the catalog is busy, try again, not a bug.
            CatalogError::Database(sqlx::Error::Database(db))
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
                    && db.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| matches!(c & 0xff, 5 | 6)) =>
            {
                Self::Unavailable(e.to_string())
            }
            CatalogError::Conflict(what) => Self::Conflict(format!("conflict on {what}")),
            CatalogError::PreconditionFailed { .. } => Self::PreconditionFailed(e.to_string()),
            CatalogError::Scratch(e) => Self::Scratch(e.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<versions::Error> for ApiError {
    fn from(e: versions::Error) -> Self {
        use versions::Error as E;
        match e {
            E::NotFound(m) => Self::NotFound(m),
            E::Gone(m) => Self::Gone(m),
            E::StoreDeleted(m) => Self::StoreDeleted(m),
            E::BadRequest(m) => Self::BadRequest(m),
            E::Invalid { title, problems } => Self::Invalid { title, problems },
            E::Conflict(m) => Self::Conflict(m),
            E::TooLarge(limit) => Self::TooLarge(limit, "http.max_body_bytes"),
            E::Busy(n) => Self::Busy(n),
            E::Overloaded(m) => Self::Overloaded(m),
            E::Source(e) => Self::Source(e),
            E::Catalog(_, e) => Self::from_catalog(&e),
            E::Scratch(m) => Self::Scratch(m),
            E::Internal(m) => Self::Internal(m),
        }
    }
}

/// An `application/problem+json` response (RFC 9457), not to be stored by caches.
pub fn problem(status: StatusCode, kind: &str, detail: &str, problems: Option<&[String]>) -> Response {
    let mut body = json!({
        "type": format!("urn:zarrgate:problem:{kind}"),
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    if let Some(problems) = problems {
        body["problems"] = json!(problems);
    }
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Turns an error answer the framework wrote itself (a query, path or body it could not read:
/// `text/plain`; a method not allowed: empty) into problem+json like every other error. Cheap
/// for every other answer: it looks at the status and the content type only.
pub async fn as_problem(response: Response) -> Response {
    // The method router adds `Allow` after the router's layers have seen its 405: that one is
    // written by [`last_as_problem`], once it has passed them all, with the methods it lists.
    if response.status() == StatusCode::METHOD_NOT_ALLOWED && !response.headers().contains_key(header::ALLOW) {
        return response;
    }
    render_as_problem(response).await
}

/// [`as_problem`] around the whole router (`http::router`): what is still not problem+json
/// there, a 405 with its `Allow` header now.
pub async fn last_as_problem(response: Response) -> Response {
    render_as_problem(response).await
}

async fn render_as_problem(response: Response) -> Response {
    let status = response.status();
    // A problem already, or the page a browser gets for one (`http/html/problem.rs`).
    let is_problem = response.headers().get(header::CONTENT_TYPE).is_some_and(|v| {
        v.as_bytes().starts_with(b"application/problem+json") || v.as_bytes().starts_with(b"text/html")
    });
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 16 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_owned();
    let kind = match status {
        StatusCode::BAD_REQUEST => "bad-request",
        StatusCode::NOT_FOUND => "not-found",
        StatusCode::METHOD_NOT_ALLOWED => "method-not-allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "too-large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported-media-type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid",
        _ => "error",
    };
    let detail = match (status, text.is_empty()) {
        (StatusCode::METHOD_NOT_ALLOWED, _) => {
            let allowed = parts.headers.get(header::ALLOW).and_then(|v| v.to_str().ok()).unwrap_or("");
            format!("this method is not allowed here; allowed: {allowed}")
        }
        (_, true) => status.canonical_reason().unwrap_or("error").to_owned(),
        (_, false) => text,
    };
    let mut response = problem(status, kind, &detail, None);
    // Everything else the answer carried stays: Allow, WWW-Authenticate, Content-Range, and the
    // CORS headers without which a browser reports a CORS failure instead of this problem.
    for (name, value) in &parts.headers {
        if ![header::CONTENT_TYPE, header::CONTENT_LENGTH, header::CACHE_CONTROL].contains(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match &self {
            Self::Internal(cause) => tracing::error!(%cause, "internal error"),
            Self::Scratch(cause) => tracing::error!(%cause, "registration failed: scratch space (ingest.scratch_dir)"),
            Self::Unavailable(cause) => tracing::error!(%cause, "catalog unavailable"),
            Self::Source(cause @ (SourceError::Upstream { detail, .. } | SourceError::Forbidden { detail, .. })) => {
                tracing::warn!(%cause, %detail, kind = cause.kind(), "upstream failure")
            }
            Self::Source(cause) => tracing::warn!(%cause, kind = cause.kind(), "upstream failure"),
            // Missing chunks and ranges are routine on the data plane; other refusals say why.
            Self::NotFound(_) | Self::RangeNotSatisfiable { .. } | Self::Gone(_) | Self::StoreDeleted(_) => {}
            other => tracing::info!(status = status.as_u16(), detail = %other, "request refused"),
        }
        let problems = match &self {
            Self::Invalid { problems, .. } => Some(problems.as_slice()),
            _ => None,
        };
        let mut response = problem(status, self.problem_type(), &self.to_string(), problems);
        let headers = response.headers_mut();
        match &self {
            Self::Unauthorized | Self::ReadUnauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            Self::RangeNotSatisfiable { len } => {
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                    headers.insert(header::CONTENT_RANGE, v);
                }
            }
            Self::Busy(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
            }
            // The breaker tries the database again every second (catalog/breaker.rs).
            Self::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            Self::Source(SourceError::Busy { .. }) | Self::Overloaded(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}
