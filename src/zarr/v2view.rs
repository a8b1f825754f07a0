//! The Zarr v2 view of a version: `.zgroup`, `.zattrs`, `.zarray` and a consolidated
//! `.zmetadata` in xarray's v2 encoding, converted from the v3 metadata by the kerchunk export's
//! [`array_to_v2`], and the resolution of v2 keys to the nodes and chunks the v3 keys name.
//! Arrays that v2 cannot express are left out and named in the root `.zattrs`.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::ChunkKeyEncoding;
use super::grid::ChunkLocation;
use super::hierarchy::{Hierarchy, Node};
use super::kerchunk::export::{array_to_v2, group_to_v2};
use super::metadata::NodeKind;

/// The root `.zattrs` attribute naming the arrays left out of the v2 view, with why.
pub const OMITTED_ATTRIBUTE: &str = "zarrgate";

/// The v2 metadata keys, which no v2 node may be named.
pub const V2_NAMES: [&str; 4] = [".zgroup", ".zattrs", ".zarray", ".zmetadata"];

/// Whether some chunks of an array have no data (and so read as its fill value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Every chunk of the grid is stored.
    None,
    /// At least one is not.
    Some,
    /// Not known (too many chunks to check).
    Unknown,
}

/// A version's Zarr v2 view.
#[derive(Debug, Default)]
pub struct V2View {
    /// Every document by key (`.zgroup`, `obs/.zattrs`, `air/.zarray`, `.zmetadata`).
    docs: HashMap<String, Bytes>,
    /// The arrays in the view and the `dimension_separator` of their chunk keys.
    arrays: HashMap<String, char>,
    /// Arrays left out, with why, by path.
    omitted: BTreeMap<String, String>,
}

