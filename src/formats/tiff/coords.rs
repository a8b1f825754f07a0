//! `x` and `y` coordinate variables (pixel centres, as rioxarray's `open_rasterio` gives them)
//! for a group whose images share one size and one north-up transform, so that `xr.open_zarr`
//! selects by map coordinates. Their values are computed from the transform and held inline.

use serde_json::json;

use super::Served;
use crate::formats::{Chunk, Node};

/// The `x` and `y` arrays of `served`, or none when its images differ in size or transform,
/// the transform is rotated, or the values would pass `inline_budget` bytes (then taken from it).
pub(super) fn coordinates(served: &[Served], inline_budget: &mut u64) -> Vec<(&'static str, Node)> {
    let Some(first) = served.first() else { return Vec::new() };
    let Some([a, b, c, d, e, f]) = first.georef.transform else { return Vec::new() };
    let (width, height) = (first.image.width, first.image.height);
    let same = served
        .iter()
        .all(|s| s.georef.transform == first.georef.transform && (s.image.width, s.image.height) == (width, height));
    let bytes = (width + height) * 8;
    if !same || b != 0.0 || d != 0.0 || bytes > *inline_budget {
        return Vec::new();
    }
    *inline_budget -= bytes;
    let geographic = first.georef.attributes.get("GTModelTypeGeoKey").and_then(|v| v.as_u64()) == Some(2);
    let (x_name, y_name) =
        if geographic { ("longitude", "latitude") } else { ("projection_x_coordinate", "projection_y_coordinate") };
    vec![
        ("x", axis("x", "X", x_name, width, |i| c + a * (i as f64 + 0.5))),
        ("y", axis("y", "Y", y_name, height, |j| f + e * (j as f64 + 0.5))),
    ]
}

/// A 1-d coordinate of `length` values `value(0)`, `value(1)`...
fn axis(dimension: &str, axis: &str, standard_name: &str, length: u64, value: impl Fn(u64) -> f64) -> Node {
    let bytes: Vec<u8> = (0..length).flat_map(|i| value(i).to_le_bytes()).collect();
    let metadata = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": [length],
        "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [length]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"axis": axis, "standard_name": standard_name},
        "dimension_names": [dimension],
    });
    Node { metadata: super::object(metadata).into(), chunks: vec![(vec![0], Chunk::Inline(bytes))] }
}
