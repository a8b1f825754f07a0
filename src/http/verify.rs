//! Stale-source detection: the facts (ETag, size, modification time) of every source recorded
//! at registration, and `POST /api/v1/stores/{store}/verify` comparing them with the sources now.

use axum::Json;
use axum::extract::{Path, State};
use futures::StreamExt;
use serde_json::{Value, json};

use super::stores::no_store;
use crate::app::AppState;
use crate::error::ApiError;
use crate::sources::{ObjectFacts, SourceError};
use crate::zarr::document::{Document, SourceFacts};

/// Asks every source the document references (under a registered object store) for its facts,
/// checks them against the facts the document declares, and records them. A source that is
/// missing, or that differs from what the document declares, is a problem.
pub async fn record_facts(app: &AppState, doc: &mut Document) {
    let urls: Vec<String> = doc.urls.all().iter().filter(|u| app.sources.resolve(u).is_some()).cloned().collect();
    if urls.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    let concurrency = app.config.sources.verify_concurrency.max(1);
    let observed: Vec<(String, Result<ObjectFacts, SourceError>)> = futures::stream::iter(urls)
        .map(|url| async move { (url.clone(), app.sources.head(&url).await) })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let count = observed.len();
    for (url, result) in observed {
        let declared = doc.sources.get(&url).cloned().unwrap_or_default();
        match result {
            Ok(now) => {
                let etag_differs = declared.etag.as_ref().is_some_and(|e| now.etag.as_ref() != Some(e));
                let size_differs = declared.size.is_some_and(|s| s != now.size);
                if etag_differs || size_differs {
                    doc.problems.push(format!(
                        "{url} changed since the manifest was made: it declares {}, the object store reports {}",
                        describe(&declared),
                        describe(&facts(&now))
                    ));
                }
                doc.sources.insert(url, facts(&now));
            }
            Err(e) => doc.problems.push(format!(
                "{url} cannot be read: {} (register with ?verify=false to skip this check)",
                e.explain()
            )),
        }
    }
    tracing::info!(sources = count, seconds = started.elapsed().as_secs_f64(), "source facts recorded");
}

fn facts(o: &ObjectFacts) -> SourceFacts {
    SourceFacts { etag: o.etag.clone(), size: Some(o.size), last_modified: o.last_modified.clone() }
}

fn describe(f: &SourceFacts) -> String {
    let mut parts = Vec::new();
    if let Some(e) = &f.etag {
        parts.push(format!("ETag {e}"));
    }
    if let Some(s) = f.size {
        parts.push(format!("{s} bytes"));
    }
    if parts.is_empty() { "nothing".into() } else { parts.join(", ") }
}

/// `POST /api/v1/stores/{store}/verify`: whether each source of the current version still
/// matches what was recorded.
pub(super) async fn verify(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let head = app.catalog.current_version(&name).await?.ok_or_else(|| no_store(&name))?;
    let recorded = app.catalog.sources(head.id).await?;
    let concurrency = app.config.sources.verify_concurrency.max(1);
    let checked: Vec<Value> = futures::stream::iter(recorded)
        .map(|(url, then)| {
            let app = app.clone();
            async move {
                let (status, now, detail) = match app.sources.head(&url).await {
                    Ok(now) => {
                        let changed = then.etag.as_ref().is_some_and(|e| now.etag.as_ref() != Some(e))
                            || then.size.is_some_and(|s| s != now.size);
                        let status = if changed {
                            "modified"
                        } else if then.etag.is_none() && then.size.is_none() {
                            "unverified"
                        } else {
                            "ok"
                        };
                        (status, Some(facts(&now)), None)
                    }
                    Err(SourceError::NotFound { .. }) => ("missing", None, None),
                    Err(e) => ("error", None, Some(e.explain())),
                };
                json!({"url": url, "status": status, "recorded": then, "current": now, "detail": detail})
            }
        })
        .buffered(concurrency)
        .collect()
        .await;
    let count = |s: &str| checked.iter().filter(|c| c["status"] == s).count();
    Ok(Json(json!({
        "store": name,
        "version": head.id,
        "ok": count("ok"),
        "modified": count("modified"),
        "missing": count("missing"),
        "errors": count("error"),
        "unverified": count("unverified"),
        "sources": checked,
    })))
}
