//! Assembled chunks: a chunk of a joined array that no file holds whole (it spans a seam
//! between two files, or a file's padded edge chunk lies in the middle of the joined array). Its
//! [`Recipe`] lists pieces, each a run of one source chunk along the joined axis put at a place
//! of the served chunk; [`assemble`] decodes the pieces with the array's codecs, copies the runs
//! into a chunk of fill values, and encodes that again. Pure: the caller brings the bytes.

use std::io::{self, Read};
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use zarrs::array::{ArrayBytes, ArrayToBytesCodecTraits, CodecOptions};

use super::decode::ChunkDecoder;
use super::spill::{get_u8, get_varint, put_varint};

const MAGIC: &[u8; 4] = b"ZGA\x01";
/// The most pieces one chunk may have (a chunk of 1000 elements made of 1000 one-step files).
pub const MAX_PIECES: usize = 1 << 16;

/// How one assembled chunk is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipe {
    /// The joined axis.
    pub axis: u32,
    /// The pieces, in the order they are put.
    pub pieces: Vec<Piece>,
}

/// `count` steps along the axis of one source chunk, from step `start` of it, put at step `at`
/// of the assembled chunk. A source chunk has the array's chunk shape but along the axis, where
/// it is `source_len` long (a file whose variable is contiguous is one chunk of its own length).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    /// The source chunk.
    pub source: PieceSource,
    /// The source chunk's length along the axis.
    pub source_len: u64,
    /// Where the run starts in it.
    pub start: u64,
    /// Its length.
    pub count: u64,
    /// Where it goes in the assembled chunk.
    pub at: u64,
}

/// Where a piece's source chunk is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PieceSource {
    /// `length` bytes at `offset` of `url`, checked against its ETag or size when known.
    Virtual { url: String, etag: Option<String>, size: Option<u64>, offset: u64, length: u64 },
    /// The encoded chunk itself.
    Inline(Vec<u8>),
}

/// Why a chunk cannot be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssembleError {
    /// A stored recipe that cannot be read (corruption, or a newer format).
    #[error("assembled chunk recipe is corrupt: {0}")]
    Corrupt(&'static str),
    /// A recipe that does not fit the array.
    #[error("assembled chunk recipe does not fit the array: {0}")]
    Misfit(String),
    /// A piece or the result that the codecs cannot decode or encode.
    #[error("{0}")]
    Codec(String),
}

