//! A Zarr v2 array's `filters` and `compressor` to a v3 codec chain, as zarr-python (`zarr
//! migrate`) and VirtualiZarr convert them: each numcodecs codec becomes `numcodecs.<id>` with
//! its configuration, numcodecs' defaults filling what the v2 metadata leaves out, placed by
//! its kind (src/zarr/codecs.rs). A codec zarrgate does not know is converted all the same, as
//! a bytes-to-bytes codec like any v2 compressor: zarrgate only serves bytes, and the
//! registration summary tells readers which plugin they need.

use serde_json::{Map, Value, json};

use crate::zarr::codecs::{CodecKind, kind};

/// The v3 codecs of a v2 array: `transpose` (for `order: "F"`) first if given, then the
/// filters and the compressor in their places around `bytes` (with `endian`), or around the
/// array-to-bytes codec that replaces it (`vlen-utf8`, kerchunk's `grib`...).
pub(super) fn v3_codecs(
    transpose: Option<Value>,
    filters: &[&Value],
    compressor: Option<&Value>,
    endian: Option<&str>,
    typesize: u64,
) -> Result<Vec<Value>, String> {
    let mut before: Vec<Value> = transpose.into_iter().collect();
    let mut serializer: Option<Value> = None;
    let mut after = Vec::new();
    for codec in filters.iter().copied().chain(compressor) {
        let id = codec.get("id").and_then(Value::as_str).ok_or_else(|| format!("codec {codec} has no id"))?;
        let mut configuration: Map<String, Value> = codec
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| *k != "id").map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        fill_numcodecs_defaults(id, &mut configuration);
        let name = format!("numcodecs.{id}");
        if matches!(id, "vlen-utf8" | "vlen-bytes") {
            serializer = Some(json!({"name": id}));
            continue;
        }
        match kind(&name).unwrap_or(CodecKind::BytesToBytes) {
            CodecKind::ArrayToArray => {
                if serializer.is_some() || !after.is_empty() {
                    return Err(format!("codec {id} runs on arrays but comes after a bytes codec"));
                }
                before.push(json!({"name": name, "configuration": configuration}));
            }
            CodecKind::ArrayToBytes => {
                if serializer.is_some() || !after.is_empty() {
                    return Err(format!("codec {id} turns arrays into bytes but comes after a bytes codec"));
                }
                serializer = Some(json!({"name": name, "configuration": configuration}));
            }
            CodecKind::BytesToBytes => after.push(bytes_codec(id, configuration, typesize)),
        }
    }
    before.push(serializer.unwrap_or_else(|| match endian {
        Some(e) => json!({"name": "bytes", "configuration": {"endian": e}}),
        None => json!({"name": "bytes"}),
    }));
    before.extend(after);
    Ok(before)
}

/// What numcodecs' own codecs take when a parameter is left out (their `get_config()`, which
/// `zarr migrate` writes): `{"id": "zlib"}`, as tifffile writes it, is zlib at level 1.
/// Codecs of other packages (imagecodecs...) are left as they are: their readers fill them.
fn fill_numcodecs_defaults(id: &str, configuration: &mut Map<String, Value>) {
    let defaults: Vec<(&str, Value)> = match id {
        "zlib" | "gzip" | "bz2" => vec![("level", json!(1))],
        "lzma" => vec![("format", json!(1)), ("check", json!(-1)), ("preset", Value::Null), ("filters", Value::Null)],
        "lz4" => vec![("acceleration", json!(1))],
        "zstd" => vec![("level", json!(0)), ("checksum", json!(false))],
        "blosc" => vec![("cname", json!("lz4")), ("clevel", json!(5)), ("shuffle", json!(1)), ("blocksize", json!(0))],
        "shuffle" => vec![("elementsize", json!(4))],
        "jenkins_lookup3" => vec![("initval", json!(0)), ("prefix", Value::Null)],
        // `astype` of delta, fixedscaleoffset and quantize defaults to their `dtype`: left out,
        // as every reader fills it, so that the v2 export gives back the references' metadata.
        _ => Vec::new(),
    };
    for (key, value) in defaults {
        configuration.entry(key).or_insert(value);
    }
}

/// blosc, zstd and gzip become the core v3 codecs (as zarr-python converts them); the others
/// `numcodecs.<id>`.
fn bytes_codec(id: &str, mut configuration: Map<String, Value>, typesize: u64) -> Value {
    match id {
        "blosc" => {
            let shuffle = match configuration.get("shuffle").and_then(Value::as_i64) {
                Some(0) => "noshuffle",
                Some(2) => "bitshuffle",
                _ => "shuffle",
            };
            configuration.insert("shuffle".into(), json!(shuffle));
            configuration.insert("typesize".into(), json!(typesize));
            json!({"name": "blosc", "configuration": configuration})
        }
        "zstd" => {
            let level = configuration.get("level").cloned().unwrap_or(json!(0));
            let checksum = configuration.get("checksum").cloned().unwrap_or(json!(false));
            json!({"name": "zstd", "configuration": {"level": level, "checksum": checksum}})
        }
        "gzip" => {
            json!({"name": "gzip", "configuration": {"level": configuration.get("level").cloned().unwrap_or(json!(1))}})
        }
        _ => json!({"name": format!("numcodecs.{id}"), "configuration": configuration}),
    }
}
