//! Node metadata: validation of a node's `zarr.json` with zarrs, and the facts the server needs
//! from an array's metadata (its chunk grid and chunk key encoding).

use std::sync::Arc;

use base64::Engine;
use serde_json::{Map, Value};
use zarrs::array::{Array, ArrayMetadata};
use zarrs::metadata::v3::{ArrayMetadataV3, GroupMetadataV3};
use zarrs::storage::store::MemoryStore;

use super::grid::{ChunkGrid, DEFAULT_TILE_CHUNKS};
pub use super::json_text::{parse_json_text, to_json_text};
use super::key::ChunkKeyEncoding;

/// What kind of node a metadata document describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeKind {
    /// A group.
    Group,
    /// An array with its regular chunk grid and chunk key encoding.
    Array(ArrayLayout),
}

/// The part of an array's metadata that locates its chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayLayout {
    /// The regular chunk grid, with its tiling.
    pub grid: ChunkGrid,
    /// How chunk keys are spelled.
    pub encoding: ChunkKeyEncoding,
}

/// Validates a node's `zarr.json` (with `manifest` already removed). `consolidated_metadata` on
/// groups is dropped: the server writes its own. Returns every problem found.
pub fn validate_node(metadata: &mut Map<String, Value>) -> Result<NodeKind, Vec<String>> {
    validate_node_tiled(metadata, Tiling::New(DEFAULT_TILE_CHUNKS))
}

/// How an array's tiles (its manifest blocks) are shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiling<'a> {
    /// A new array: the default tiles of at most this many chunks.
    New(u64),
    /// An array as stored: the tile shape it was given when it first appeared.
    Stored(&'a [u64]),
}

