//! `/api/v1/stores`: register (PUT), list, describe, export and delete stores.

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ingest::{self, Format};
use super::names;
use crate::app::AppState;
use crate::catalog::{StoreRecord, VersionHead, VersionOptions};
use crate::error::ApiError;
use crate::zarr::validate::{Rejected, Summary, validate_tiled};

/// The store routes, relative to `/api/v1`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/stores", get(list))
        .route("/stores/{store}", get(describe).put(register).patch(super::patch::patch).delete(remove))
        .route("/stores/{store}/manifest", get(super::export::export))
        .route("/stores/{store}/verify", post(super::verify::verify))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterParams {
    format: Option<String>,
    /// `404` or `fill`: how this version answers missing chunks (default: the store's current
    /// setting, or `http.missing_chunks` for a new store).
    missing_chunks: Option<String>,
    /// Ask every source for its facts at registration (default true).
    verify: Option<bool>,
}

async fn register(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<RegisterParams>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    names::check("store", &name)?;
    let limit = app.config.http.max_body_bytes;
    ingest::check_declared_length(&headers, limit)?;
    let tar = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-tar"));
    let format = match params.format.as_deref() {
        Some(name) => Some(Format::parse(name)?),
        None if tar => Some(Format::KerchunkParquet),
        None => None,
    };
    // A replacement keeps the store's setting unless told otherwise: a routine re-registration
    // must not turn the fill-value chunks a CDN relies on back into 404s.
    let fill_missing = match params.missing_chunks.as_deref() {
        Some("404") => false,
        Some("fill") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("missing_chunks {other:?} must be \"404\" or \"fill\"")));
        }
        None => match app.catalog.current_version(&name).await? {
            Some(current) => current.fill_missing,
            None => app.config.http.missing_chunks == "fill",
        },
    };
    let options = VersionOptions { fill_missing };
    let _turn = app.registration_turn().await?;
    let scratch = app.config.ingest.scratch();
    let reading = std::time::Instant::now();
    let (mut doc, format) = ingest::read_document(body, limit, format, &scratch).await?;
    let read_seconds = reading.elapsed().as_secs_f64();
    let verify = params.verify.unwrap_or(true);
    if verify {
        super::verify::record_facts(&app, &mut doc).await;
    }
    ingest::resolve_whole_objects(&app, &mut doc, verify).await;
    let entries = app.sources.entries();
    let tile_chunks = u64::from(app.config.block_chunks);
    let limits = app.config.limits.for_version(fill_missing);
    let validating = std::time::Instant::now();
    let validated = tokio::task::spawn_blocking(move || {
        validate_tiled(doc, &|url| entries.iter().any(|e| url.starts_with(&e.prefix)), tile_chunks, &limits)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let store = match validated {
        Ok(store) => store,
        Err(Rejected::Scratch(e)) => return Err(ingest::scratch_error(e)),
        Err(Rejected::Invalid(problems)) => {
            app.metrics.registrations_total.with_label_values(&["rejected"]).inc();
            let title = format!(
                "the {} manifest for store {name:?} has {} problem(s); nothing was changed",
                format.name(),
                problems.len()
            );
            tracing::info!(store = %name, problems = problems.len(), first = %problems[0], "registration rejected");
            return Err(ApiError::Invalid { title, problems });
        }
    };
    let validate_seconds = validating.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let written = app.catalog.write_version(&name, &store, options).await?;
    app.observe_catalog("write_version", started);
    app.settle(&name).await;
    let outcome = if written.created { "created" } else { "replaced" };
    app.metrics.registrations_total.with_label_values(&[outcome]).inc();
    tracing::info!(store = %name, version = written.head.id, outcome, chunks = store.summary.chunks.virtual_ + store.summary.chunks.inline,
        seconds = started.elapsed().as_secs_f64(), read_seconds, validate_seconds, blocks = store.block_count(),
        spilled_to_disk = store.spilled(), "store registered");
    let status = if written.created { StatusCode::CREATED } else { StatusCode::OK };
    let body = summary_json(&written.head, written.head.created_at_ms, &store.summary);
    let location = format!("/api/v1/stores/{name}");
    Ok((status, [(header::LOCATION, location)], Json(body)).into_response())
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(super) fn summary_json(head: &VersionHead, store_created_at_ms: i64, summary: &Summary) -> Value {
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
    })
}

fn record_json(r: &StoreRecord) -> Value {
    summary_json(&r.head, r.store_created_at_ms, &r.summary)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<u32>,
    after: Option<String>,
}

async fn list(State(app): State<AppState>, Query(params): Query<ListParams>) -> Result<Json<Value>, ApiError> {
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let records = app.catalog.list_stores(params.after.as_deref(), limit).await?;
    let next = (records.len() as u32 == limit).then(|| records.last().map(|r| r.head.store.clone())).flatten();
    Ok(Json(json!({"stores": records.iter().map(record_json).collect::<Vec<_>>(), "next": next})))
}

async fn describe(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let record = app.catalog.store(&name).await?.ok_or_else(|| no_store(&name))?;
    Ok(Json(record_json(&record)))
}

async fn remove(State(app): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let deleted = app.catalog.delete_store(&name).await?;
    app.caches.forget_store(&name).await;
    if !deleted {
        return Err(no_store(&name));
    }
    tracing::info!(store = %name, "store deleted");
    Ok(StatusCode::NO_CONTENT)
}

pub(super) fn no_store(name: &str) -> ApiError {
    ApiError::NotFound(format!("no store is named {name:?}"))
}
