//! Portable codecs (`?codecs=portable`): an array whose codecs some client cannot decode is
//! served with codecs every one of them can, its chunks decoded and encoded again when read.
//!
//! The portable set is what GDAL's Zarr driver, zarrita.js, zarrs and zarr-python 2 and 3 all
//! decode without a plugin: `bytes`, `gzip`, `zstd`, `blosc`, `crc32c`, `transpose` (no
//! sharding: the Zarr v2 view cannot carry it). netCDF4's default `numcodecs.zlib` with
//! `numcodecs.shuffle` is not in it (GDAL 3.10 has no shuffle; zarrita.js has neither), nor are
//! TIFF's predictors. The stored version keeps the file's own codecs: the served metadata is
//! derived from it when the version is loaded ([`served`]), and each chunk is made from the
//! file's bytes ([`transcode`]). Pure: the caller brings the bytes.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::assembled::{self, AssembleError};
use super::codecs::CodecKind;
use super::decode::ChunkDecoder;

/// Codecs every client decodes without a plugin.
pub const PORTABLE: &[&str] = &["bytes", "gzip", "zstd", "blosc", "crc32c", "transpose"];

/// Portable compressors: the first of them in a chain is kept as it is.
const PORTABLE_COMPRESSORS: &[&str] = &["gzip", "zstd", "blosc"];

/// Array-to-bytes codecs that pack values into fewer bytes (a GRIB2 message's packed field):
/// their arrays are served compressed, as a chain with a compressor is.
const PACKING_SERIALIZERS: &[&str] = &["gribberish", "numcodecs.grib"];

/// Codecs that change bytes without compressing them (checksums, byte shuffles): a chain of only
/// these is served without a compressor.
const NOT_COMPRESSING: &[&str] = &[
    "crc32c",
    "numcodecs.crc32",
    "numcodecs.crc32c",
    "numcodecs.adler32",
    "numcodecs.fletcher32",
    "numcodecs.jenkins_lookup3",
    "numcodecs.shuffle",
];

fn names(metadata: &Map<String, Value>) -> Vec<&str> {
    match metadata.get("codecs") {
        Some(Value::Array(codecs)) => {
            codecs.iter().map(|c| c.get("name").and_then(Value::as_str).unwrap_or_default()).collect()
        }
        _ => Vec::new(),
    }
}

/// Whether every codec of the array `metadata` describes is portable.
pub fn is_portable(metadata: &Map<String, Value>) -> bool {
    names(metadata).iter().all(|n| PORTABLE.contains(n))
}

