//! The chunk of an array made of nothing but its fill value, encoded with the array's own
//! codecs: served for missing chunks when a store asks for `missing_chunks = "fill"`.

use std::num::NonZeroU64;
use std::sync::Arc;

use serde_json::{Map, Value};
use zarrs::array::{Array, ArrayBytes, ArrayMetadata, ArrayMetadataV3, ArrayToBytesCodecTraits, CodecOptions};
use zarrs::storage::store::MemoryStore;

/// Encodes one full chunk of `fill_value`; an error names what zarrs could not encode.
pub fn fill_chunk(metadata: &Map<String, Value>) -> Result<Vec<u8>, String> {
    let seen = super::metadata::as_zarrs_sees_it(metadata)?;
    let v3: ArrayMetadataV3 = serde_json::from_value(Value::Object(seen)).map_err(|e| e.to_string())?;
    let array = Array::new_with_metadata(Arc::new(MemoryStore::new()), "/", ArrayMetadata::V3(v3))
        .map_err(|e| e.to_string())?;
    let zeros = vec![0u64; array.dimensionality()];
    let shape: Vec<NonZeroU64> = array.chunk_shape(&zeros).map_err(|e| e.to_string())?.to_vec();
    let elements: u64 = shape.iter().map(|n| n.get()).product();
    let bytes =
        ArrayBytes::new_fill_value(array.data_type(), elements, array.fill_value()).map_err(|e| e.to_string())?;
    let encoded = array
        .codecs()
        .encode(bytes, &shape, array.data_type(), array.fill_value(), &CodecOptions::default())
        .map_err(|e| e.to_string())?;
    Ok(encoded.to_vec())
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

    #[test]
    fn plain_and_compressed_fill_chunks() {
        let raw =
            fill_chunk(&array(json!([{"name": "bytes", "configuration": {"endian": "little"}}]), json!(-1.5))).unwrap();
        assert_eq!(raw, (0..6).flat_map(|_| (-1.5f32).to_le_bytes()).collect::<Vec<u8>>());
        let big =
            fill_chunk(&array(json!([{"name": "bytes", "configuration": {"endian": "big"}}]), json!("NaN"))).unwrap();
        assert_eq!(&big[..4], &f32::NAN.to_be_bytes());
        let gz = fill_chunk(&array(json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]), json!(0.0))).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    }

    #[test]
    fn fixed_width_bytes_fill_with_their_fill_value() {
        let mut m = array(json!([{"name": "bytes"}]), json!("YQ=="));
        m.insert("data_type".into(), json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}));
        assert_eq!(fill_chunk(&m).unwrap(), b"a\0\0".repeat(6));
    }

    #[test]
    fn unknown_codecs_are_named() {
        let err = fill_chunk(&array(json!([{"name": "bytes"}, {"name": "numcodecs.lz4"}]), json!(0.0))).unwrap_err();
        assert!(err.contains("lz4"), "{err}");
    }
}