impl Recipe {
    /// The recipe in its stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.pieces.len() * 64);
        out.extend_from_slice(MAGIC);
        put_varint(&mut out, u64::from(self.axis));
        put_varint(&mut out, self.pieces.len() as u64);
        let text = |out: &mut Vec<u8>, s: &[u8]| {
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s);
        };
        for p in &self.pieces {
            match &p.source {
                PieceSource::Virtual { url, etag, size, offset, length } => {
                    out.push(0);
                    text(&mut out, url.as_bytes());
                    match etag {
                        Some(e) => {
                            out.push(1);
                            text(&mut out, e.as_bytes());
                        }
                        None => out.push(0),
                    }
                    put_varint(&mut out, size.map_or(0, |s| s + 1));
                    put_varint(&mut out, *offset);
                    put_varint(&mut out, *length);
                }
                PieceSource::Inline(bytes) => {
                    out.push(1);
                    text(&mut out, bytes);
                }
            }
            for v in [p.source_len, p.start, p.count, p.at] {
                put_varint(&mut out, v);
            }
        }
        out
    }

    /// Reads a stored recipe, refusing anything out of its own bounds.
    pub fn decode(data: &[u8]) -> Result<Self, AssembleError> {
        let corrupt = |_: io::Error| AssembleError::Corrupt("truncated");
        let mut r = data;
        let mut magic = [0u8; 4];
        r.read_exact(&mut magic).map_err(corrupt)?;
        if &magic != MAGIC {
            return Err(AssembleError::Corrupt("unknown format"));
        }
        let axis = u32::try_from(get_varint(&mut r).map_err(corrupt)?).map_err(|_| AssembleError::Corrupt("axis"))?;
        let n = get_varint(&mut r).map_err(corrupt)?;
        if n > MAX_PIECES as u64 {
            return Err(AssembleError::Corrupt("too many pieces"));
        }
        let mut pieces = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let source = match get_u8(&mut r).map_err(corrupt)? {
                0 => {
                    let url = text(&mut r)?;
                    let etag = match get_u8(&mut r).map_err(corrupt)? {
                        0 => None,
                        _ => Some(text(&mut r)?),
                    };
                    let size = get_varint(&mut r).map_err(corrupt)?.checked_sub(1);
                    let (offset, length) = (get_varint(&mut r).map_err(corrupt)?, get_varint(&mut r).map_err(corrupt)?);
                    PieceSource::Virtual { url, etag, size, offset, length }
                }
                1 => PieceSource::Inline(bytes(&mut r)?),
                _ => return Err(AssembleError::Corrupt("unknown piece")),
            };
            let mut numbers = [0u64; 4];
            for n in &mut numbers {
                *n = get_varint(&mut r).map_err(corrupt)?;
            }
            let [source_len, start, count, at] = numbers;
            pieces.push(Piece { source, source_len, start, count, at });
        }
        if !r.is_empty() {
            return Err(AssembleError::Corrupt("trailing bytes"));
        }
        Ok(Self { axis, pieces })
    }

    /// Checks the recipe against an array of `chunk_shape`: the axis is one of its dimensions
    /// and every run lies inside both chunks.
    pub fn check(&self, chunk_shape: &[u64]) -> Result<(), AssembleError> {
        let step = *chunk_shape
            .get(self.axis as usize)
            .ok_or_else(|| AssembleError::Misfit(format!("axis {} of a {}-d array", self.axis, chunk_shape.len())))?;
        for p in &self.pieces {
            let inside = |from: u64, len: u64| from.checked_add(p.count).is_some_and(|end| end <= len);
            if p.count == 0 || !inside(p.start, p.source_len) || !inside(p.at, step) {
                return Err(AssembleError::Misfit(format!(
                    "a run of {} steps from {} of a chunk {} long put at {} of a chunk {step} long",
                    p.count, p.start, p.source_len, p.at
                )));
            }
        }
        Ok(())
    }
}

fn bytes(r: &mut &[u8]) -> Result<Vec<u8>, AssembleError> {
    let n = get_varint(r).map_err(|_| AssembleError::Corrupt("truncated"))?;
    let n = usize::try_from(n).ok().filter(|n| *n <= r.len()).ok_or(AssembleError::Corrupt("truncated"))?;
    let (head, tail) = r.split_at(n);
    *r = tail;
    Ok(head.to_vec())
}

fn text(r: &mut &[u8]) -> Result<String, AssembleError> {
    String::from_utf8(bytes(r)?).map_err(|_| AssembleError::Corrupt("text is not UTF-8"))
}

/// Whether chunks of an array `metadata` describes (chunks of `chunk_shape`) can be assembled:
/// its values are of fixed size, and zarrs decodes (within bounds) and encodes its codecs.
pub fn can_assemble(metadata: &Map<String, Value>, chunk_shape: &[u64]) -> Result<(), AssembleError> {
    let codec = |e: &dyn std::fmt::Display| AssembleError::Codec(e.to_string());
    let decoder = ChunkDecoder::new(metadata, chunk_shape, u64::MAX).map_err(|e| codec(&e))?;
    if decoder.data_type().fixed_size().is_none() {
        return Err(codec(&"its values are of variable length"));
    }
    let seen = super::metadata::as_zarrs_sees_it(metadata).map_err(|e| codec(&e))?;
    super::metadata::zarrs_array(seen).map_err(|e| codec(&e))?;
    Ok(())
}

