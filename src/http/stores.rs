//! `/api/v1/stores`: register (PUT), update (PATCH), list, describe, verify, export and delete
//! stores; each handler parses the request, calls the read or write service, renders the answer.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::names;
use super::preconditions;
use super::summary::{no_store, record_json, registered_json, versions_json};
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::facts::SourceStatus;
use crate::versions::stores::{Described, Verified, Versions};
use crate::versions::{Format, Registered, Registration};
use crate::versions::{files, icechunk};

/// The store routes, relative to `/api/v1`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/stores", get(list))
        .route("/stores/{store}", get(describe).put(register).patch(patch).delete(remove))
        .route("/stores/{store}/manifest", get(super::export::export))
        .route("/stores/{store}/verify", post(verify))
        .route("/stores/{store}/sync", post(sync))
        .route("/stores/{store}/versions", get(versions))
        .route("/stores/{store}/progress", get(progress))
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
    /// Record every source's facts as found now, in place of those the document declares
    /// (default false): the recovery after a source was rewritten in place.
    record_sources: Option<bool>,
    /// `portable` or `as-is`: whether arrays whose codecs some client cannot decode are served
    /// transcoded (default: the store's current setting, or `as-is` for a new store).
    codecs: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchParams {
    /// Ask the new sources for their facts (default true).
    verify: Option<bool>,
    /// `404` or `fill` for the new version (default: the current version's).
    missing_chunks: Option<String>,
    /// `portable` or `as-is` for the new version (default: the current version's).
    codecs: Option<String>,
}

async fn register(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<RegisterParams>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    names::check("store", &name)?;
    check_declared_length(&headers, app.config.http.max_body_bytes)?;
    let tar = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-tar"));
    let fill_missing = missing_chunks(params.missing_chunks.as_deref())?;
    let portable = codecs(params.codecs.as_deref())?;
    let verify = params.verify.unwrap_or(true);
    let record_sources = params.record_sources.unwrap_or(false);
    if record_sources && params.verify == Some(false) {
        return Err(ApiError::BadRequest(
            "record_sources=true asks every source for its facts now; it cannot go with verify=false".into(),
        ));
    }
    let expected = preconditions::expected(&headers, &name, true)?;
    if params.format.as_deref() == Some("icechunk") {
        let how = Registration { format: None, fill_missing, portable, verify, record_sources: false, expected };
        return register_icechunk(&app, &name, body, how).await;
    }
    if params.format.as_deref() == Some("files") {
        let how = Registration { format: None, fill_missing, portable, verify, record_sources: false, expected };
        return register_files(&app, &name, body, how).await;
    }
    let format = match params.format.as_deref() {
        Some(name) => Some(Format::parse(name).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "format {name:?} is not supported: use native, kerchunk, kerchunk-parquet, icechunk or files"
            ))
        })?),
        None if tar => Some(Format::KerchunkParquet),
        None => None,
    };
    let how = Registration { format, fill_missing, portable, verify, record_sources, expected };
    let registered = app.registrar.register(&name, byte_stream(body), how).await?;
    Ok(registered_response(&name, &registered, None))
}

/// 201 for a new store, 200 for a new version of one, with its summary (and Icechunk origin)
/// and the new version's ETag.
fn registered_response(name: &str, registered: &Registered, origin: Option<Value>) -> Response {
    let status = if registered.created { StatusCode::CREATED } else { StatusCode::OK };
    let location = format!("/api/v1/stores/{name}");
    let mut answer = registered_json(registered);
    if let (Some(origin), Some(answer)) = (origin, answer.as_object_mut()) {
        answer.insert("icechunk".into(), origin);
    }
    let tag = preconditions::etag(registered.head.id);
    (status, [(header::LOCATION, location)], [(header::ETAG, tag)], Json(answer)).into_response()
}

/// The largest `?format=icechunk` body: a repository URL and a reference.
const ICECHUNK_BODY_BYTES: usize = 64 << 10;

/// `PUT /api/v1/stores/{store}?format=icechunk`: `{"repository": URL, "branch"|"tag"|"snapshot": ...}`.
async fn register_icechunk(app: &AppState, name: &str, body: Body, how: Registration) -> Result<Response, ApiError> {
    let bytes = axum::body::to_bytes(body, ICECHUNK_BODY_BYTES).await.map_err(|_| {
        ApiError::BadRequest(format!(
            "an Icechunk registration is a small JSON object (at most {ICECHUNK_BODY_BYTES} bytes): \
             {{\"repository\": URL, \"branch\"|\"tag\"|\"snapshot\": ...}}"
        ))
    })?;
    let request: icechunk::Request = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body is not an Icechunk registration ({{\"repository\": URL, \"branch\"|\"tag\"|\"snapshot\": ..., \
             \"follow_seconds\": N}}): {e}; nothing was changed"
        ))
    })?;
    let target = request.target()?;
    let registered = app.registrar.register_icechunk(name, &target, how).await?;
    let origin = app.registrar.origin(name).await?.map(|(_, o)| o.to_json());
    Ok(registered_response(name, &registered, origin))
}

