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
use crate::error::ApiError;
use crate::redact::redact_options;
use crate::sources::ObjectStoreEntry;
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
    let registered = app.object_stores.register(&name, &reg.url, &reg.options).await?;
    let status = if registered.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(entry_json(&registered.entry))))
}

async fn list(State(app): State<AppState>) -> Json<Value> {
    let entries: Vec<Value> = app.object_stores.list().iter().map(|e| entry_json(e)).collect();
    Json(json!({"object_stores": entries}))
}

async fn show(State(app): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    app.object_stores
        .get(&name)
        .map(|e| Json(entry_json(&e)))
        .ok_or_else(|| ApiError::NotFound(format!("no object store is named {name:?}")))
}

async fn remove(State(app): State<AppState>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    app.object_stores.remove(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
