//! Whether GDAL can read an array through the page's GDAL snippet, and why not. The snippet is
//! for GDAL 3.10, as in rasterio's wheels (tests/python/test_gdal.py): it reads the Zarr v2 view
//! (it has no v3 `bytes` codec), as a raster (two dimensions or more), of numbers, with no
//! filter (it has no `shuffle`: "Filter shuffle not handled") and at most one of numcodecs'
//! gzip, zlib, zstd, blosc and lz4 compressors.

use serde_json::Value;

use crate::zarr::hierarchy::Node;
use crate::zarr::metadata::NodeKind;

/// The compressors this GDAL has, by their v3 names.
const COMPRESSORS: [&str; 8] =
    ["gzip", "zstd", "blosc", "numcodecs.gzip", "numcodecs.zlib", "numcodecs.zstd", "numcodecs.blosc", "numcodecs.lz4"];

/// The data types this GDAL reads as raster bands.
const NUMBERS: [&str; 12] = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
];

/// Why GDAL 3.10 cannot read array `node` (a sentence after "GDAL cannot read this array: "),
/// or `None` when it can (and for a group, whose arrays GDAL lists).
pub(super) fn cannot_read(node: &Node) -> Option<String> {
    let NodeKind::Array(layout) = &node.kind else { return None };
    let ndim = layout.grid.ndim();
    if ndim < 2 {
        return Some(format!(
            "it reads arrays of two dimensions or more, as rasters, and this one has {ndim} \
             (read it with xarray or zarr-python)"
        ));
    }
    let metadata = node.metadata();
    let data_type = metadata.get("data_type").map(|t| t.as_str().map_or_else(|| t.to_string(), str::to_owned));
    let data_type = data_type.unwrap_or_default();
    if !NUMBERS.contains(&data_type.as_str()) {
        return Some(format!("it reads numbers as rasters, and this array's data type is {data_type}"));
    }
    let mut compressors = 0;
    for codec in metadata.get("codecs").and_then(Value::as_array).into_iter().flatten() {
        let name = codec.get("name").and_then(Value::as_str).unwrap_or_default();
        match name {
            "bytes" => {}
            "numcodecs.shuffle" | "shuffle" => {
                return Some(
                    "this array's chunks are shuffled (HDF5's shuffle filter), and GDAL 3.10 \
                     (rasterio's wheels) has no shuffle filter"
                        .into(),
                );
            }
            c if COMPRESSORS.contains(&c) => {
                compressors += 1;
                if compressors > 1 {
                    return Some("this array's chunks are compressed twice, and GDAL decompresses once".into());
                }
            }
            other => {
                return Some(format!(
                    "GDAL 3.10 (rasterio's wheels) has no codec {other:?}: it reads chunks compressed with \
                     gzip, zlib, zstd, blosc or lz4, unfiltered"
                ));
            }
        }
    }
    None
}
