//! What an array's encoded chunks must be, checked at registration so that a careless manifest
//! is refused instead of read as wrong numbers: inline chunks are decoded through the array's
//! own codecs and must give a whole chunk; virtual chunks of an array whose codecs fix
//! the encoded size (`bytes`, `transpose`, `crc32c` only) must have exactly that length. The
//! length check is arithmetic; only inline chunks are decoded, within [`DecodeBudget`], and
//! each through the bounded decoder (`decode.rs`): a chunk that would decode past its size is
//! refused, never inflated.

use std::cell::OnceCell;

use serde_json::{Map, Value};
use zarrs::array::DataType;
use zarrs::metadata::v3::MetadataV3;

use super::decode::{ChunkDecoder, DecodeError};

/// The largest decoded chunk an inline chunk is decoded to: past it, only its length is checked.
pub const MAX_DECODED_CHUNK_BYTES: u64 = 16 << 20;
/// Decoded bytes one registration may spend checking its inline chunks; past it, the rest are
/// only checked by length (a manifest of many tiny chunks that each inflate to megabytes must
/// not cost hours).
pub const DECODE_BUDGET_BYTES: u64 = 1 << 30;

/// Codecs that leave the encoded size a function of the chunk shape and data type, with the
/// bytes each adds.
const FIXED_SIZE_CODECS: &[(&str, u64)] = &[("bytes", 0), ("transpose", 0), ("crc32c", 4)];

/// Decoded bytes left to one registration's checks of inline chunks.
#[derive(Debug)]
pub struct DecodeBudget(u64);

impl Default for DecodeBudget {
    fn default() -> Self {
        Self(DECODE_BUDGET_BYTES)
    }
}

/// The checks of one array's chunks.
pub struct ChunkCheck {
    metadata: Map<String, Value>,
    /// Elements in a chunk (`None`: more than 2^64), and the chunk shape.
    elements: Option<u64>,
    chunk_shape: Vec<u64>,
    /// The length every encoded chunk has, when the codecs fix it, and how it is made.
    fixed: Option<(u64, String)>,
    /// The bounded decoder, built at the first inline chunk (`Err`: zarrs cannot read the
    /// codecs, or one cannot be bounded, so inline chunks are not decoded).
    decoder: OnceCell<Result<ChunkDecoder, DecodeError>>,
}

impl std::fmt::Debug for ChunkCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCheck").field("chunk_shape", &self.chunk_shape).field("fixed", &self.fixed).finish()
    }
}