/// What a v2 key names.
#[derive(Debug)]
pub enum V2Resolved<'a> {
    /// A document of the view (its key).
    Doc(&'a str),
    /// A chunk of an array in the view: the same chunk as the v3 key of these coordinates.
    Chunk { node: &'a Node, coords: Vec<u64>, location: ChunkLocation },
    /// A v2 key with nothing behind it: the reason, for a person reading the 404.
    NotFound(String),
    /// Not a key of the v2 view.
    Other,
}

/// The arrays whose v2 `fill_value` depends on whether some of their chunks are missing: a v2
/// array has one fill value, both what xarray masks and what missing chunks read as, and for
/// these the v3 `fill_value` (missing chunks) and `_FillValue` (mask) differ.
pub fn fill_depends_on_missing(hierarchy: &Hierarchy) -> Vec<&Node> {
    hierarchy
        .nodes()
        .filter(|n| matches!(n.kind, NodeKind::Array(_)) && !hidden(n))
        .filter(|n| matches!(fills(&n.metadata()), Ok((declared, missing)) if !same_fill(&declared, &missing)))
        .collect()
}

/// The v2 `fill_value` an array would have with no missing chunks (the decoded `_FillValue`,
/// or null) and with some (the v3 `fill_value`), both spelled as v2 writes them.
fn fills(metadata: &Map<String, Value>) -> Result<(Value, Value), String> {
    let (without, _) = array_to_v2(metadata, false)?;
    let (with, _) = array_to_v2(metadata, true)?;
    let data_type = metadata.get("data_type").cloned().unwrap_or(Value::Null);
    Ok((v2_fill(&without["fill_value"], &data_type), v2_fill(&with["fill_value"], &data_type)))
}

/// A fill value as the v2 spec spells it: `"NaN"`, `"Infinity"`, `"-Infinity"` or a number;
/// v3's hexadecimal float spelling (`"0x7fc00000"`) converted.
fn v2_fill(value: &Value, data_type: &Value) -> Value {
    let Some(hex) = value.as_str().and_then(|s| s.strip_prefix("0x")) else { return value.clone() };
    let Ok(bits) = u64::from_str_radix(hex, 16) else { return value.clone() };
    let float = match data_type.as_str() {
        Some("float64") => f64::from_bits(bits),
        Some("float32") => f64::from(f32::from_bits(bits as u32)),
        Some("float16") => half_to_f64(bits as u16),
        _ => return value.clone(),
    };
    match float {
        f if f.is_nan() => json!("NaN"),
        f if f == f64::INFINITY => json!("Infinity"),
        f if f == f64::NEG_INFINITY => json!("-Infinity"),
        f => json!(f),
    }
}

fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits >> 15 == 1 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let mantissa = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => mantissa * 2f64.powi(-24),
        31 if mantissa == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + mantissa / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Whether two v2 fill values are the same value (`-9999` and `-9999.0` are).
fn same_fill(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
            (Some(x), Some(y), _, _) => x == y,
            (_, _, Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// A node that v2 cannot name: its own name, or an ancestor's, is a v2 metadata key.
fn hidden(node: &Node) -> bool {
    node.path.as_str().split('/').any(|segment| V2_NAMES.contains(&segment))
}

impl V2View {
    /// Builds the view of `hierarchy`; `missing` says, for the arrays
    /// [`fill_depends_on_missing`] named, whether some of their chunks are missing.
    pub fn build(hierarchy: &Hierarchy, missing: impl Fn(&Node) -> Missing) -> Result<Self, String> {
        let mut view = Self::default();
        let mut consolidated = Map::new();
        for node in hierarchy.nodes() {
            let prefix = if node.path.is_root() { String::new() } else { format!("{}/", node.path) };
            if hidden(node) {
                view.omitted.insert(
                    node.path.as_str().to_owned(),
                    "its path has a segment that is a Zarr v2 metadata key".into(),
                );
                continue;
            }
            let (head, attrs) = match &node.kind {
                NodeKind::Group => {
                    let (zgroup, zattrs) = group_to_v2(&node.metadata());
                    ((format!("{prefix}.zgroup"), zgroup), zattrs)
                }
                NodeKind::Array(_) => match array(node, &missing) {
                    Ok((zarray, zattrs, separator)) => {
                        view.arrays.insert(node.path.as_str().to_owned(), separator);
                        ((format!("{prefix}.zarray"), zarray), zattrs)
                    }
                    Err(why) => {
                        view.omitted.insert(node.path.as_str().to_owned(), why);
                        continue;
                    }
                },
            };
            consolidated.insert(head.0, head.1);
            consolidated.insert(format!("{prefix}.zattrs"), attrs);
        }
        if !view.omitted.is_empty() {
            let root = consolidated.entry(".zattrs").or_insert_with(|| json!({}));
            if let Some(attrs) = root.as_object_mut() {
                attrs.insert(OMITTED_ATTRIBUTE.into(), json!({"omitted_from_zarr_v2_view": view.omitted}));
            }
        }
        for (key, doc) in &consolidated {
            view.docs.insert(key.clone(), to_bytes(doc)?);
        }
        let zmetadata = json!({"zarr_consolidated_format": 1, "metadata": consolidated});
        view.docs.insert(".zmetadata".into(), to_bytes(&zmetadata)?);
        Ok(view)
    }

    /// The document at `key`.
    pub fn doc(&self, key: &str) -> Option<&Bytes> {
        self.docs.get(key)
    }

    /// Every document, by key (unordered).
    pub fn docs(&self) -> impl Iterator<Item = (&str, &Bytes)> + '_ {
        self.docs.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The arrays left out of the view, with why, by path.
    pub fn omitted(&self) -> &BTreeMap<String, String> {
        &self.omitted
    }

    /// Approximate heap footprint, for a cache's weigher.
    pub fn weight(&self) -> usize {
        let docs: usize = self.docs.iter().map(|(k, v)| k.len() + v.len() + 64).sum();
        let arrays: usize = self.arrays.keys().map(|k| k.len() + 48).sum();
        let omitted: usize = self.omitted.iter().map(|(k, v)| k.len() + v.len() + 48).sum();
        docs + arrays + omitted
    }

    /// Whether `key` could be a key of any v2 view of `hierarchy`: a v2 document name, or chunk
    /// coordinates (digits and separators) below an array. A cheap test made before the view is
    /// built, so that a request for some other missing key never costs the whole v2 view.
    pub fn may_name(hierarchy: &Hierarchy, key: &str) -> bool {
        let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
        if V2_NAMES.contains(&name) {
            return true;
        }
        let coords =
            |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.' || b == b'/');
        if hierarchy.node("").is_some_and(|n| matches!(n.kind, NodeKind::Array(_))) {
            return coords(key);
        }
        for (i, _) in key.match_indices('/') {
            match hierarchy.node(&key[..i]) {
                Some(node) if matches!(node.kind, NodeKind::Array(_)) => return coords(&key[i + 1..]),
                Some(_) => {}
                None => break,
            }
        }
        false
    }

    /// What the v2 `key` names in `hierarchy` (the one this view was built from).
    pub fn resolve<'a>(&'a self, hierarchy: &'a Hierarchy, key: &'a str) -> V2Resolved<'a> {
        if self.docs.contains_key(key) {
            return V2Resolved::Doc(key);
        }
        let (parent, name) = key.rsplit_once('/').unwrap_or(("", key));
        if V2_NAMES.contains(&name) {
            return V2Resolved::NotFound(match self.omitted.get(parent) {
                Some(why) => format!("{parent} is not in the Zarr v2 view of this store: {why}"),
                None => format!("no Zarr v2 node has the key {key:?}"),
            });
        }
        if let Some(root) = hierarchy.node("").filter(|n| matches!(n.kind, NodeKind::Array(_))) {
            return self.chunk(root, key);
        }
        for (i, _) in key.match_indices('/') {
            match hierarchy.node(&key[..i]) {
                Some(node) if matches!(node.kind, NodeKind::Array(_)) => return self.chunk(node, &key[i + 1..]),
                Some(_) => {}
                None => break,
            }
        }
        V2Resolved::Other
    }

    fn chunk<'a>(&self, node: &'a Node, key: &str) -> V2Resolved<'a> {
        let NodeKind::Array(layout) = &node.kind else { return V2Resolved::Other };
        let Some(&separator) = self.arrays.get(node.path.as_str()) else {
            return match self.omitted.get(node.path.as_str()) {
                Some(why) => V2Resolved::NotFound(format!("array {} is not in the Zarr v2 view: {why}", node.path)),
                None => V2Resolved::Other,
            };
        };
        let Some(coords) = ChunkKeyEncoding::V2 { separator }.parse(key, layout.grid.ndim()) else {
            return V2Resolved::Other;
        };
        match layout.grid.locate(&coords) {
            Some(location) => V2Resolved::Chunk { node, coords, location },
            None => V2Resolved::NotFound(format!(
                "chunk {key:?} is outside the chunk grid {:?} of array {}",
                layout.grid.grid_shape(),
                node.path
            )),
        }
    }
}

