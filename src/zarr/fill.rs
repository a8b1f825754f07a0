//! The chunk of an array made of nothing but its fill value, encoded with the array's own
//! codecs: served for missing chunks when a store asks for `missing_chunks = "fill"`.

use std::num::NonZeroU64;

use serde::Deserialize;
use serde_json::{Map, Value};
use zarrs::array::{ArrayBytes, ArrayToBytesCodecTraits, CodecOptions, DataType, FillValue, FillValueMetadata};
use zarrs::metadata::v3::MetadataV3;

/// Why there is no fill-value chunk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    /// Decoded, the chunk would take more bytes than the caller allows (`None`: more than 2^64).
    #[error("a chunk of fill values would take {} bytes decoded, above the {max} allowed", bytes.map_or_else(|| "more than 2^64".to_owned(), |b| b.to_string()))]
    TooLarge {
        /// The decoded size, if it can be counted.
        bytes: Option<u64>,
        /// The bound.
        max: u64,
    },
    /// zarrs cannot read the metadata or encode the chunk.
    #[error("{0}")]
    Encode(String),
}

/// Encodes one full chunk of `fill_value`, provided it takes at most `max_bytes` decoded (the
/// chunk is built whole before it is encoded); nothing is allocated before that is checked.
pub fn fill_chunk(metadata: &Map<String, Value>, max_bytes: u64) -> Result<Vec<u8>, FillError> {
    let encode = |e: &dyn std::fmt::Display| FillError::Encode(e.to_string());
    let seen = super::metadata::as_zarrs_sees_it(metadata).map_err(|e| encode(&e))?;
    let array = super::metadata::zarrs_array(seen).map_err(|e| encode(&e))?;
    let zeros = vec![0u64; array.dimensionality()];
    let shape: Vec<NonZeroU64> = array.chunk_shape(&zeros).map_err(|e| encode(&e))?.to_vec();
    let bytes = decoded_bytes(array.data_type(), array.fill_value(), shape.iter().map(|n| n.get()));
    if bytes.is_none_or(|b| b > max_bytes) {
        return Err(FillError::TooLarge { bytes, max: max_bytes });
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(d.get()))
        .ok_or(FillError::TooLarge { bytes, max: max_bytes })?;
    let bytes = ArrayBytes::new_fill_value(array.data_type(), elements, array.fill_value()).map_err(|e| encode(&e))?;
    let encoded = array
        .codecs()
        .encode(bytes, &shape, array.data_type(), array.fill_value(), &CodecOptions::default())
        .map_err(|e| encode(&e))?;
    Ok(encoded.to_vec())
}

/// The bytes one decoded chunk of `chunk_shape` takes, for an array whose metadata was
/// validated (`None`: more than 2^64); an error names what zarrs could not read.
pub fn decoded_chunk_bytes(metadata: &Map<String, Value>, chunk_shape: &[u64]) -> Result<Option<u64>, String> {
    #[derive(Deserialize)]
    struct TypeAndFill {
        data_type: MetadataV3,
        fill_value: FillValueMetadata,
    }
    let seen = super::metadata::as_zarrs_sees_it(metadata)?;
    let TypeAndFill { data_type, fill_value } =
        serde_json::from_value(Value::Object(seen)).map_err(|e| format!("invalid array metadata: {e}"))?;
    let data_type = DataType::from_metadata(&data_type).map_err(|e| e.to_string())?;
    let fill_value = data_type.fill_value_v3(&fill_value).map_err(|e| e.to_string())?;
    Ok(decoded_bytes(&data_type, &fill_value, chunk_shape.iter().copied()))
}

