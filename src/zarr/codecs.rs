//! Codecs by their Zarr v3 name: where each goes in a chain, and whether stock zarr-python and
//! zarrs decode it. zarrgate never decodes a chunk, so it serves arrays whatever their codecs;
//! what it can do is place codecs right, let zarrs check the rest of the metadata, and warn
//! readers when they will need a plugin.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};
use zarrs::array::Codec;
use zarrs::metadata::v3::MetadataV3;
use zarrs::plugin::PluginCreateError;

/// Where a codec goes in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecKind {
    /// Works on arrays: before the array-to-bytes codec.
    ArrayToArray,
    /// Turns an array into bytes: exactly one per chain.
    ArrayToBytes,
    /// Works on bytes: after the array-to-bytes codec.
    BytesToBytes,
}

/// Codecs that work on typed arrays. imagecodecs' TIFF predictors (`delta`, `floatpred`, `xor`)
/// and shuffles take the chunk's shape and dtype and decode an array, as `filters` before a
/// v2 compressor.
const ARRAY_TO_ARRAY: &[&str] = &[
    "transpose",
    "bitround",
    "reshape",
    "zarrs.squeeze",
    "numcodecs.delta",
    "numcodecs.fixedscaleoffset",
    "numcodecs.quantize",
    "numcodecs.astype",
    "numcodecs.packbits",
    "numcodecs.bitround",
    "numcodecs.imagecodecs_delta",
    "numcodecs.imagecodecs_floatpred",
    "numcodecs.imagecodecs_xor",
    "numcodecs.imagecodecs_byteshuffle",
    "numcodecs.imagecodecs_quantize",
];

/// Codecs that turn an array into bytes. kerchunk's `grib` and gribberish's `gribberish` decode
/// a whole GRIB message into the array's values.
const ARRAY_TO_BYTES: &[&str] = &[
    "bytes",
    "sharding_indexed",
    "vlen-utf8",
    "vlen-bytes",
    "packbits",
    "zfp",
    "zarrs.vlen",
    "zarrs.vlen_v2",
    "zarrs.optional",
    "numcodecs.pcodec",
    "numcodecs.zfpy",
    "numcodecs.grib",
    "gribberish",
];

/// What zarr-python 3 decodes with its own dependencies: the core codecs and `numcodecs.zarr3`'s.
const ZARR_PYTHON: &[&str] = &[
    "bytes",
    "transpose",
    "sharding_indexed",
    "vlen-utf8",
    "vlen-bytes",
    "blosc",
    "gzip",
    "zstd",
    "crc32c",
    "numcodecs.blosc",
    "numcodecs.lz4",
    "numcodecs.zstd",
    "numcodecs.zlib",
    "numcodecs.gzip",
    "numcodecs.bz2",
    "numcodecs.lzma",
    "numcodecs.shuffle",
    "numcodecs.delta",
    "numcodecs.bitround",
    "numcodecs.fixedscaleoffset",
    "numcodecs.quantize",
    "numcodecs.packbits",
    "numcodecs.astype",
    "numcodecs.crc32",
    "numcodecs.crc32c",
    "numcodecs.adler32",
    "numcodecs.fletcher32",
    "numcodecs.jenkins_lookup3",
    "numcodecs.pcodec",
    "numcodecs.zfpy",
];

/// zarrs codecs behind cargo features that zarrgate's build leaves out.
const ZARRS_FEATURE_GATED: &[&str] = &["zfp", "zarrs.zfp", "numcodecs.zfpy", "zarrs.gdeflate"];

/// At most this many warnings in a summary, then one that counts the others.
pub const MAX_WARNINGS: usize = 100;

/// The kind of a codec zarrgate knows, by name.
pub fn kind(name: &str) -> Option<CodecKind> {
    if ARRAY_TO_ARRAY.contains(&name) {
        Some(CodecKind::ArrayToArray)
    } else if ARRAY_TO_BYTES.contains(&name) {
        Some(CodecKind::ArrayToBytes)
    } else if ZARR_PYTHON.contains(&name) || zarrs_has(name) {
        Some(CodecKind::BytesToBytes)
    } else {
        None
    }
}

/// Whether zarrgate's zarrs has a codec of this name (whatever its configuration).
fn zarrs_has(name: &str) -> bool {
    let Ok(metadata) = serde_json::from_value::<MetadataV3>(json!({"name": name})) else { return false };
    !matches!(Codec::from_metadata(&metadata), Err(PluginCreateError::Unsupported(_)))
}

