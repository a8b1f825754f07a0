//! Bounded decoding of one chunk: the one way zarrgate decodes a chunk (quick looks, the check of
//! inline chunks, and any later decode). zarrs decodes a bytes-to-bytes codec by reserving what
//! the encoded bytes declare (zstd's frame content size, blosc's header) or by inflating all of
//! it (gzip, zlib, bz2), so a 17-byte zstd frame asks for 16 TiB and a 1 MiB gzip member
//! inflates to 1 GiB. Here the bytes-to-bytes codecs are decoded by streaming decoders that
//! stop at the size the chunk can take ([`Step`]), shards are rebuilt with their inner chunks
//! decoded the same way ([`Shard`]), and only what is left, whose size the chunk shape fixes
//! (`bytes`, `transpose`, ...), is handed to zarrs. A codec that cannot be bounded is refused,
//! never decoded unbounded. Pure: the caller brings the bytes.

use std::borrow::Cow;
use std::io::Read;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use zarrs::array::{
    ArrayBytes, ArrayToBytesCodecTraits, BytesRepresentation, BytesToBytesCodecTraits, Codec, CodecChain, CodecOptions,
    DataType, FillValue,
};
use zarrs::metadata::v3::MetadataV3;

use super::imagecodecs::Predictor;

/// Array-to-bytes codecs whose decoding allocates no more than the chunk shape or the encoded
/// bytes say (the variable-length ones copy what they are given). `gribberish` decodes a GRIB2
/// message to its grid's points, which the `grib` parser checked are the chunk's, and refuses
/// a message that decodes to another count.
const BOUNDED_SERIALIZERS: &[&str] =
    &["bytes", "sharding_indexed", "packbits", "vlen-utf8", "vlen-bytes", "vlen_v2", "gribberish"];
/// Bytes-to-bytes codecs whose output is never longer than their input (checksums, shuffles).
const SHRINKING: &[&str] = &["crc32c", "adler32", "fletcher32", "shuffle"];
/// The smallest zstd window accepted whatever the bound (a streaming compressor may declare an
/// 8 MiB window for a small chunk; an 8 MiB buffer is no threat).
const MIN_ZSTD_WINDOW_LOG: u32 = 23;

/// Why a chunk was not decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A codec's output would pass the size its part of the chunk can take.
    #[error("codec {codec} decodes to more than the {bound} bytes this array's chunk can take: refused, not decoded")]
    TooLarge {
        /// The codec.
        codec: String,
        /// The bound its output passed.
        bound: u64,
    },
    /// A codec whose output size cannot be bounded before it is decoded.
    #[error("codec {codec} cannot be decoded within a bound, so zarrgate does not decode it")]
    Unbounded {
        /// The codec.
        codec: String,
    },
    /// zarrs does not know a codec or cannot read the metadata.
    #[error("the array's codecs cannot be read: {0}")]
    Unsupported(String),
    /// The bytes are not what the codecs make.
    #[error("{0}")]
    Invalid(String),
}

/// The decoder of one array's chunks, built once per array.
pub struct ChunkDecoder {
    level: Level,
    /// imagecodecs' array-to-array codecs zarrs does not have, undone after it decoded the rest.
    filters: Vec<Predictor>,
    /// The chain left once every bytes-to-bytes codec is taken out (at every shard level).
    rest: CodecChain,
    shape: Vec<NonZeroU64>,
    data_type: DataType,
    fill: FillValue,
}

impl std::fmt::Debug for ChunkDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkDecoder").field("shape", &self.shape).finish_non_exhaustive()
    }
}