/// What zarrs allocates for a chunk of fill values (`ArrayBytes::new_fill_value`): the fill value
/// repeated once per element, plus an offset per element for variable-sized types and a mask
/// byte per element for optional ones. `None` when that is more than 2^64.
fn decoded_bytes(data_type: &DataType, fill_value: &FillValue, shape: impl Iterator<Item = u64>) -> Option<u64> {
    let elements = shape.into_iter().try_fold(1u64, u64::checked_mul)?;
    let (per_element, extra) = match data_type.fixed_size() {
        Some(size) => (size as u64, 0),
        None => ((fill_value.size() + size_of::<usize>()) as u64, size_of::<usize>() as u64),
    };
    let per_element = per_element + u64::from(data_type.as_optional().is_some());
    elements.checked_mul(per_element)?.checked_add(extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn array(codecs: Value, fill: Value) -> Map<String, Value> {
        json!({"zarr_format": 3, "node_type": "array", "shape": [5, 3], "data_type": "float32",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": fill, "codecs": codecs})
        .as_object()
        .unwrap()
        .clone()
    }

    fn fill_chunk_of(metadata: &Map<String, Value>) -> Result<Vec<u8>, FillError> {
        fill_chunk(metadata, 1 << 20)
    }

    #[test]
    fn plain_and_compressed_fill_chunks() {
        let raw = fill_chunk_of(&array(json!([{"name": "bytes", "configuration": {"endian": "little"}}]), json!(-1.5)))
            .unwrap();
        assert_eq!(raw, (0..6).flat_map(|_| (-1.5f32).to_le_bytes()).collect::<Vec<u8>>());
        let big = fill_chunk_of(&array(json!([{"name": "bytes", "configuration": {"endian": "big"}}]), json!("NaN")))
            .unwrap();
        assert_eq!(&big[..4], &f32::NAN.to_be_bytes());
        let gz = fill_chunk_of(&array(json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]), json!(0.0))).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    }

    #[test]
    fn fixed_width_bytes_fill_with_their_fill_value() {
        let mut m = array(json!([{"name": "bytes"}]), json!("YQ=="));
        m.insert("data_type".into(), json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}));
        assert_eq!(fill_chunk_of(&m).unwrap(), b"a\0\0".repeat(6));
    }

    #[test]
    fn unknown_codecs_are_named() {
        let err = fill_chunk_of(&array(json!([{"name": "bytes"}, {"name": "numcodecs.lz4"}]), json!(0.0))).unwrap_err();
        assert!(err.to_string().contains("lz4"), "{err}");
    }

    fn with_chunk_shape(data_type: Value, fill: Value, chunk_shape: Value) -> Map<String, Value> {
        let mut m = array(json!([{"name": "bytes", "configuration": {"endian": "little"}}]), fill);
        m.insert("data_type".into(), data_type);
        m.insert("shape".into(), chunk_shape.clone());
        m.insert("chunk_grid".into(), json!({"name": "regular", "configuration": {"chunk_shape": chunk_shape}}));
        m
    }

    /// The array that aborted the server: one chunk of 2^40 float64 (8 TiB decoded). Refused
    /// before anything is allocated, so this test would abort the test process otherwise.
    #[test]
    fn a_chunk_above_the_bound_is_refused_before_it_is_built() {
        let huge = with_chunk_shape(json!("float64"), json!(0.0), json!([1u64 << 40]));
        assert_eq!(fill_chunk(&huge, 64 << 20), Err(FillError::TooLarge { bytes: Some(8 << 40), max: 64 << 20 }));
        assert_eq!(decoded_chunk_bytes(&huge, &[1 << 40]), Ok(Some(8 << 40)));
        // Elements beyond 2^64 overflow: refused too, never a panic.
        let overflow = with_chunk_shape(json!("float64"), json!(0.0), json!([1u64 << 32, 1u64 << 32]));
        assert_eq!(fill_chunk(&overflow, u64::MAX), Err(FillError::TooLarge { bytes: None, max: u64::MAX }));
        assert_eq!(decoded_chunk_bytes(&overflow, &[1 << 32, 1 << 32]), Ok(None));
        let times_size = with_chunk_shape(json!("float64"), json!(0.0), json!([1u64 << 62]));
        assert_eq!(decoded_chunk_bytes(&times_size, &[1 << 62]), Ok(None));
        let err = fill_chunk(&huge, 64 << 20).unwrap_err().to_string();
        assert_eq!(err, "a chunk of fill values would take 8796093022208 bytes decoded, above the 67108864 allowed");
    }

    #[test]
    fn the_bound_is_inclusive_and_counts_the_decoded_chunk() {
        let m = array(json!([{"name": "bytes", "configuration": {"endian": "little"}}]), json!(1.0));
        assert_eq!(decoded_chunk_bytes(&m, &[2, 3]), Ok(Some(24)));
        assert_eq!(fill_chunk(&m, 24).map(|b| b.len()), Ok(24));
        assert!(matches!(fill_chunk(&m, 23), Err(FillError::TooLarge { bytes: Some(24), max: 23 })));
        let mut bytes = with_chunk_shape(
            json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}),
            json!("YQ=="),
            json!([5]),
        );
        bytes.insert("fill_value".into(), json!("YQ=="));
        assert_eq!(decoded_chunk_bytes(&bytes, &[5]), Ok(Some(15)));
        let strings = with_chunk_shape(json!("string"), json!("abc"), json!([4]));
        assert_eq!(decoded_chunk_bytes(&strings, &[4]), Ok(Some(4 * (3 + 8) + 8)), "values and offsets");
    }
}