fn name_of(codec: &Value) -> &str {
    codec.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// Takes out of `codecs` the `numcodecs.*` codecs zarrgate's zarrs does not have, so that zarrs
/// validates the rest of the metadata; an array-to-bytes one is replaced by `bytes` (same
/// decoded chunk). Returns the problems of their places and configurations. A codec of
/// another namespace stays, for zarrs to refuse if it does not know it.
pub fn keep_what_zarrs_reads(codecs: &mut Vec<Value>) -> Vec<String> {
    let kinds: Vec<Option<CodecKind>> = codecs.iter().map(|c| kind(name_of(c))).collect();
    let Some(serializer) = kinds.iter().position(|k| *k == Some(CodecKind::ArrayToBytes)) else {
        return Vec::new(); // zarrs says what is missing
    };
    let serializer_name = name_of(&codecs[serializer]).to_owned();
    let mut problems = Vec::new();
    let mut out = Vec::with_capacity(codecs.len());
    for (at, codec) in std::mem::take(codecs).into_iter().enumerate() {
        let name = name_of(&codec).to_owned();
        if !name.starts_with("numcodecs.") || zarrs_has(&name) {
            out.push(codec);
            continue;
        }
        match kinds[at] {
            Some(CodecKind::ArrayToArray) if at > serializer => {
                problems.push(format!("codec {name} works on arrays: it must come before {serializer_name}"));
            }
            Some(CodecKind::BytesToBytes) if at < serializer => {
                problems.push(format!("codec {name} works on bytes: it must come after {serializer_name}"));
            }
            Some(CodecKind::ArrayToBytes) if at == serializer => {
                out.push(json!({"name": "bytes", "configuration": {"endian": "little"}}));
            }
            Some(CodecKind::ArrayToBytes) => {
                problems
                    .push(format!("codec {name} turns arrays into bytes, as {serializer_name} does: a chain has one"));
            }
            _ => {}
        }
        if codec.get("configuration").is_some_and(|c| !c.is_object()) {
            problems.push(format!("codec {name}: configuration must be an object"));
        }
    }
    *codecs = out;
    problems
}

/// One warning per codec of array `path` that stock zarr-python or zarrs cannot decode (the
/// reader needs a plugin), each codec named once.
pub fn reader_warnings(path: &str, metadata: &Map<String, Value>) -> Vec<String> {
    let Some(Value::Array(codecs)) = metadata.get("codecs") else { return Vec::new() };
    let names: BTreeSet<&str> = codecs.iter().map(name_of).collect();
    let mut warnings = Vec::new();
    for name in names {
        let python = ZARR_PYTHON.contains(&name);
        let zarrs = ZARRS_FEATURE_GATED.contains(&name) || zarrs_has(name);
        let array = if path.is_empty() { "the root array".to_owned() } else { format!("array {path:?}") };
        match (python, zarrs) {
            (true, true) => {}
            (true, false) => {
                warnings.push(format!("{array}: codec {name} is not decoded by zarrs (zarr-python reads it)"))
            }
            (false, true) => warnings.push(format!(
                "{array}: codec {name} is not decoded by stock zarr-python (zarrs reads it){}",
                plugin_hint(name)
            )),
            (false, false) => warnings.push(format!(
                "{array}: codec {name} is decoded by neither stock zarr-python nor zarrs: readers need a plugin{}",
                plugin_hint(name)
            )),
        }
    }
    warnings
}

/// Which package decodes a codec readers need a plugin for, when zarrgate knows it.
fn plugin_hint(name: &str) -> &'static str {
    if name.starts_with("numcodecs.imagecodecs_") {
        " (imagecodecs' numcodecs codecs, registered with zarr-python as numcodecs.<id>)"
    } else if name == "gribberish" {
        " (gribberish's codec: pip install gribberish, then import gribberish.zarr.codec)"
    } else if name == "numcodecs.grib" {
        " (kerchunk.codecs.GRIBCodec with eccodes, registered with zarr-python as numcodecs.grib)"
    } else {
        ""
    }
}

/// Keeps the first [`MAX_WARNINGS`] warnings, and says how many more there were.
pub fn cap(warnings: &mut Vec<String>) {
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - MAX_WARNINGS;
        warnings.truncate(MAX_WARNINGS);
        warnings.push(format!("{more} more warnings like these"));
    }
}

#[cfg(test)]
mod tests;