impl ChunkDecoder {
    /// The decoder of chunks of shape `chunk_shape` of the array `metadata` describes. Every
    /// intermediate byte string is bounded by the size its representation takes (for fixed-size
    /// data types), or by `max_bytes` (variable-length data types).
    pub fn new(metadata: &Map<String, Value>, chunk_shape: &[u64], max_bytes: u64) -> Result<Self, DecodeError> {
        let unsupported = |e: &dyn std::fmt::Display| DecodeError::Unsupported(e.to_string());
        let seen = super::metadata::as_zarrs_sees_it(metadata).map_err(|e| unsupported(&e))?;
        // The data type and fill value as zarrs reads them, without the codecs decoded here.
        let mut plain = seen.clone();
        if let Some(Value::Array(codecs)) = plain.get_mut("codecs") {
            codecs.retain(|c| !decoded_here(c.get("name").and_then(Value::as_str).unwrap_or_default()));
        }
        let array = super::metadata::zarrs_array(plain).map_err(|e| unsupported(&e))?;
        let shape: Vec<NonZeroU64> = chunk_shape.iter().filter_map(|d| NonZeroU64::new(*d)).collect();
        if shape.len() != chunk_shape.len() {
            return Err(DecodeError::Unsupported(format!("chunk shape {chunk_shape:?} has an empty dimension")));
        }
        let codecs = seen.get("codecs").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let (data_type, fill) = (array.data_type().clone(), array.fill_value().clone());
        let (level, stripped, _) = Level::plan(codecs, &shape, &data_type, &fill, max_bytes)?;
        let filters = filters(codecs, chunk_shape, data_type.fixed_size())?;
        let rest = chain(&stripped)?;
        Ok(Self { level, filters, rest, shape, data_type, fill })
    }

    /// Decodes one encoded chunk, never holding more than its bounds.
    pub fn decode(&self, encoded: &[u8]) -> Result<ArrayBytes<'static>, DecodeError> {
        let raw = self.level.peel(encoded)?;
        let options = CodecOptions::default();
        let decoded = self
            .rest
            .decode(Cow::Owned(raw), &self.shape, &self.data_type, &self.fill, &options)
            .map_err(|e| DecodeError::Invalid(e.to_string()))?;
        if self.filters.is_empty() {
            return Ok(decoded);
        }
        let mut raw = decoded.into_fixed().map_err(|e| DecodeError::Invalid(e.to_string()))?.into_owned();
        let shape: Vec<u64> = self.shape.iter().map(|d| d.get()).collect();
        for filter in self.filters.iter().rev() {
            filter.undo(&mut raw, &shape);
        }
        Ok(ArrayBytes::new_flen(raw))
    }

    /// The data type zarrs decodes to.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The fill value.
    pub fn fill_value(&self) -> &FillValue {
        &self.fill
    }
}

/// Whether codec `name` is decoded by zarrgate itself (`imagecodecs.rs`), not by zarrs.
fn decoded_here(name: &str) -> bool {
    super::imagecodecs::BYTES_TO_BYTES.contains(&name) || super::imagecodecs::ARRAY_TO_ARRAY.contains(&name)
}

/// The array-to-array codecs of `codecs` undone here (imagecodecs' predictors), in chain order;
/// with other array-to-array codecs beside them the chain is refused (their order would matter).
fn filters(codecs: &[Value], shape: &[u64], element_size: Option<usize>) -> Result<Vec<Predictor>, DecodeError> {
    let name = |c: &Value| c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let ours: Vec<&Value> =
        codecs.iter().filter(|c| super::imagecodecs::ARRAY_TO_ARRAY.contains(&name(c).as_str())).collect();
    let Some(first) = ours.first().map(|c| name(c)) else {
        return Ok(Vec::new());
    };
    let unsupported = |why: &str| DecodeError::Unsupported(format!("{}: {why}", base(&first)));
    let array_to_array = codecs
        .iter()
        .take_while(|c| super::codecs::kind(&name(c)) == Some(super::codecs::CodecKind::ArrayToArray))
        .count();
    if array_to_array > ours.len() {
        return Err(unsupported("beside other array-to-array codecs"));
    }
    let size = element_size.ok_or_else(|| unsupported("of variable-length values"))?;
    // The order zarrs read the stored bytes in, if a `bytes` codec reads them.
    let stored_big_endian = codecs
        .get(array_to_array)
        .filter(|c| name(c) == "bytes")
        .map(|c| c.pointer("/configuration/endian").and_then(Value::as_str) == Some("big"));
    ours.into_iter()
        .map(|c| {
            Predictor::new(&name(c), c.get("configuration"), shape, size, stored_big_endian)
                .map_err(DecodeError::Unsupported)
        })
        .collect()
}