/// `.zarray`, `.zattrs` and the dimension separator of an array, or why v2 cannot express it.
fn array(node: &Node, missing: &impl Fn(&Node) -> Missing) -> Result<(Value, Value, char), String> {
    let (declared, when_missing) = fills(&node.metadata())?;
    let fill = if same_fill(&declared, &when_missing) {
        declared
    } else {
        match (declared, missing(node)) {
            (declared, Missing::None) => declared,
            (Value::Null, Missing::Some | Missing::Unknown) => when_missing,
            (declared, known) => {
                let some =
                    if known == Missing::Some { "some of its chunks are missing" } else { "some may be missing" };
                return Err(format!(
                    "{some} and read as its fill_value {when_missing}, while its _FillValue attribute is {declared}: \
                     a Zarr v2 array has one fill value for both"
                ));
            }
        }
    };
    let (mut zarray, zattrs) = array_to_v2(&node.metadata(), false)?;
    zarray["fill_value"] = fill;
    // xarray's v2 encoding: the fill value lives in .zarray only (xarray reads it as _FillValue).
    let mut zattrs = zattrs;
    if let Some(attrs) = zattrs.as_object_mut() {
        attrs.remove("_FillValue");
    }
    let separator = if zarray["dimension_separator"] == "/" { '/' } else { '.' };
    Ok((zarray, zattrs, separator))
}

fn to_bytes(value: &Value) -> Result<Bytes, String> {
    serde_json::to_vec(value).map(Bytes::from).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