/// The metadata served for the array `metadata` describes (its chunks of `chunk_shape`) in a
/// store with portable codecs: `Ok(None)` when its codecs are portable already (served as they
/// are, at no cost); else the same array with codecs `bytes` and a compressor (the chain's own
/// when portable, else `gzip` at `deflate_level`; none when the chain compressed nothing). An
/// array zarrgate cannot transcode (values of variable length, a codec zarrs cannot decode) is
/// `Err` with the reason: it is served as it is, and the summary says so.
pub fn served(
    metadata: &Map<String, Value>,
    chunk_shape: &[u64],
    deflate_level: u32,
) -> Result<Option<Map<String, Value>>, String> {
    if is_portable(metadata) {
        return Ok(None);
    }
    // GRIB2 messages packed as zarrgate's gribberish does not decode (JPEG 2000: its decoder
    // is a C library, left out of the build); the `grib` parser names the packing.
    if names(metadata).contains(&"gribberish")
        && let Some(packing) =
            metadata.get("attributes").and_then(|a| a.get("GRIB_packingType")).and_then(Value::as_str)
        && !crate::formats::grib::DECODED_PACKINGS.contains(&packing)
    {
        return Err(format!("its GRIB2 messages are packed as {packing}, which zarrgate does not decode"));
    }
    // The file's chunks must decode (within bounds: zarrs, or `imagecodecs.rs`) to values of
    // fixed size; the served codecs must encode them (checked below).
    let decoder = ChunkDecoder::new(metadata, chunk_shape, u64::MAX).map_err(|e| e.to_string())?;
    if decoder.data_type().fixed_size().is_none() {
        return Err("its values are of variable length".into());
    }
    let codecs = match metadata.get("codecs") {
        Some(Value::Array(codecs)) => codecs.as_slice(),
        _ => &[],
    };
    let bytes = codecs
        .iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some("bytes"))
        .cloned()
        .unwrap_or_else(|| json!({"name": "bytes", "configuration": {"endian": "little"}}));
    let name = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let serializer = codecs.iter().position(|c| super::codecs::kind(&name(c)) == Some(CodecKind::ArrayToBytes));
    let bytes_to_bytes = serializer.map_or(&[][..], |at| &codecs[at + 1..]);
    let compressor = bytes_to_bytes
        .iter()
        .find(|c| PORTABLE_COMPRESSORS.contains(&c.get("name").and_then(Value::as_str).unwrap_or_default()))
        .cloned()
        .or_else(|| {
            // A packing serializer (GRIB's messages) compresses as a bytes-to-bytes codec does.
            let packs = serializer.is_some_and(|at| PACKING_SERIALIZERS.contains(&name(&codecs[at]).as_str()));
            let compresses = packs
                || bytes_to_bytes
                    .iter()
                    .any(|c| !NOT_COMPRESSING.contains(&c.get("name").and_then(Value::as_str).unwrap_or_default()));
            compresses.then(|| json!({"name": "gzip", "configuration": {"level": deflate_level.min(9)}}))
        });
    let mut out = metadata.clone();
    out.insert("codecs".into(), Value::Array([Some(bytes), compressor].into_iter().flatten().collect()));
    // The served chain never keeps a codec decoded only here.
    debug_assert!(is_portable(&out));
    assembled::can_assemble(&out, chunk_shape).map_err(|e| format!("its portable codecs: {e}"))?;
    Ok(Some(out))
}

/// One chunk transcoded, and the time its decoding took.
#[derive(Debug)]
pub struct Transcoded {
    /// The chunk's bytes, encoded with the served codecs.
    pub bytes: Vec<u8>,
    /// The time spent decoding the file's chunk.
    pub decoding: Duration,
}

/// The chunk `encoded` (with the codecs of `source`) encoded again with those of `served` (the
/// same array: [`served`] made it), chunks of `chunk_shape`; nothing decoded larger than
/// `max_bytes`; gzip and zlib at `deflate_level`.
pub fn transcode(
    source: &Map<String, Value>,
    served: &Map<String, Value>,
    chunk_shape: &[u64],
    encoded: &[u8],
    max_bytes: u64,
    deflate_level: u32,
) -> Result<Transcoded, AssembleError> {
    let codec = |e: &dyn std::fmt::Display| AssembleError::Codec(e.to_string());
    let decoder = ChunkDecoder::new(source, chunk_shape, max_bytes).map_err(|e| codec(&e))?;
    let size = decoder.data_type().fixed_size().ok_or_else(|| codec(&"its values are of variable length"))? as u64;
    let decoded = chunk_shape.iter().try_fold(size, |n, d| n.checked_mul(*d)).filter(|n| *n <= max_bytes);
    if decoded.is_none() {
        return Err(codec(&format!("a chunk would take more than the {max_bytes} bytes allowed decoded")));
    }
    let started = Instant::now();
    // A plugin's decoder (gribberish's) may panic on a hostile chunk: that chunk fails, the
    // worker lives on.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoder.decode(encoded)))
        .unwrap_or_else(|_| Err(super::decode::DecodeError::Invalid("its decoder failed on it (a panic)".into())));
    let raw = decoded.map_err(|e| codec(&e))?.into_fixed().map_err(|e| codec(&e))?.into_owned();
    let decoding = started.elapsed();
    let bytes = assembled::encode(served, chunk_shape, raw, deflate_level)?;
    Ok(Transcoded { bytes, decoding })
}

#[cfg(test)]
mod tests;