fn chain(codecs: &[Value]) -> Result<CodecChain, DecodeError> {
    let metadata: Vec<MetadataV3> = codecs
        .iter()
        .map(|c| serde_json::from_value(c.clone()))
        .collect::<Result<_, _>>()
        .map_err(|e| DecodeError::Unsupported(e.to_string()))?;
    CodecChain::from_metadata(&metadata).map_err(|e| DecodeError::Unsupported(e.to_string()))
}

/// One codec chain's bytes-to-bytes codecs, and the shard under them if it is one.
struct Level {
    steps: Vec<Step>,
    shard: Option<Box<Shard>>,
}

/// One bytes-to-bytes codec and the most bytes its output may take.
struct Step {
    name: String,
    /// zarrs' codec; `None` for one decoded here (`imagecodecs.rs`).
    codec: Option<Arc<dyn BytesToBytesCodecTraits>>,
    bound: u64,
}

/// A `sharding_indexed` serializer: its index, where it is, and its inner chunks' level.
struct Shard {
    index: Level,
    index_len: u64,
    index_at_start: bool,
    little_endian: bool,
    count: usize,
    inner: Level,
}

fn size(r: &BytesRepresentation, otherwise: u64) -> u64 {
    match r {
        BytesRepresentation::FixedSize(n) | BytesRepresentation::BoundedSize(n) => *n,
        BytesRepresentation::UnboundedSize => otherwise,
    }
}

fn base(name: &str) -> &str {
    name.strip_prefix("numcodecs.").unwrap_or(name)
}

impl Level {
    /// Plans the decoding of chain `codecs` for chunks of `shape`: the level, the chain left
    /// for zarrs, and the size of the encoded chunk.
    fn plan(
        codecs: &[Value],
        shape: &[NonZeroU64],
        data_type: &DataType,
        fill: &FillValue,
        max_bytes: u64,
    ) -> Result<(Self, Vec<Value>, BytesRepresentation), DecodeError> {
        let failed = |e: &dyn std::fmt::Display| DecodeError::Unsupported(e.to_string());
        let (mut shape, mut data_type, mut fill) = (shape.to_vec(), data_type.clone(), fill.clone());
        let mut stripped = Vec::new();
        let mut steps = Vec::new();
        let mut shard = None;
        let mut represented: Option<BytesRepresentation> = None;
        for json in codecs {
            let metadata: MetadataV3 = serde_json::from_value(json.clone()).map_err(|e| failed(&e))?;
            let name = metadata.name().to_owned();
            if super::imagecodecs::ARRAY_TO_ARRAY.contains(&name.as_str()) && represented.is_none() {
                continue; // undone after zarrs decoded the rest (`filters`): shape and type stay
            }
            if super::imagecodecs::BYTES_TO_BYTES.contains(&name.as_str())
                && let Some(r) = represented.as_ref()
            {
                if base(&name) == "imagecodecs_jpeg" && data_type.fixed_size() != Some(1) {
                    return Err(failed(&format!("codec {name} of samples wider than 8 bits is not decoded")));
                }
                steps.push(Step { bound: size(r, max_bytes), name, codec: None });
                represented = Some(BytesRepresentation::UnboundedSize);
                continue;
            }
            let codec = match Codec::from_metadata(&metadata) {
                Ok(codec) => codec,
                Err(_) if !metadata.must_understand() => continue,
                Err(e) => return Err(failed(&format!("codec {name}: {e}"))),
            };
            match (codec, represented.as_ref()) {
                (Codec::ArrayToArray(codec), None) => {
                    let (s, d, f) = codec.encoded_representation(&shape, &data_type, &fill).map_err(|e| failed(&e))?;
                    (shape, data_type, fill) = (s.to_vec(), d, f);
                    stripped.push(json.clone());
                }
                (Codec::ArrayToBytes(codec), None) => {
                    if !BOUNDED_SERIALIZERS.contains(&base(&name)) {
                        return Err(DecodeError::Unbounded { codec: name });
                    }
                    let r = codec.encoded_representation(&shape, &data_type, &fill).map_err(|e| failed(&e))?;
                    represented = Some(r);
                    if name == "sharding_indexed" {
                        let (planned, json) = Shard::plan(json, &shape, &data_type, &fill, max_bytes)?;
                        shard = Some(Box::new(planned));
                        stripped.push(json);
                    } else {
                        stripped.push(json.clone());
                    }
                }
                (Codec::BytesToBytes(codec), Some(r)) => {
                    let bound = size(r, max_bytes);
                    represented = Some(codec.encoded_representation(r));
                    steps.push(Step { name, codec: Some(codec), bound });
                }
                _ => return Err(failed(&format!("codec {name} is out of place in the chain"))),
            }
        }
        let encoded = represented.ok_or_else(|| failed(&"the chain has no array-to-bytes codec"))?;
        Ok((Self { steps, shard }, stripped, encoded))
    }