/// The chunk `recipe` makes, for an array `metadata` describes with chunks of `chunk_shape`:
/// `pieces[i]` is the encoded source chunk of `recipe.pieces[i]`. Nothing decoded is larger than
/// `max_bytes`; gzip and zlib encode at `deflate_level`.
pub fn assemble(
    metadata: &Map<String, Value>,
    chunk_shape: &[u64],
    recipe: &Recipe,
    pieces: &[&[u8]],
    max_bytes: u64,
    deflate_level: u32,
) -> Result<Assembled, AssembleError> {
    assemble_from(metadata, metadata, chunk_shape, recipe, pieces, max_bytes, deflate_level)
}

/// As [`assemble`], the pieces decoded with the codecs of `source` (the array as the files
/// hold it) and the chunk encoded with those of `metadata` (the array as served: the same but
/// for its codecs, in a store with portable codecs).
pub fn assemble_from(
    source: &Map<String, Value>,
    metadata: &Map<String, Value>,
    chunk_shape: &[u64],
    recipe: &Recipe,
    pieces: &[&[u8]],
    max_bytes: u64,
    deflate_level: u32,
) -> Result<Assembled, AssembleError> {
    let codec = |e: &dyn std::fmt::Display| AssembleError::Codec(e.to_string());
    recipe.check(chunk_shape)?;
    if pieces.len() != recipe.pieces.len() {
        return Err(AssembleError::Misfit(format!("{} pieces for a recipe of {}", pieces.len(), recipe.pieces.len())));
    }
    let axis = recipe.axis as usize;
    // C order: `outer` slabs, each of `len` rows along the axis, each row `row` bytes.
    let shaped = |len: u64| {
        let mut shape = chunk_shape.to_vec();
        shape[axis] = len;
        shape
    };
    // One decoder per length of source chunk along the axis (most recipes have one).
    let mut lengths: Vec<u64> = recipe.pieces.iter().map(|p| p.source_len).chain([chunk_shape[axis]]).collect();
    lengths.sort_unstable();
    lengths.dedup();
    let decoders = lengths
        .into_iter()
        .map(|len| Ok((len, ChunkDecoder::new(source, &shaped(len), max_bytes).map_err(|e| codec(&e))?)))
        .collect::<Result<Vec<_>, AssembleError>>()?;
    let decoder_for = |len: u64| decoders.iter().find(|(l, _)| *l == len).map(|(_, d)| d);
    let own = decoder_for(chunk_shape[axis]).ok_or(AssembleError::Corrupt("no decoder"))?;
    let size =
        own.data_type().fixed_size().ok_or_else(|| codec(&"an array of variable-length values cannot be assembled"))?
            as u64;
    let outer: u64 = chunk_shape[..axis].iter().product();
    let row = chunk_shape[axis + 1..].iter().product::<u64>() * size;
    let bytes_of = |len: u64| outer.checked_mul(len).and_then(|n| n.checked_mul(row)).filter(|n| *n <= max_bytes);
    let total = bytes_of(chunk_shape[axis]).ok_or_else(|| {
        codec(&format!("an assembled chunk would take more than the {max_bytes} bytes allowed decoded"))
    })?;
    let fill = own.fill_value().as_ne_bytes().to_vec();
    let mut out: Vec<u8> = match fill.len() {
        0 => vec![0; total as usize],
        n => fill.repeat(total as usize / n),
    };
    let mut decoding = Duration::ZERO;
    for (piece, encoded) in recipe.pieces.iter().zip(pieces) {
        let expected = bytes_of(piece.source_len)
            .ok_or_else(|| codec(&format!("a piece would take more than the {max_bytes} bytes allowed decoded")))?;
        let decoder = decoder_for(piece.source_len).ok_or(AssembleError::Corrupt("no decoder"))?;
        let started = Instant::now();
        let decoded = decoder.decode(encoded).map_err(|e| codec(&e))?.into_fixed().map_err(|e| codec(&e))?;
        decoding += started.elapsed();
        if decoded.len() as u64 != expected {
            return Err(codec(&format!("a piece decodes to {} bytes, not the {expected} of its chunk", decoded.len())));
        }
        let (from, to, len) = ((piece.start * row) as usize, (piece.at * row) as usize, (piece.count * row) as usize);
        let (source_slab, slab) = ((piece.source_len * row) as usize, (chunk_shape[axis] * row) as usize);
        for o in 0..outer as usize {
            out[o * slab + to..][..len].copy_from_slice(&decoded[o * source_slab + from..][..len]);
        }
    }
    Ok(Assembled { bytes: encode(metadata, chunk_shape, out, deflate_level)?, decoding })
}