/// The largest `?format=files` body: a list of URLs and a few settings.
const FILES_BODY_BYTES: usize = 1 << 20;

/// `PUT /api/v1/stores/{store}?format=files`: `{"files": [URL, ...] | {"prefix": URL, "glob": GLOB},
/// "parser": "auto"|"hdf5"|"netcdf3"|"dmrpp"|"tiff", "combine": {"join": ...}}`.
async fn register_files(app: &AppState, name: &str, body: Body, how: Registration) -> Result<Response, ApiError> {
    let bytes = axum::body::to_bytes(body, FILES_BODY_BYTES).await.map_err(|_| {
        ApiError::BadRequest(format!(
            "a files registration is a small JSON object (at most {FILES_BODY_BYTES} bytes): {{\"files\": [URL], \
             \"parser\": \"auto\"}}"
        ))
    })?;
    let request: files::Request = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body is not a files registration ({{\"files\": [URL, ...] or {{\"prefix\": URL, \"glob\": GLOB}}, \
             \"parser\": \"auto\"|\"hdf5\"|\"netcdf3\"|\"dmrpp\"|\"tiff\"|\"fits\", \"combine\": {{\"join\": ...}}}}): {e}; nothing was \
             changed"
        ))
    })?;
    let asked = codecs(request.codecs.as_deref())?;
    if let (Some(document), Some(query)) = (asked, how.portable)
        && document != query
    {
        let says = |portable: bool| if portable { "portable" } else { "as-is" };
        return Err(ApiError::Invalid {
            title: "the request asks for two kinds of codecs; nothing was changed".into(),
            problems: vec![format!(
                "the query says codecs={} and the document \"codecs\": {:?}: give one of them, or the same in both",
                says(query),
                says(document)
            )],
        });
    }
    let how = Registration { portable: how.portable.or(asked), ..how };
    let target = request.target()?;
    let registered = app.registrar.register_files(name, &target, how).await?;
    let status = if registered.created { StatusCode::CREATED } else { StatusCode::OK };
    let mut answer = registered_json(&registered);
    let first = app.registrar.files_origin(name, 0, FILES_PER_ANSWER).await?;
    if let (Some(origin), Some(answer)) = (first, answer.as_object_mut()) {
        answer.insert("files".into(), origin.to_json());
    }
    let location = format!("/api/v1/stores/{name}");
    let tag = preconditions::etag(registered.head.id);
    Ok((status, [(header::LOCATION, location)], [(header::ETAG, tag)], Json(answer)).into_response())
}

/// How long `POST .../sync` of a store made from files waits for a rescan of it under way
/// (the follow loop's, another replica's) to end.
const RESCAN_WAIT: Duration = Duration::from_secs(30);

/// `POST /api/v1/stores/{store}/sync`: an Icechunk branch store re-reads its branch (a new
/// version only when the branch moved to another snapshot); a store made from files is
/// rescanned (a new version only when files were added, changed or removed).
async fn sync(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    names::check("store", &name)?;
    if let Some(rescanned) = app.registrar.rescan_files(&name, RESCAN_WAIT).await? {
        let files::Rescanned { version, moved, changes, skipped, .. } = rescanned;
        return Ok(Json(json!({
            "store": name,
            "moved": moved,
            "version": version,
            "versioned_url": format!("/{name}@{version}"),
            "added": changes.added,
            "changed": changes.changed,
            "removed": changes.removed,
            "skipped": skipped,
        })));
    }
    let synced = app.registrar.sync(&name).await?;
    Ok(Json(json!({
        "store": name,
        "moved": synced.moved,
        "version": synced.version,
        "versioned_url": format!("/{name}@{}", synced.version),
        "snapshot_id": synced.snapshot_id,
        "previous_snapshot_id": synced.previous_snapshot_id,
        "icechunk": synced.origin.to_json(),
    })))
}

/// `PATCH /api/v1/stores/{store}`: a partial native document merged into the current version.
async fn patch(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<PatchParams>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    names::check("store", &name)?;
    check_declared_length(&headers, app.config.http.max_body_bytes)?;
    let how = Registration {
        format: Some(Format::Native),
        fill_missing: missing_chunks(params.missing_chunks.as_deref())?,
        portable: codecs(params.codecs.as_deref())?,
        verify: params.verify.unwrap_or(true),
        record_sources: false,
        expected: preconditions::expected(&headers, &name, false)?,
    };
    let patched = app.registrar.patch(&name, byte_stream(body), how).await?;
    Ok(([(header::ETAG, preconditions::etag(patched.head.id))], Json(registered_json(&patched))).into_response())
}

/// The `missing_chunks` parameter: `404` or `fill`, or the store's current setting when absent.
fn missing_chunks(param: Option<&str>) -> Result<Option<bool>, ApiError> {
    match param {
        None => Ok(None),
        Some("404") => Ok(Some(false)),
        Some("fill") => Ok(Some(true)),
        Some(other) => Err(ApiError::BadRequest(format!("missing_chunks {other:?} must be \"404\" or \"fill\""))),
    }
}

