//! The preconditions of a store's `PUT` and `PATCH`: `If-Match` with the store's ETag (its
//! current version, `"v12"`, as `GET /api/v1/stores/{store}` and every write answer it) or `*`,
//! and on `PUT` `If-None-Match: *` (create only). The catalog checks them in the write's own
//! transaction (`catalog::Expected`), so that of two writers who read the same version one
//! writes and the other gets `412`.

use axum::http::{HeaderMap, HeaderValue, header};

use crate::catalog::{Expected, version_etag};
use crate::error::ApiError;

/// The ETag of a store's version `id`.
pub(super) fn etag(id: i64) -> HeaderValue {
    HeaderValue::from_str(&version_etag(id)).unwrap_or(HeaderValue::from_static("\"\""))
}

/// What a write of store `name` expects its current version to be, from its request headers;
/// `If-None-Match: *` only when `may_create` (a `PUT`).
pub(super) fn expected(headers: &HeaderMap, name: &str, may_create: bool) -> Result<Option<Expected>, ApiError> {
    let usage = format!(
        "the store's ETag as GET /api/v1/stores/{name} answers it (its current version: \"v12\" for version 12), or *"
    );
    match (one(headers, header::IF_MATCH)?, one(headers, header::IF_NONE_MATCH)?) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => {
            Err(ApiError::BadRequest("send If-Match or If-None-Match, not both; nothing was changed".into()))
        }
        (Some("*"), None) => Ok(Some(Expected::Any)),
        (Some(tag), None) => version(tag)
            .map(|id| Some(Expected::Version(id)))
            .ok_or_else(|| ApiError::BadRequest(format!("If-Match {tag:?} is not {usage}; nothing was changed"))),
        (None, Some("*")) if may_create => Ok(Some(Expected::Absent)),
        (None, Some(tag)) => Err(ApiError::BadRequest(if may_create {
            format!(
                "If-None-Match {tag:?} is not understood on a write: only * (create the store, never replace one); \
                 nothing was changed"
            )
        } else {
            format!(
                "a PATCH changes a store that exists: If-None-Match {tag:?} cannot hold; send If-Match with {usage}; \
                 nothing was changed"
            )
        })),
    }
}

/// The value of header `name`, if given once.
fn one(headers: &HeaderMap, name: header::HeaderName) -> Result<Option<&str>, ApiError> {
    let mut values = headers.get_all(&name).iter();
    let Some(value) = values.next() else { return Ok(None) };
    match (value.to_str(), values.next()) {
        (Ok(text), None) => Ok(Some(text.trim())),
        _ => Err(ApiError::BadRequest(format!("{name} is given more than once, or is not text; nothing was changed"))),
    }
}

/// The version a store's ETag names (`"v12"`: 12).
fn version(tag: &str) -> Option<i64> {
    let digits = tag.strip_prefix("\"v")?.strip_suffix('"')?;
    let canonical = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    canonical.then(|| digits.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn preconditions_are_read_from_the_headers() {
        assert_eq!(expected(&HeaderMap::new(), "s", true).unwrap(), None);
        assert_eq!(expected(&with("if-match", "\"v12\""), "s", false).unwrap(), Some(Expected::Version(12)));
        assert_eq!(expected(&with("if-match", " * "), "s", false).unwrap(), Some(Expected::Any));
        assert_eq!(expected(&with("if-none-match", "*"), "s", true).unwrap(), Some(Expected::Absent));
        assert_eq!(version(&crate::catalog::version_etag(7)), Some(7));
        for (name, value, may_create) in [
            ("if-match", "v12", false),
            ("if-match", "\"12\"", false),
            ("if-match", "W/\"v12\"", false),
            ("if-match", "\"v012\"", false),
            ("if-match", "\"v1\", \"v2\"", false),
            ("if-none-match", "*", false),
            ("if-none-match", "\"v3\"", true),
        ] {
            let refused = expected(&with(name, value), "s", may_create).unwrap_err();
            assert_eq!(refused.status(), axum::http::StatusCode::BAD_REQUEST, "{name}: {value}");
            assert!(refused.to_string().contains("nothing was changed"), "{refused}");
        }
    }
}