    /// The bytes the chain left for zarrs takes, from `encoded`.
    fn peel(&self, encoded: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut data = Cow::Borrowed(encoded);
        for step in self.steps.iter().rev() {
            data = Cow::Owned(step.decode(&data)?);
        }
        match &self.shard {
            None => Ok(data.into_owned()),
            Some(shard) => shard.rebuild(&data),
        }
    }
}

impl Step {
    /// Decodes `input`, stopping past [`Step::bound`] bytes.
    fn decode(&self, input: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let (name, bound) = (self.name.as_str(), self.bound);
        let invalid = |e: &dyn std::fmt::Display| DecodeError::Invalid(format!("codec {name}: {e}"));
        let out = match base(name) {
            "gzip" => capped(flate2::read::GzDecoder::new(input), bound),
            "zlib" => capped(flate2::read::ZlibDecoder::new(input), bound),
            "bz2" => capped(bzip2::read::BzDecoder::new(input), bound),
            "zstd" => {
                return inflate_zstd(input, bound).map_err(|e| match e {
                    DecodeError::TooLarge { bound, .. } => DecodeError::TooLarge { codec: name.to_owned(), bound },
                    DecodeError::Invalid(e) => DecodeError::Invalid(format!("codec {name}: {e}")),
                    e => e,
                });
            }
            "blosc" => {
                let declared = blosc_sizes(input).map_err(|e| invalid(&e))?;
                if declared > bound {
                    return Err(DecodeError::TooLarge { codec: name.to_owned(), bound });
                }
                self.by_zarrs(input)
            }
            "imagecodecs_jpeg" => {
                let declared = super::imagecodecs::jpeg::declared_size(input).map_err(|e| invalid(&e))?;
                if declared > bound {
                    return Err(DecodeError::TooLarge { codec: name.to_owned(), bound });
                }
                super::imagecodecs::decode_bytes(name, input, bound).map_err(std::io::Error::other)
            }
            b if SHRINKING.contains(&b) => self.by_zarrs(input),
            _ if decoded_here(name) => {
                super::imagecodecs::decode_bytes(name, input, bound).map_err(std::io::Error::other)
            }
            _ => return Err(DecodeError::Unbounded { codec: name.to_owned() }),
        };
        match out {
            Ok(out) if out.len() as u64 > bound => Err(DecodeError::TooLarge { codec: name.to_owned(), bound }),
            Ok(out) => Ok(out),
            Err(e) => Err(invalid(&e)),
        }
    }