fn codec_names(metadata: &Map<String, Value>) -> Vec<&str> {
    let codecs = metadata.get("codecs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    codecs.iter().map(|c| c.get("name").and_then(Value::as_str).unwrap_or_default()).collect()
}

/// The size of one element of `metadata`'s data type, when it is fixed.
fn element_size(metadata: &Map<String, Value>) -> Option<u64> {
    let data_type: MetadataV3 = serde_json::from_value(super::metadata::zarrs_data_type(metadata)?).ok()?;
    let data_type = DataType::from_metadata(&data_type).ok()?;
    if data_type.is_optional() {
        return None;
    }
    data_type.fixed_size().map(|n| n as u64)
}

impl ChunkCheck {
    /// The checks of the chunks of an array with this (validated) metadata and chunk shape.
    pub fn new(metadata: Map<String, Value>, chunk_shape: &[u64]) -> Self {
        let elements = chunk_shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
        let names = codec_names(&metadata);
        let added: Option<u64> =
            names.iter().map(|name| FIXED_SIZE_CODECS.iter().find(|(n, _)| n == name).map(|(_, added)| *added)).sum();
        let fixed = match (added, names.contains(&"bytes")) {
            (Some(added), true) => element_size(&metadata).and_then(|size| {
                let len = elements?.checked_mul(size)?.checked_add(added)?;
                Some((len, format!("{} element(s) of {size} byte(s)", elements?)))
            }),
            _ => None,
        }
        .map(|(len, how)| {
            let how = if names.contains(&"crc32c") { format!("{how} and a 4-byte crc32c checksum") } else { how };
            (len, format!("{how} with codecs [{}]", names.join(", ")))
        });
        Self { metadata, elements, chunk_shape: chunk_shape.to_vec(), fixed, decoder: OnceCell::new() }
    }

    /// The chunk shape.
    pub fn chunk_shape(&self) -> &[u64] {
        &self.chunk_shape
    }

    /// Checks the length of a chunk (virtual or inline) when the codecs fix it.
    pub fn length(&self, length: u64) -> Result<(), String> {
        match &self.fixed {
            Some((expected, how)) if *expected != length => Err(format!(
                "its length is {length} bytes, but every chunk of this array takes exactly {expected} bytes \
                 ({how}, chunk shape {:?})",
                self.chunk_shape
            )),
            _ => Ok(()),
        }
    }

    /// True when inline chunks are checked by decoding them (the codecs do not fix their length).
    pub fn decodes(&self) -> bool {
        self.fixed.is_none()
    }

    /// Checks that an inline chunk decodes through the array's codecs to a whole chunk, while
    /// the budget lasts and when every codec can be decoded within a bound.
    pub fn decode(&self, bytes: &[u8], budget: &mut DecodeBudget) -> Result<(), String> {
        let Some(elements) = self.elements else { return Ok(()) };
        let decoder =
            self.decoder.get_or_init(|| ChunkDecoder::new(&self.metadata, &self.chunk_shape, MAX_DECODED_CHUNK_BYTES));
        let Ok(decoder) = decoder else { return Ok(()) };
        // An estimate of the decoded size: a byte an element for variable-sized types.
        let decoded = elements.saturating_mul(decoder.data_type().fixed_size().unwrap_or(1) as u64);
        if decoded > MAX_DECODED_CHUNK_BYTES || decoded > budget.0 {
            return Ok(());
        }
        budget.0 -= decoded;
        let fail = |e: &dyn std::fmt::Display| {
            format!(
                "its {} inline bytes do not decode through the array's codecs [{}] to a chunk of shape {:?}: {e}",
                bytes.len(),
                codec_names(&self.metadata).join(", "),
                self.chunk_shape
            )
        };
        let chunk = decoder.decode(bytes).map_err(|e| fail(&e))?;
        chunk.validate(elements, decoder.data_type()).map_err(|e| fail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn array(data_type: &str, chunk: u64, codecs: Value) -> ChunkCheck {
        let m = json!({"zarr_format": 3, "node_type": "array", "shape": [chunk * 2], "data_type": data_type,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs});
        ChunkCheck::new(m.as_object().unwrap().clone(), &[chunk])
    }

    #[test]
    fn fixed_size_codecs_fix_the_length() {
        let plain = array("float32", 2, json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        assert_eq!(plain.length(8), Ok(()));
        assert!(!plain.decodes(), "the length says it all");
        let err = plain.length(3).unwrap_err();
        assert!(err.contains("its length is 3 bytes") && err.contains("exactly 8 bytes"), "{err}");
        assert!(err.contains("2 element(s) of 4 byte(s)") && err.contains("[bytes]"), "{err}");
        // Decoded, those 3 bytes are refused too (zarrs agrees with the arithmetic).
        assert!(plain.decode(&[1, 2, 3], &mut DecodeBudget::default()).is_err());
        assert_eq!(plain.decode(&[0; 8], &mut DecodeBudget::default()), Ok(()));
        let crc = array(
            "int16",
            3,
            json!([{"name": "transpose", "configuration": {"order": [0]}}, {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]),
        );
        assert_eq!(crc.length(10), Ok(()), "3 x 2 bytes + 4");
        assert!(crc.length(6).unwrap_err().contains("crc32c checksum"));
        let zlib = array("float32", 2, json!([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]));
        assert_eq!(zlib.length(3), Ok(()), "a compressed chunk has any length");
    }

    #[test]
    fn inline_chunks_are_decoded_through_the_codecs() {
        let gzip = array(
            "float32",
            2,
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 1}}]),
        );
        let mut budget = DecodeBudget::default();
        let mut good = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut good, &[0u8; 8]).unwrap();
        let good = good.finish().unwrap();
        assert_eq!(gzip.decode(&good, &mut budget), Ok(()));
        let err = gzip.decode(b"not gzip", &mut budget).unwrap_err();
        assert!(err.contains("its 8 inline bytes do not decode") && err.contains("[bytes, gzip]"), "{err}");
        let mut short = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut short, &[0u8; 3]).unwrap();
        let err = gzip.decode(&short.finish().unwrap(), &mut budget).unwrap_err();
        assert!(err.contains("chunk of shape [2]"), "{err}");
    }

    #[test]
    fn a_chunk_that_would_decode_past_its_size_is_refused_not_inflated() {
        // A zstd frame declaring 2^44 bytes, holding one raw byte (zarrs would reserve 16 TiB).
        let mut bomb = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
        bomb.extend_from_slice(&(1u64 << 44).to_le_bytes());
        bomb.extend_from_slice(&[0x09, 0, 0, 7]);
        let zstd = array(
            "float32",
            4,
            json!([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]),
        );
        let err = zstd.decode(&bomb, &mut DecodeBudget::default()).unwrap_err();
        assert!(err.contains("its 17 inline bytes do not decode") && err.contains("more than the 16 bytes"), "{err}");
        // A codec that cannot be bounded is not decoded (left to readers), never decoded unbounded.
        let pcodec = array("float32", 4, json!([{"name": "numcodecs.pcodec"}]));
        assert_eq!(pcodec.decode(&bomb, &mut DecodeBudget::default()), Ok(()));
    }

    #[test]
    fn what_cannot_be_decoded_here_is_left_to_readers() {
        // A codec zarrs lacks (a reader's plugin): not decoded, not refused.
        let plugin = array("float32", 2, json!([{"name": "bytes"}, {"name": "numcodecs.imagecodecs_jpeg2k"}]));
        assert_eq!(plugin.decode(b"xyz", &mut DecodeBudget::default()), Ok(()));
        // Past the budget, chunks are no longer decoded.
        let gzip = array("uint8", 4, json!([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]));
        assert!(gzip.decode(b"bad", &mut DecodeBudget(4)).is_err());
        assert_eq!(gzip.decode(b"bad", &mut DecodeBudget(3)), Ok(()));
    }
}
