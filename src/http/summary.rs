//! A store as the control plane describes it: the summary JSON of a version (the body of a
//! registration, a PATCH, a listing and a describe), its list of versions, and the 404 for a
//! store that is not there.

use serde_json::{Value, json};

use crate::catalog::{ListedVersion, StoreRecord, VersionHead};
use crate::error::ApiError;
use crate::versions::Registered;
use crate::zarr::validate::Summary;

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The summary of version `head` of a store first registered at `store_created_at_ms`.
pub fn summary_json(head: &VersionHead, store_created_at_ms: i64, summary: &Summary) -> Value {
    json!({
        "name": head.store,
        "version": head.id,
        "created_at": rfc3339(store_created_at_ms),
        "updated_at": rfc3339(head.created_at_ms),
        "url": format!("/{}", head.store),
        "versioned_url": format!("/{}@{}", head.store, head.id),
        "arrays": summary.arrays,
        "groups": summary.groups,
        "chunks": summary.chunks,
        "sources": summary.sources,
        "referenced_bytes": summary.referenced_bytes,
        "inline_bytes": summary.inline_bytes,
        "missing_chunks": if head.fill_missing { "fill" } else { "404" },
        "codecs": codecs(head),
        "transcoded_arrays": summary.transcoded_arrays,
        "warnings": summary.warnings,
    })
}

/// How a version serves its arrays' codecs: `portable` (transcoded where needed) or `as-is`.
fn codecs(head: &VersionHead) -> &'static str {
    if head.portable { "portable" } else { "as-is" }
}

/// The summary of a store as the catalog lists it.
pub fn record_json(r: &StoreRecord) -> Value {
    summary_json(&r.head, r.store_created_at_ms, &r.summary)
}

/// The summary of a version just written.
pub fn registered_json(r: &Registered) -> Value {
    summary_json(&r.head, r.store_created_at_ms, &r.summary)
}

/// The versions of store `name` (newest first); `more` when older ones are kept too.
pub fn versions_json(name: &str, listed: &[ListedVersion], more: bool) -> Value {
    let versions: Vec<Value> = listed
        .iter()
        .map(|v| {
            json!({
                "version": v.head.id,
                "created_at": rfc3339(v.head.created_at_ms),
                "current": v.current,
                "missing_chunks": if v.head.fill_missing { "fill" } else { "404" },
                "codecs": codecs(&v.head),
                "versioned_url": format!("/{}@{}", v.head.store, v.head.id),
            })
        })
        .collect();
    json!({"name": name, "versions": versions, "more": more})
}

/// No store of that name.
pub fn no_store(name: &str) -> ApiError {
    ApiError::NotFound(format!("no store is named {name:?}"))
}