/// As [`validate_node`], with arrays tiled as `tiling` says.
pub fn validate_node_tiled(metadata: &mut Map<String, Value>, tiling: Tiling<'_>) -> Result<NodeKind, Vec<String>> {
    if metadata.get("zarr_format") != Some(&Value::from(3)) {
        return Err(vec![format!(
            "zarr_format must be 3, found {}",
            metadata.get("zarr_format").map_or_else(|| "nothing".to_owned(), Value::to_string)
        )]);
    }
    match metadata.get("node_type").and_then(Value::as_str) {
        Some("group") => {
            metadata.remove("consolidated_metadata");
            validate_group(metadata).map(|()| NodeKind::Group)
        }
        Some("array") => validate_array(metadata, tiling).map(NodeKind::Array),
        _ => Err(vec![r#"node_type must be "group" or "array""#.to_owned()]),
    }
}

fn validate_group(metadata: &Map<String, Value>) -> Result<(), Vec<String>> {
    let group: GroupMetadataV3 = serde_json::from_value(Value::Object(metadata.clone()))
        .map_err(|e| vec![format!("invalid group metadata: {e}")])?;
    let unknown: Vec<String> = group
        .additional_fields
        .iter()
        .filter(|(_, f)| f.must_understand())
        .map(|(name, _)| format!("unknown field {name:?} (allowed only as an object with \"must_understand\": false)"))
        .collect();
    if unknown.is_empty() { Ok(()) } else { Err(unknown) }
}

/// The data type of `metadata` as [`as_zarrs_sees_it`] writes it for zarrs, without copying the
/// rest of the metadata (its attributes may be large); `None` when there is none, or a
/// `null_terminated_bytes` type without a valid length.
pub fn zarrs_data_type(metadata: &Map<String, Value>) -> Option<Value> {
    let data_type = metadata.get("data_type")?;
    if data_type.get("name").and_then(Value::as_str) != Some("null_terminated_bytes") {
        return Some(data_type.clone());
    }
    let n = data_type
        .pointer("/configuration/length_bytes")
        .and_then(Value::as_u64)
        .filter(|n| (1..=1 << 20).contains(n))?;
    Some(Value::from(format!("r{}", n * 8)))
}

/// The metadata as zarrs reads it. zarr-python writes numpy's fixed-width bytes (`|S<n>`, netCDF
/// `char` variables) as `null_terminated_bytes`, a data type zarrs does not have yet: zarrs sees
/// raw bits of the same width instead (same bytes per element, so the same codecs apply), with
/// the fill value's bytes (base64 in the metadata) padded to that width.
pub fn as_zarrs_sees_it(metadata: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let mut m = metadata.clone();
    let data_type = m.get("data_type").cloned().unwrap_or(Value::Null);
    if data_type.get("name").and_then(Value::as_str) != Some("null_terminated_bytes") {
        return Ok(m);
    }
    let n = data_type
        .pointer("/configuration/length_bytes")
        .and_then(Value::as_u64)
        .filter(|n| (1..=1 << 20).contains(n))
        .ok_or("null_terminated_bytes needs configuration.length_bytes between 1 and 1048576")?;
    let fill = match m.get("fill_value") {
        Some(Value::String(b64)) => super::native::BASE64
            .decode(b64)
            .map_err(|e| format!("fill_value {b64:?} of a null_terminated_bytes array is not base64 ({e})"))?,
        Some(Value::Number(z)) if z.as_u64() == Some(0) => Vec::new(),
        other => return Err(format!("fill_value {other:?} of a null_terminated_bytes array must be a base64 string")),
    };
    if fill.len() as u64 > n {
        return Err(format!("fill_value has {} bytes, more than length_bytes {n}", fill.len()));
    }
    let mut padded = fill;
    padded.resize(n as usize, 0);
    m.insert("data_type".into(), Value::from(format!("r{}", n * 8)));
    m.insert("fill_value".into(), Value::from(padded));
    Ok(m)
}

/// The array `metadata` describes as zarrs holds it (in memory, no store behind it): what
/// decodes, encodes and checks an array's chunks. `seen` is the metadata [`as_zarrs_sees_it`]
/// answered, when the caller wants to change it first (codec levels); the error is zarrs' own.
pub fn zarrs_array(seen: Map<String, Value>) -> Result<Array<MemoryStore>, String> {
    let v3: ArrayMetadataV3 = serde_json::from_value(Value::Object(seen)).map_err(|e| e.to_string())?;
    Array::new_with_metadata(Arc::new(MemoryStore::new()), "/", ArrayMetadata::V3(v3)).map_err(|e| e.to_string())
}

/// Takes out of `seen["codecs"]` what zarrs cannot read ([`super::codecs::keep_what_zarrs_reads`]);
/// the problems with their places.
fn without_codecs_zarrs_lacks(seen: &mut Map<String, Value>) -> Vec<String> {
    match seen.get_mut("codecs") {
        Some(Value::Array(codecs)) => super::codecs::keep_what_zarrs_reads(codecs),
        _ => Vec::new(),
    }
}

/// The fields every array's `zarr.json` has, beside `zarr_format` and `node_type`.
const ARRAY_FIELDS: [&str; 6] = ["shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"];

fn validate_array(metadata: &Map<String, Value>, tiling: Tiling<'_>) -> Result<ArrayLayout, Vec<String>> {
    let missing: Vec<String> = ARRAY_FIELDS
        .iter()
        .filter(|field| !metadata.contains_key(**field))
        .map(|field| {
            format!(
                "the required field {field:?} is missing (an array's zarr.json has zarr_format, node_type, {})",
                ARRAY_FIELDS.join(", ")
            )
        })
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let mut seen = as_zarrs_sees_it(metadata).map_err(|e| vec![e])?;
    let mut problems = without_codecs_zarrs_lacks(&mut seen);
    let v3: ArrayMetadataV3 =
        serde_json::from_value(Value::Object(seen)).map_err(|e| vec![format!("invalid array metadata: {e}")])?;
    problems.extend(v3.additional_fields.iter().filter(|(_, f)| f.must_understand()).map(|(name, _)| {
        format!("unknown field {name:?} (allowed only as an object with \"must_understand\": false)")
    }));
    if let Err(e) = Array::new_with_metadata(Arc::new(MemoryStore::new()), "/", ArrayMetadata::V3(v3)) {
        problems.push(e.to_string());
    }
    match array_layout_tiled(metadata, tiling) {
        Ok(layout) if problems.is_empty() => Ok(layout),
        Ok(_) => Err(problems),
        Err(e) => {
            problems.push(e);
            Err(problems)
        }
    }
}

/// Reads the chunk grid and key encoding of an array's metadata, tiled with the default block size.
pub fn array_layout(metadata: &Map<String, Value>) -> Result<ArrayLayout, String> {
    array_layout_tiled(metadata, Tiling::New(DEFAULT_TILE_CHUNKS))
}

/// Reads the chunk grid and key encoding of an array's metadata, tiled as `tiling` says.
pub fn array_layout_tiled(metadata: &Map<String, Value>, tiling: Tiling<'_>) -> Result<ArrayLayout, String> {
    let shape = u64_list(metadata.get("shape")).ok_or("shape must be a list of non-negative integers")?;
    let grid = metadata.get("chunk_grid").ok_or("chunk_grid is missing")?;
    let regular = grid.get("name").and_then(Value::as_str) == Some("regular");
    let chunk_shape = u64_list(grid.get("configuration").and_then(|c| c.get("chunk_shape")))
        .filter(|_| regular)
        .ok_or_else(|| format!("chunk_grid {grid} is not supported: only \"regular\" grids are"))?;
    let grid = match tiling {
        Tiling::New(max_tile) => ChunkGrid::with_max_tile(&shape, &chunk_shape, max_tile),
        Tiling::Stored(tile) => ChunkGrid::with_tile(&shape, &chunk_shape, tile.to_vec()),
    }
    .map_err(|e| e.to_string())?;
    let encoding = metadata.get("chunk_key_encoding").ok_or("chunk_key_encoding is missing")?;
    let encoding = ChunkKeyEncoding::from_metadata(encoding).map_err(|e| e.to_string())?;
    Ok(ArrayLayout { grid, encoding })
}

/// Reads the kind of an already validated node, as stored in the catalog with its tile shape.
pub fn node_kind(metadata: &Map<String, Value>, tile: Option<&[u64]>) -> Result<NodeKind, String> {
    match metadata.get("node_type").and_then(Value::as_str) {
        Some("array") => {
            let tile = tile.ok_or("an array stored without its tile shape")?;
            array_layout_tiled(metadata, Tiling::Stored(tile)).map(NodeKind::Array)
        }
        _ => Ok(NodeKind::Group),
    }
}

fn u64_list(value: Option<&Value>) -> Option<Vec<u64>> {
    value?.as_array()?.iter().map(Value::as_u64).collect()
}

/// A validated node. Its metadata is kept as compact JSON text, as the catalog stores it, and
/// parsed again where needed, one node at a time: a registration holds every node until it is
/// written, and a parsed map costs about ten times its text (100,000 arrays of ~450 bytes held
/// 450 MB of maps; bench/README.md, "Stop 13").
#[derive(Debug, Clone)]
pub struct ValidNode {
    /// Its path.
    pub path: super::path::NodePath,
    /// Its `zarr.json` as compact JSON text, as it will be served (for groups, before
    /// consolidation).
    pub json: Box<str>,
    /// Group or array (with layout).
    pub kind: NodeKind,
}

impl ValidNode {
    /// A node whose metadata is `metadata`.
    pub fn new(path: super::path::NodePath, metadata: &Map<String, Value>, kind: NodeKind) -> Self {
        Self { path, json: to_json_text(metadata), kind }
    }

    /// Its metadata, parsed.
    pub fn metadata(&self) -> Map<String, Value> {
        parse_json_text(&self.json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn air() -> Value {
        json!({
            "zarr_format": 3, "node_type": "array", "shape": [10, 73, 144], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [5, 73, 72]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": -9999.0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "numcodecs.zlib", "configuration": {"level": 4}}],
            "dimension_names": ["time", "lat", "lon"]
        })
    }

    #[test]
    fn accepts_the_design_example() {
        let NodeKind::Array(layout) = validate_node(&mut obj(air())).unwrap() else { panic!("not an array") };
        assert_eq!(layout.grid.grid_shape(), &[2, 1, 2]);
        assert_eq!(layout.encoding, ChunkKeyEncoding::Default { separator: '/' });
    }

    #[test]
    fn numcodecs_codecs_zarr_python_reads_are_accepted_in_their_place() {
        for (codec, at) in [
            (json!({"name": "numcodecs.blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": 1}}), 2),
            (json!({"name": "numcodecs.gzip", "configuration": {"level": 1}}), 2),
            (json!({"name": "numcodecs.zstd", "configuration": {"level": 1}}), 2),
            (json!({"name": "numcodecs.lz4", "configuration": {"acceleration": 1}}), 2),
            (json!({"name": "numcodecs.lzma"}), 2),
            (json!({"name": "numcodecs.crc32"}), 2),
            (json!({"name": "numcodecs.delta", "configuration": {"dtype": "<f4"}}), 0),
            (json!({"name": "numcodecs.quantize", "configuration": {"digits": 3, "dtype": "<f4"}}), 0),
        ] {
            let mut ok = air();
            ok["codecs"].as_array_mut().unwrap().insert(at, codec.clone());
            assert!(validate_node(&mut obj(ok)).is_ok(), "{codec}");
            let mut misplaced = air();
            misplaced["codecs"].as_array_mut().unwrap().insert(if at == 0 { 2 } else { 0 }, codec.clone());
            let problems = validate_node(&mut obj(misplaced)).unwrap_err();
            assert!(problems.iter().any(|p| p.contains("must come")), "{codec}: {problems:?}");
        }
    }

    #[test]
    fn groups_lose_their_consolidated_metadata() {
        let mut g = obj(json!({"zarr_format": 3, "node_type": "group", "attributes": {"a": 1},
                               "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {}}}));
        assert_eq!(validate_node(&mut g).unwrap(), NodeKind::Group);
        assert!(!g.contains_key("consolidated_metadata"));
    }

    #[test]
    fn names_what_is_wrong() {
        let cases = [
            (json!({"zarr_format": 2, "node_type": "array"}), "zarr_format must be 3"),
            (json!({"zarr_format": 3, "node_type": "folder"}), "node_type"),
            (json!({"zarr_format": 3, "node_type": "group", "surprise": 1}), "unknown field \"surprise\""),
        ];
        for (value, expected) in cases {
            let problems = validate_node(&mut obj(value)).unwrap_err();
            assert!(problems.iter().any(|p| p.contains(expected)), "{problems:?} lacks {expected}");
        }
        // A `numcodecs.*` codec zarrs does not know is some reader's plugin (accepted, with a
        // warning: src/zarr/codecs.rs); any other name must be one zarrs knows.
        let mut bad_codec = air();
        bad_codec["codecs"][1] = json!({"name": "nope"});
        let problems = validate_node(&mut obj(bad_codec)).unwrap_err();
        assert!(problems.iter().any(|p| p.contains("nope")), "{problems:?}");
        let mut bad_fill = air();
        bad_fill["fill_value"] = json!("lots");
        assert!(validate_node(&mut obj(bad_fill)).is_err());
        let mut bad_grid = air();
        bad_grid["chunk_grid"] = json!({"name": "rectilinear", "configuration": {}});
        assert!(validate_node(&mut obj(bad_grid)).is_err());
        let mut unknown_ok = air();
        unknown_ok["x_extension"] = json!({"must_understand": false, "v": 1});
        assert!(validate_node(&mut obj(unknown_ok)).is_ok());
    }
}
