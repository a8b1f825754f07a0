//! `GET /api/v1/stores/{store}/manifest?format=native|kerchunk`: the current version as a
//! document, streamed block by block. Registering it again gives a store serving the same bytes.

use std::io;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc::Sender;
use serde::Deserialize;
use serde_json::{Value, json};

use super::summary::no_store;
use crate::app::AppState;
use crate::error::ApiError;
use crate::versions::{Reader, VersionView};
use crate::zarr::hierarchy::Node;
use crate::zarr::kerchunk::export::{array_to_v2, group_to_v2};
use crate::zarr::manifest::literal_path;
use crate::zarr::metadata::NodeKind;
use crate::zarr::source::SourceFacts;
use crate::zarr::{ChunkKeyEncoding, ChunkLocation, ChunkRef, ManifestBlock};

const FLUSH_AT: usize = 1 << 16;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExportParams {
    format: Option<String>,
}

/// Streams the current version in the asked format.
pub(super) async fn export(
    State(app): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<ExportParams>,
) -> Result<Response, ApiError> {
    let kerchunk = match params.format.as_deref() {
        None | Some("native") => false,
        Some("kerchunk") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!("format {other:?} is not supported: use native or kerchunk")));
        }
    };
    let head = app.reader.current(&name).await?.ok_or_else(|| no_store(&name))?;
    let view = app.reader.view(&head).await?;
    if kerchunk {
        // Refuse before the first byte: a half-written document is worse than a clear 422.
        let problems: Vec<String> = view
            .hierarchy
            .nodes()
            .filter(|n| matches!(n.kind, NodeKind::Array(_)))
            .filter_map(|n| array_to_v2(&n.stored_metadata(), false).err().map(|e| format!("array {}: {e}", n.path)))
            .collect();
        if !problems.is_empty() {
            return Err(ApiError::Invalid {
                title: format!("store {name:?} cannot be expressed as kerchunk (Zarr v2) references"),
                problems,
            });
        }
    }
    let tiles = app.reader.tiles(&head).await?;
    let sources = app.stores.recorded_sources(&head).await?;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, io::Error>>(4);
    tokio::spawn(async move {
        let mut out = Writer { out: String::new(), tx: &mut tx, first: true };
        let result = if kerchunk {
            out.kerchunk(&app.reader, &view, &tiles).await
        } else {
            out.native(&app.reader, &view, &tiles, &sources).await
        };
        if let Err(e) = result {
            tracing::error!(store = %head.store, version = head.id, error = %e, "export failed");
            let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
        }
    });
    Ok(([(header::CONTENT_TYPE, "application/json")], Body::from_stream(rx)).into_response())
}

/// A JSON document written in pieces.
struct Writer<'a> {
    out: String,
    tx: &'a mut Sender<Result<Bytes, io::Error>>,
    first: bool,
}

