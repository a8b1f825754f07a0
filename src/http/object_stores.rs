//! `/api/v1/object-stores`: register, list, show and remove the object stores sources live in.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::names;
use crate::app::AppState;
use crate::catalog::ObjectStoreRecord;
use crate::error::ApiError;
use crate::sources::{ObjectStoreEntry, Origin, redact_options};
use crate::zarr::json_stream::{ErrorKind, JsonStream};

/// The object store routes, relative to `/api/v1`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/object-stores", get(list))
        .route("/object-stores/{name}", get(show).put(register).delete(remove))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Registration {
    url: String,
    #[serde(default)]
    options: Map<String, Value>,
}

/// True when `file` (or, if it does not exist yet, its directory) lies under `root`.
fn exposes(root: &std::path::Path, file: &std::path::Path) -> bool {
    let canonical = std::fs::canonicalize(file).or_else(|_| {
        std::fs::canonicalize(file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(".".as_ref()))
    });
    canonical.is_ok_and(|c| c.starts_with(root))
}

fn entry_json(e: &ObjectStoreEntry) -> Value {
    json!({"name": e.name, "url": e.prefix, "options": redact_options(&e.options), "origin": e.origin})
}

/// The largest object store registration: a URL and its options (a service account key
/// among them, a few KiB).
const MAX_REGISTRATION_BYTES: usize = 2 << 20;

/// Reads a registration: a body that is not JSON is a 400, JSON of the wrong shape a 422.
async fn read_registration(body: Body) -> Result<Registration, ApiError> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("reading the request body failed: {e}")))?;
        if bytes.len() + chunk.len() > MAX_REGISTRATION_BYTES {
            return Err(ApiError::TooLarge(MAX_REGISTRATION_BYTES as u64, "for an object store registration"));
        }
        bytes.extend_from_slice(&chunk);
    }
    let mut json = JsonStream::new(bytes.as_slice());
    let read = json.value::<Registration>().and_then(|reg| json.end().map(|()| reg));
    read.map_err(|e| match e.kind {
        ErrorKind::Shape => ApiError::Invalid {
            title: format!("the object store registration is invalid: {e}"),
            problems: vec![format!(r#"expected {{"url": "s3://bucket/prefix/", "options": {{...}}}}: {e}"#)],
        },
        _ => ApiError::BadRequest(format!(
            r#"the body is not valid JSON (an object store registration {{"url": ..., "options": {{...}}}} was expected): {e}"#
        )),
    })
}

async fn register(
    State(app): State<AppState>,
    Path(name): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    names::check("object store", &name)?;
    let reg = read_registration(body).await?;
    if app.config.object_stores.iter().any(|o| o.name == name) {
        return Err(ApiError::Conflict(format!(
            "object store {name:?} is declared in the configuration file and cannot be changed over the API"
        )));
    }
    // Decided on the parsed URL, as the builder reads it (the parser drops tabs, newlines and
    // leading control characters that a test of the text would miss), before the builder looks
    // at the file system.
    let local = url::Url::parse(&reg.url).is_ok_and(|u| u.scheme() == "file");
    if local && !app.config.allow_file_object_stores {
        return Err(ApiError::Conflict(
            "file:// object stores may not be registered over the API here (allow_file_object_stores = false)".into(),
        ));
    }
    let settings = app.sources.settings.clone();
    let entry = ObjectStoreEntry::build(&name, &reg.url, &reg.options, Origin::Api, &settings).map_err(|e| {
        ApiError::Invalid {
            title: format!("object store {name:?} cannot be registered: {e}"),
            problems: vec![e.to_string()],
        }
    })?;
    if let Some(root) = entry.local_root()
        && let Some(own) = app.config.own_files().into_iter().find(|f| exposes(root, f))
    {
        return Err(ApiError::Invalid {
            title: format!("object store {name:?} cannot be registered: it would expose zarrgate's own files"),
            problems: vec![format!(
                "{} holds {}, which is zarrgate's own (its catalog or configuration) and must never be served; \
                 register a directory that holds only source files",
                root.display(),
                own.display()
            )],
        });
    }
    let _change = app.registrar.object_store_change().await?;
    if let Some(other) = app.sources.entries().iter().find(|e| e.prefix == entry.prefix && e.name != name) {
        return Err(ApiError::Conflict(format!("object store {:?} already serves {}", other.name, entry.prefix)));
    }
    if let Some(old) = app.sources.get(&name).filter(|old| old.prefix != entry.prefix) {
        let users = app.catalog.stores_using(&old.prefix).await?;
        if !users.is_empty() {
            return Err(ApiError::Conflict(format!(
                "object store {name:?} serves sources of stores {}: changing its URL from {} would break them; delete those stores or register a new object store",
                users.join(", "),
                old.prefix
            )));
        }
    }
    let record = ObjectStoreRecord { name: name.clone(), url: entry.prefix.clone(), options: reg.options.clone() };
    let created = app.catalog.put_object_store(&record).await?;
    app.load_object_stores(true).await.map_err(|e| ApiError::Internal(format!("{e:#}")))?;
    tracing::info!(object_store = %name, url = %entry.prefix, created, "object store registered");
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(entry_json(&entry))))
}

async fn list(State(app): State<AppState>) -> Json<Value> {
    let mut entries: Vec<Value> = app.sources.entries().iter().map(|e| entry_json(e)).collect();
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(json!({"object_stores": entries}))
}

async fn show(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    app.sources
        .get(&name)
        .map(|e| Json(entry_json(&e)))
        .ok_or_else(|| ApiError::NotFound(format!("no object store is named {name:?}")))
}

async fn remove(State(app): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let _change = app.registrar.object_store_change().await?;
    let Some(entry) = app.sources.get(&name) else {
        return Err(ApiError::NotFound(format!("no object store is named {name:?}")));
    };
    if entry.origin == Origin::Config {
        return Err(ApiError::Conflict(format!(
            "object store {name:?} is declared in the configuration file and cannot be removed over the API"
        )));
    }
    let users = app.catalog.stores_using(&entry.prefix).await?;
    if !users.is_empty() {
        return Err(ApiError::Conflict(format!(
            "object store {name:?} serves sources of stores {}: delete those stores first",
            users.join(", ")
        )));
    }
    app.catalog.delete_object_store(&name).await?;
    app.load_object_stores(true).await.map_err(|e| ApiError::Internal(format!("{e:#}")))?;
    tracing::info!(object_store = %name, "object store removed");
    Ok(StatusCode::NO_CONTENT)
}