    fn by_zarrs(&self, input: &[u8]) -> std::io::Result<Vec<u8>> {
        let r = BytesRepresentation::BoundedSize(self.bound);
        let Some(codec) = &self.codec else {
            return Err(std::io::Error::other(format!("codec {} has no zarrs decoder", self.name)));
        };
        match codec.decode(Cow::Borrowed(input), &r, &CodecOptions::default()) {
            Ok(out) => Ok(out.into_owned()),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }
}

/// zstd frames inflated as a stream that stops past `bound` bytes: a frame that declares more
/// is refused before anything is decoded, and the decoder's window is bounded by `bound` (at
/// least 8 MiB), so that no buffer larger than the bound is reserved. Icechunk files use it too.
pub fn inflate_zstd(input: &[u8], bound: u64) -> Result<Vec<u8>, DecodeError> {
    let too_large = || DecodeError::TooLarge { codec: "zstd".into(), bound };
    if let Ok(Some(declared)) = zstd::zstd_safe::get_frame_content_size(input)
        && declared > bound
    {
        return Err(too_large());
    }
    let invalid = |e: std::io::Error| DecodeError::Invalid(e.to_string());
    let mut decoder = zstd::stream::read::Decoder::with_buffer(input).map_err(invalid)?;
    let window = (u64::BITS - bound.saturating_sub(1).leading_zeros()).clamp(MIN_ZSTD_WINDOW_LOG, 31);
    decoder.window_log_max(window).map_err(invalid)?;
    let out = capped(decoder, bound).map_err(invalid)?;
    if out.len() as u64 > bound {
        return Err(too_large());
    }
    Ok(out)
}

/// Reads at most `bound + 1` bytes from `reader` (one more tells that it goes past the bound).
fn capped(reader: impl Read, bound: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    reader.take(bound.saturating_add(1)).read_to_end(&mut out)?;
    Ok(out)
}

/// The decoded size a blosc header declares, once its compressed size is checked against the
/// bytes there are.
fn blosc_sizes(input: &[u8]) -> Result<u64, String> {
    let word = |at: usize| input.get(at..at + 4).map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    let (Some(nbytes), Some(cbytes)) = (word(4), word(12)) else {
        return Err(format!("{} bytes are shorter than a blosc header (16 bytes)", input.len()));
    };
    if cbytes > input.len() as u64 {
        return Err(format!("the blosc header declares {cbytes} compressed bytes, but there are {}", input.len()));
    }
    Ok(nbytes)
}

impl Shard {
    /// Plans a `sharding_indexed` serializer (`json`) for shards of `shape`; the plan and the
    /// serializer with inner bytes-to-bytes codecs taken out and a plain index at the end.
    fn plan(
        json: &Value,
        shape: &[NonZeroU64],
        data_type: &DataType,
        fill: &FillValue,
        max_bytes: u64,
    ) -> Result<(Self, Value), DecodeError> {
        let failed = |e: &str| DecodeError::Unsupported(format!("codec sharding_indexed: {e}"));
        let config = json.get("configuration").cloned().unwrap_or(Value::Null);
        let inner_shape: Vec<NonZeroU64> = config
            .get("chunk_shape")
            .and_then(Value::as_array)
            .map(|d| d.iter().filter_map(Value::as_u64).filter_map(NonZeroU64::new).collect())
            .unwrap_or_default();
        if inner_shape.len() != shape.len() || shape.iter().zip(&inner_shape).any(|(s, i)| s.get() % i.get() != 0) {
            return Err(failed("the inner chunk shape does not divide the shard"));
        }
        let grid: Vec<u64> = shape.iter().zip(&inner_shape).map(|(s, i)| s.get() / i.get()).collect();
        let count = grid.iter().try_fold(1usize, |n, g| n.checked_mul(usize::try_from(*g).ok()?));
        let count = count.ok_or_else(|| failed("too many inner chunks"))?;
        let empty = Vec::new();
        let codecs = config.get("codecs").and_then(Value::as_array).unwrap_or(&empty);
        let (inner, inner_codecs, _) = Level::plan(codecs, &inner_shape, data_type, fill, max_bytes)?;
        let default_index =
            vec![json!({"name": "bytes", "configuration": {"endian": "little"}}), json!({"name": "crc32c"})];
        let index_codecs = config.get("index_codecs").and_then(Value::as_array).unwrap_or(&default_index);
        let serializer = index_codecs.first().filter(|c| c.get("name").and_then(Value::as_str) == Some("bytes"));
        let serializer = serializer.ok_or_else(|| failed("only index codecs that start with bytes are decoded"))?;
        let little_endian = serializer.pointer("/configuration/endian").and_then(Value::as_str) != Some("big");
        let u64_type = DataType::from_metadata(&MetadataV3::new("uint64")).map_err(|e| failed(&e.to_string()))?;
        let index_shape: Vec<NonZeroU64> =
            grid.iter().chain(&[2]).filter_map(|g| NonZeroU64::new(*g)).collect::<Vec<_>>();
        let plain = count.checked_mul(16).ok_or_else(|| failed("too many inner chunks"))? as u64;
        let (index, _, index_len) =
            Level::plan(index_codecs, &index_shape, &u64_type, &FillValue::from(u64::MAX), plain)?;
        let BytesRepresentation::FixedSize(index_len) = index_len else {
            return Err(DecodeError::Unbounded { codec: "sharding_indexed (an index of no fixed size)".into() });
        };
        let index_at_start = config.get("index_location").and_then(Value::as_str) == Some("start");
        let stripped = json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner_shape.iter().map(|d| d.get()).collect::<Vec<_>>(),
            "codecs": inner_codecs,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_location": "end"}});
        let plan = Self { index, index_len, index_at_start, little_endian, count, inner };
        Ok((plan, stripped))
    }

