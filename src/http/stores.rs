//! `/api/v1/stores`: register (PUT), list, describe, export and delete stores.

use std::io;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures::{SinkExt, StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::names;
use crate::app::AppState;
use crate::catalog::{StoreRecord, VersionHead};
use crate::error::ApiError;
use crate::zarr::document::Document;
use crate::zarr::validate::{Summary, validate};
use crate::zarr::{self, ChunkLocation};

/// The store routes, relative to `/api/v1`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/stores", get(list))
        .route("/stores/{store}", get(describe).put(register).delete(remove))
        .route("/stores/{store}/manifest", get(export))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterParams {
    format: Option<String>,
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
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge(limit));
    }
    match params.format.as_deref() {
        None | Some("native") => {}
        Some(other) => return Err(ApiError::BadRequest(format!("format {other:?} is not supported (native)"))),
    }
    let doc = read_native(body, limit).await?;
    let entries = app.sources.entries();
    let validated =
        tokio::task::spawn_blocking(move || validate(doc, &|url| entries.iter().any(|e| url.starts_with(&e.prefix))))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
    let store = match validated {
        Ok(store) => store,
        Err(problems) => {
            app.metrics.registrations_total.with_label_values(&["rejected"]).inc();
            let title =
                format!("the manifest for store {name:?} has {} problem(s); nothing was changed", problems.len());
            tracing::info!(store = %name, problems = problems.len(), first = %problems[0], "registration rejected");
            return Err(ApiError::Invalid { title, problems });
        }
    };
    let started = std::time::Instant::now();
    let written = app.catalog.write_version(&name, &store).await?;
    app.observe_catalog("write_version", started);
    app.caches.forget_store(&name).await;
    let outcome = if written.created { "created" } else { "replaced" };
    app.metrics.registrations_total.with_label_values(&[outcome]).inc();
    tracing::info!(store = %name, version = written.head.id, outcome, chunks = store.summary.chunks.virtual_ + store.summary.chunks.inline,
        seconds = started.elapsed().as_secs_f64(), "store registered");
    let status = if written.created { StatusCode::CREATED } else { StatusCode::OK };
    let body = summary_json(&written.head, written.head.created_at_ms, &store.summary);
    let location = format!("/api/v1/stores/{name}");
    Ok((status, [(header::LOCATION, location)], Json(body)).into_response())
}

/// Parses a native document from the body as it arrives, refusing more than `limit` bytes.
async fn read_native(body: Body, limit: u64) -> Result<Document, ApiError> {
    let mut seen = 0u64;
    let stream = body.into_data_stream().map_err(io::Error::other).map(move |chunk| {
        let chunk = chunk?;
        seen += chunk.len() as u64;
        if seen > limit {
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, "body too large"));
        }
        Ok(chunk)
    });
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let parsed =
        tokio::task::spawn_blocking(move || zarr::native::parse_reader(io::BufReader::with_capacity(1 << 16, reader)))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
    parsed.map_err(|e| match e.0.io_error_kind() {
        Some(io::ErrorKind::FileTooLarge) => ApiError::TooLarge(limit),
        Some(_) => ApiError::BadRequest(format!("reading the request body failed: {e}")),
        None => ApiError::Invalid {
            title: format!("the manifest is not a valid native document: {e}; nothing was changed"),
            problems: vec![e.to_string()],
        },
    })
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn summary_json(head: &VersionHead, store_created_at_ms: i64, summary: &Summary) -> Value {
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

fn no_store(name: &str) -> ApiError {
    ApiError::NotFound(format!("no store is named {name:?}"))
}

/// Streams the current version as a native document; registering it again gives the same store.
async fn export(State(app): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let head = app.catalog.current_version(&name).await?.ok_or_else(|| no_store(&name))?;
    let view = app.view(&head).await?;
    let tiles = app.catalog.tiles(head.id).await?;
    let sources = app.catalog.sources(head.id).await?;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, io::Error>>(4);
    tokio::spawn(async move {
        if let Err(e) = write_export(&app, &view, &tiles, sources, &mut tx).await {
            tracing::error!(store = %head.store, version = head.id, error = %e, "export failed");
            let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
        }
    });
    Ok(([(header::CONTENT_TYPE, "application/json")], Body::from_stream(rx)).into_response())
}

const FLUSH_AT: usize = 1 << 16;

async fn write_export(
    app: &AppState,
    view: &crate::cache::VersionView,
    tiles: &[(String, u64)],
    sources: Vec<(String, crate::zarr::document::SourceFacts)>,
    tx: &mut futures::channel::mpsc::Sender<Result<Bytes, io::Error>>,
) -> Result<(), ApiError> {
    let mut out = String::from("{\"nodes\": {");
    for (i, node) in view.hierarchy.nodes().enumerate() {
        let metadata = Value::Object(node.metadata.clone()).to_string();
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str(&Value::from(node.path.as_str()).to_string());
        out.push_str(": ");
        let zarr::metadata::NodeKind::Array(layout) = &node.kind else {
            out.push_str(&metadata);
            continue;
        };
        out.push_str(metadata.trim_end_matches('}'));
        out.push_str(", \"manifest\": {");
        let mut first = true;
        for (_, tile) in tiles.iter().filter(|(n, _)| n == node.path.as_str()) {
            let Some(data) = app.catalog.block(view.head.id, node.path.as_str(), *tile).await? else { continue };
            let block = zarr::ManifestBlock::decode(&data).map_err(|e| ApiError::Internal(e.to_string()))?;
            for (slot, chunk) in block.iter() {
                let coords = layout.grid.coords_of(ChunkLocation { tile: *tile, slot }).unwrap_or_default();
                let entry = match chunk {
                    zarr::ChunkRef::Virtual { source, offset, length } => {
                        json!({"path": &*source.url, "offset": offset, "length": length})
                    }
                    zarr::ChunkRef::Inline(bytes) => {
                        use base64::Engine;
                        json!({"data": base64::engine::general_purpose::STANDARD.encode(&bytes)})
                    }
                    zarr::ChunkRef::Missing => continue,
                };
                out.push_str(if first { "\n" } else { ",\n" });
                first = false;
                out.push_str(&Value::from(zarr::key::manifest_key(&coords)).to_string());
                out.push_str(": ");
                out.push_str(&entry.to_string());
                if out.len() >= FLUSH_AT {
                    flush(&mut out, tx).await?;
                }
            }
        }
        out.push_str("}}");
    }
    out.push_str("\n},\n\"sources\": {");
    let mut first = true;
    for (url, facts) in sources.iter().filter(|(_, f)| f != &Default::default()) {
        out.push_str(if first { "\n" } else { ",\n" });
        first = false;
        out.push_str(&Value::from(url.as_str()).to_string());
        out.push_str(": ");
        out.push_str(&serde_json::to_string(facts).unwrap_or_else(|_| "{}".into()));
    }
    out.push_str("}}\n");
    flush(&mut out, tx).await
}

async fn flush(
    out: &mut String,
    tx: &mut futures::channel::mpsc::Sender<Result<Bytes, io::Error>>,
) -> Result<(), ApiError> {
    let chunk = Bytes::from(std::mem::take(out));
    tx.send(Ok(chunk)).await.map_err(|_| ApiError::Internal("the client went away".into()))
}