impl Writer<'_> {
    /// Writes `"key": value` after a comma unless it is the first member of its object.
    fn member(&mut self, key: &str, value: &str) {
        self.out.push_str(if self.first { "\n" } else { ",\n" });
        self.first = false;
        self.out.push_str(&Value::from(key).to_string());
        self.out.push_str(": ");
        self.out.push_str(value);
    }

    async fn flush_if_full(&mut self) -> Result<(), ApiError> {
        if self.out.len() >= FLUSH_AT { self.flush().await } else { Ok(()) }
    }

    async fn flush(&mut self) -> Result<(), ApiError> {
        let chunk = Bytes::from(std::mem::take(&mut self.out));
        self.tx.send(Ok(chunk)).await.map_err(|_| ApiError::Internal("the client went away".into()))
    }

    async fn native(
        &mut self,
        reader: &Reader,
        view: &VersionView,
        tiles: &[(String, u64)],
        sources: &[(String, SourceFacts)],
    ) -> Result<(), ApiError> {
        self.out.push_str("{\"nodes\": {");
        for node in view.hierarchy.nodes() {
            let metadata = Value::Object(node.stored_metadata().into_owned()).to_string();
            let NodeKind::Array(layout) = &node.kind else {
                self.member(node.path.as_str(), &metadata);
                continue;
            };
            self.member(node.path.as_str(), metadata.strip_suffix('}').unwrap_or(&metadata));
            self.out.push_str(", \"manifest\": {");
            self.first = true;
            for block in blocks(reader, view, tiles, node) {
                let (tile, block) = block.await?;
                for (slot, chunk) in block.iter() {
                    let coords = layout.grid.coords_of(ChunkLocation { tile, slot }).unwrap_or_default();
                    let entry = match chunk {
                        ChunkRef::Virtual { source, offset, length } => {
                            json!({"path": &*source.url, "offset": offset, "length": length})
                        }
                        ChunkRef::Inline(bytes) => {
                            json!({"data": base64::engine::general_purpose::STANDARD.encode(&bytes)})
                        }
                        ChunkRef::Assembled(recipe) => {
                            let bytes = assembled_bytes(reader, view, node, recipe).await?;
                            json!({"data": base64::engine::general_purpose::STANDARD.encode(&bytes)})
                        }
                        ChunkRef::Missing => continue,
                    };
                    self.member(&crate::zarr::key::manifest_key(&coords), &entry.to_string());
                    self.flush_if_full().await?;
                }
            }
            self.out.push_str("}}");
            self.first = false;
        }
        self.out.push_str("\n},\n\"sources\": {");
        self.first = true;
        for (url, facts) in sources.iter().filter(|(_, f)| f != &SourceFacts::default()) {
            self.member(url, &serde_json::to_string(facts).unwrap_or_else(|_| "{}".into()));
        }
        self.out.push_str("}}\n");
        self.flush().await
    }

    /// Kerchunk version 1 with Zarr v2 metadata; chunk keys in v2 layout (`x/0.1`, or `x/0/1`).
    async fn kerchunk(&mut self, reader: &Reader, view: &VersionView, tiles: &[(String, u64)]) -> Result<(), ApiError> {
        self.out.push_str("{\"version\": 1, \"refs\": {");
        for node in view.hierarchy.nodes() {
            let prefix = if node.path.is_root() { String::new() } else { format!("{}/", node.path) };
            let NodeKind::Array(layout) = &node.kind else {
                let (zgroup, zattrs) = group_to_v2(&node.stored_metadata());
                self.member(&format!("{prefix}.zgroup"), &Value::from(zgroup.to_string()).to_string());
                self.member(&format!("{prefix}.zattrs"), &Value::from(zattrs.to_string()).to_string());
                continue;
            };
            // Chunks first: whether any is missing decides the v2 fill value (key order is free).
            let (zarray, _) = array_to_v2(&node.stored_metadata(), false).map_err(ApiError::Internal)?;
            let separator = if zarray["dimension_separator"] == "/" { '/' } else { '.' };
            let keys = ChunkKeyEncoding::V2 { separator };
            let mut stored = 0u64;
            // Paths as fsspec reads them (text, not URLs); consecutive chunks share their source.
            let mut last: Option<(String, String)> = None;
            for block in blocks(reader, view, tiles, node) {
                let (tile, block) = block.await?;
                for (slot, chunk) in block.iter() {
                    let coords = layout.grid.coords_of(ChunkLocation { tile, slot }).unwrap_or_default();
                    let value = match chunk {
                        ChunkRef::Virtual { source, offset, length } => {
                            if last.as_ref().is_none_or(|(url, _)| *url != *source.url) {
                                last = Some((source.url.to_string(), literal_path(&source.url)));
                            }
                            json!([last.as_ref().map_or("", |(_, path)| path.as_str()), offset, length])
                        }
                        ChunkRef::Inline(bytes) => {
                            json!(format!("base64:{}", base64::engine::general_purpose::STANDARD.encode(&bytes)))
                        }
                        ChunkRef::Assembled(recipe) => {
                            let bytes = assembled_bytes(reader, view, node, recipe).await?;
                            json!(format!("base64:{}", base64::engine::general_purpose::STANDARD.encode(&bytes)))
                        }
                        ChunkRef::Missing => continue,
                    };
                    stored += 1;
                    self.member(&format!("{prefix}{}", keys.encode(&coords)), &value.to_string());
                    self.flush_if_full().await?;
                }
            }
            let has_missing = stored < layout.grid.chunk_count();
            let (zarray, zattrs) = array_to_v2(&node.stored_metadata(), has_missing).map_err(ApiError::Internal)?;
            self.member(&format!("{prefix}.zarray"), &Value::from(zarray.to_string()).to_string());
            self.member(&format!("{prefix}.zattrs"), &Value::from(zattrs.to_string()).to_string());
        }
        self.out.push_str("\n}}\n");
        self.flush().await
    }
}

/// The decoded blocks of array `node`, one at a time and not through the cache (an export must
/// not evict what readers need).
fn blocks<'a>(
    reader: &'a Reader,
    view: &'a VersionView,
    tiles: &'a [(String, u64)],
    node: &'a Node,
) -> impl Iterator<Item = impl Future<Output = Result<(u64, ManifestBlock), ApiError>> + 'a> + 'a {
    tiles
        .iter()
        .filter(move |(n, _)| n == node.path.as_str())
        .map(move |(_, tile)| async move { Ok((*tile, reader.load_block(&view.head, node, *tile).await?)) })
}

/// An assembled chunk's bytes, built: a kerchunk or native manifest cannot say how to assemble
/// one, so it is exported inline.
async fn assembled_bytes(reader: &Reader, view: &VersionView, node: &Node, recipe: Bytes) -> Result<Bytes, ApiError> {
    match reader.assembled_as_stored(view, node, recipe).await? {
        crate::versions::Chunk::Bytes { bytes, .. } => Ok(bytes),
        _ => Err(ApiError::Internal(format!("array {}: an assembled chunk was not built", node.path))),
    }
}