    /// The shard with its index checked and its inner chunks' bytes-to-bytes codecs decoded
    /// (each within its bound), laid out as the stripped serializer reads it.
    fn rebuild(&self, shard: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let invalid = |e: String| DecodeError::Invalid(format!("codec sharding_indexed: {e}"));
        let len = shard.len() as u64;
        if len < self.index_len {
            return Err(invalid(format!("a shard of {len} bytes is shorter than its {}-byte index", self.index_len)));
        }
        let index_len = self.index_len as usize;
        let index = if self.index_at_start { &shard[..index_len] } else { &shard[shard.len() - index_len..] };
        let index = self.index.peel(index)?;
        if index.len() != self.count * 16 {
            return Err(invalid(format!("the index takes {} bytes, not {}", index.len(), self.count * 16)));
        }
        let word = |b: &[u8]| {
            let b: [u8; 8] = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
            if self.little_endian { u64::from_le_bytes(b) } else { u64::from_be_bytes(b) }
        };
        let mut body = Vec::new();
        let mut out_index = Vec::with_capacity(index.len());
        for entry in index.chunks_exact(16) {
            let (offset, n) = (word(&entry[..8]), word(&entry[8..]));
            if offset == u64::MAX && n == u64::MAX {
                out_index.extend_from_slice(&[0xFF; 16]);
                continue;
            }
            let end = offset.checked_add(n).filter(|end| *end <= len);
            let end = end.ok_or_else(|| {
                invalid(format!("an inner chunk at {offset} of {n} bytes passes the shard's end ({len})"))
            })?;
            let decoded = self.inner.peel(&shard[offset as usize..end as usize])?;
            out_index.extend_from_slice(&(body.len() as u64).to_le_bytes());
            out_index.extend_from_slice(&(decoded.len() as u64).to_le_bytes());
            body.extend_from_slice(&decoded);
        }
        body.extend_from_slice(&out_index);
        Ok(body)
    }
}

#[cfg(test)]
mod tests;