/// The `codecs` parameter (or a files document's `"codecs"`): `portable` or `as-is`, or the
/// store's current setting when absent.
pub(super) fn codecs(param: Option<&str>) -> Result<Option<bool>, ApiError> {
    match param {
        None => Ok(None),
        Some("portable") => Ok(Some(true)),
        Some("as-is") => Ok(Some(false)),
        Some(other) => Err(ApiError::BadRequest(format!(
            "codecs {other:?} must be \"portable\" (every array served with codecs GDAL, zarrita.js, zarrs and \
             zarr-python decode without plugins, its chunks transcoded when needed) or \"as-is\""
        ))),
    }
}

/// Refuses early a body whose declared length is above `limit` (a body without one is
/// counted as it arrives).
fn check_declared_length(headers: &HeaderMap, limit: u64) -> Result<(), ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) { Err(ApiError::TooLarge(limit, "http.max_body_bytes")) } else { Ok(()) }
}

/// A request body as the registrar reads it.
fn byte_stream(body: Body) -> crate::versions::ingest::Body {
    body.into_data_stream().map_err(std::io::Error::other).boxed()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    limit: Option<u32>,
    after: Option<String>,
}

async fn list(State(app): State<AppState>, Query(params): Query<ListParams>) -> Result<Json<Value>, ApiError> {
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let records = app.stores.list(params.after.as_deref(), limit).await?;
    let next = (records.len() as u32 == limit).then(|| records.last().map(|r| r.head.store.clone())).flatten();
    Ok(Json(json!({"stores": records.iter().map(record_json).collect::<Vec<_>>(), "next": next})))
}

/// `POST /api/v1/stores/{store}/verify`: whether each source of the current version still
/// matches what was recorded.
async fn verify(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let Verified { head, checked } = app.stores.verify(&name).await?.ok_or_else(|| no_store(&name))?;
    let count = |s: SourceStatus| checked.iter().filter(|c| c.status == s).count();
    Ok(Json(json!({
        "store": name,
        "version": head.id,
        "ok": count(SourceStatus::Ok),
        "modified": count(SourceStatus::Modified),
        "missing": count(SourceStatus::Missing),
        "errors": count(SourceStatus::Error),
        "unverified": count(SourceStatus::Unverified),
        "sources": checked,
    })))
}

/// Files an answer lists by default (`files_limit`), and at most.
const FILES_PER_ANSWER: usize = 1000;
const MOST_FILES_PER_ANSWER: usize = 10_000;

/// `GET /api/v1/stores/{store}?files_offset=N&files_limit=M`: which files of a store made from
/// files the summary lists (a 100,000-file store's whole list is tens of megabytes).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescribeParams {
    files_offset: Option<usize>,
    files_limit: Option<usize>,
}

async fn describe(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<DescribeParams>,
) -> Result<Response, ApiError> {
    let limit = params.files_limit.unwrap_or(FILES_PER_ANSWER);
    if limit > MOST_FILES_PER_ANSWER {
        return Err(ApiError::BadRequest(format!(
            "files_limit {limit} is more than {MOST_FILES_PER_ANSWER}: page through the files with files_offset"
        )));
    }
    let files = (params.files_offset.unwrap_or(0), limit);
    let Described { record, origin, files } =
        app.stores.describe(&name, files).await?.ok_or_else(|| no_store(&name))?;
    let tag = preconditions::etag(record.head.id);
    let mut answer = record_json(&record);
    if let Some(answer) = answer.as_object_mut() {
        if let Some(origin) = origin {
            answer.insert("icechunk".into(), origin.to_json());
        }
        if let Some(files) = files {
            answer.insert("files".into(), files.to_json());
        }
    }
    Ok(([(header::ETAG, tag)], Json(answer)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionsParams {
    limit: Option<u32>,
}

/// `GET /api/v1/stores/{store}/versions`: the newest versions still kept (at most `limit`,
/// default 100, at most 1000), newest first, each with its pinned URL.
async fn versions(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<VersionsParams>,
) -> Result<Json<Value>, ApiError> {
    let limit = params.limit.unwrap_or(100).clamp(1, 1000);
    let Versions { listed, more } = app.stores.versions(&name, limit).await?;
    if listed.is_empty() {
        return Err(no_store(&name));
    }
    Ok(Json(versions_json(&name, &listed, more)))
}

/// `GET /api/v1/stores/{store}/progress`: how far a registration (or rescan) of the store from
/// files under way on this replica has read its files; 404 when none is.
async fn progress(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let now = app.registrar.progress(&name).ok_or_else(|| {
        ApiError::NotFound(format!(
            "no registration of store {name:?} from files is under way on this replica (it ended, never began, or \
             runs on another replica)"
        ))
    })?;
    Ok(Json(json!({
        "store": name,
        "files": now.files,
        "read": now.read,
        "cached": now.cached,
        "elapsed_seconds": now.elapsed_ms as f64 / 1000.0,
    })))
}

async fn remove(State(app): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    if !app.registrar.delete(&name).await? {
        return Err(no_store(&name));
    }
    Ok(StatusCode::NO_CONTENT)
}