/// An assembled chunk, encoded, and the time its pieces took to decode.
#[derive(Debug)]
pub struct Assembled {
    /// The chunk's bytes.
    pub bytes: Vec<u8>,
    /// The time spent decoding the pieces.
    pub decoding: Duration,
}

/// zstd compressors, encoded at their fast level 1 (any level decodes the same).
const ZSTD: &[&str] = &["zstd", "numcodecs.zstd"];

/// `seen`'s codecs with every deflate compressor (gzip, zlib: those
/// [`Frame::of`](super::deflate::Frame::of) names) at `deflate_level`, of [`ZSTD`] at 1. A chunk
/// is encoded while a reader waits, and zlib at level 9 is some 20 times slower than at 1 (the
/// default); 0 stores the bytes deflated in name only, as fast as a copy, twice as large.
fn at_fast_levels(seen: &mut Map<String, Value>, deflate_level: u32) {
    let Some(Value::Array(codecs)) = seen.get_mut("codecs") else { return };
    for c in codecs {
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let level = match name.as_str() {
            n if super::deflate::Frame::of(n).is_some() => i64::from(deflate_level.min(9)),
            n if ZSTD.contains(&n) => 1,
            _ => continue,
        };
        if let Some(config) = c.get_mut("configuration").and_then(Value::as_object_mut)
            && config.contains_key("level")
        {
            config.insert("level".into(), Value::from(level));
        }
    }
}

/// `raw` (one chunk's elements in C order, native byte order) encoded with the array's codecs.
pub(super) fn encode(
    metadata: &Map<String, Value>,
    chunk_shape: &[u64],
    raw: Vec<u8>,
    deflate_level: u32,
) -> Result<Vec<u8>, AssembleError> {
    let codec = |e: &dyn std::fmt::Display| AssembleError::Codec(e.to_string());
    let mut seen = super::metadata::as_zarrs_sees_it(metadata).map_err(|e| codec(&e))?;
    at_fast_levels(&mut seen, deflate_level);
    // A deflate codec at the end of the chain is run here (`deflate.rs`: faster, the same
    // stream format), the rest of the chain by zarrs.
    let last = deflate_last(&mut seen);
    let array = super::metadata::zarrs_array(seen).map_err(|e| codec(&e))?;
    let shape: Vec<NonZeroU64> = chunk_shape.iter().filter_map(|d| NonZeroU64::new(*d)).collect();
    let encoded = array
        .codecs()
        .encode(ArrayBytes::new_flen(raw), &shape, array.data_type(), array.fill_value(), &CodecOptions::default())
        .map_err(|e| codec(&e))?;
    Ok(match last {
        Some(frame) => super::deflate::deflate(&encoded, deflate_level, frame),
        None => encoded.to_vec(),
    })
}

/// Takes the last codec out of `seen`'s chain when it is a deflate codec (and something is
/// left before it), answering its frame.
fn deflate_last(seen: &mut Map<String, Value>) -> Option<super::deflate::Frame> {
    let Some(Value::Array(codecs)) = seen.get_mut("codecs") else { return None };
    let frame = codecs.last().and_then(|c| c.get("name")).and_then(Value::as_str).and_then(super::deflate::Frame::of);
    if frame.is_some() && codecs.len() > 1 {
        codecs.pop();
        return frame;
    }
    None
}

#[cfg(test)]
mod tests;
