//! One TIFF image (an IFD) as a Zarr array: its shape and data type, its tiles or strips as
//! chunks, its codecs; or why it is left out. Single-sample images are `(y, x)`; chunky samples
//! (PlanarConfiguration 1) are the last dimension, `(y, x, band)`, as the pixels interleave
//! them in each tile; planar samples (2) are the first, `(band, y, x)`, one chunk per plane per
//! tile, as virtual-tiff lays them.

use serde_json::Value;

use super::codecs::{self, Layout};
use super::ifd::Ifd;
use super::tags;
use crate::formats::{ByteRanges, Chunk, FormatError, Limits};

/// An image as a Zarr array, before its attributes.
#[derive(Debug)]
pub struct Image {
    pub shape: Vec<u64>,
    pub chunk_shape: Vec<u64>,
    pub dimension_names: Vec<&'static str>,
    pub data_type: &'static str,
    pub codecs: Vec<Value>,
    pub chunks: Vec<(Vec<u64>, Chunk)>,
    /// Width and height, for overviews' transforms.
    pub width: u64,
    pub height: u64,
}

/// What became of an IFD: an array, or a reason to leave it out (a warning), or a malformed
/// file (an error).
pub type Outcome = Result<Result<Image, String>, FormatError>;

/// The array of `ifd`, `chunk_budget` chunks at most.
pub fn read(file: &dyn ByteRanges, ifd: &Ifd, big_endian: bool, limits: &Limits, chunk_budget: u64) -> Outcome {
    let invalid = |what: String| FormatError::Invalid(format!("its IFD at byte {}: {what}", ifd.offset));
    let width = ifd.one(file, tags::IMAGE_WIDTH)?.ok_or_else(|| invalid("it has no ImageWidth".into()))?;
    let height = ifd.one(file, tags::IMAGE_LENGTH)?.ok_or_else(|| invalid("it has no ImageLength".into()))?;
    if width == 0 || height == 0 || width > u64::from(u32::MAX) || height > u64::from(u32::MAX) {
        return Err(invalid(format!("its size {width} x {height} is not a picture's")));
    }
    let samples = ifd.one(file, tags::SAMPLES_PER_PIXEL)?.unwrap_or(1);
    if samples == 0 || samples > 1 << 16 {
        return Err(invalid(format!("it claims {samples} samples per pixel")));
    }
    if ifd.one(file, tags::IMAGE_DEPTH)?.unwrap_or(1) > 1 {
        return Ok(Err("it is a volume (ImageDepth > 1)".into()));
    }
    let photometric = ifd.one(file, tags::PHOTOMETRIC)?;
    if photometric == Some(6) {
        return Ok(Err("its pixels are YCbCr (subsampled chroma), which no Zarr codec turns back into samples".into()));
    }
    let Some(data_type) = data_type(file, ifd, samples)? else {
        return Ok(Err("its samples are not all one 8, 16, 32 or 64-bit integer or float type".into()));
    };
    let planar = samples > 1 && ifd.one(file, tags::PLANAR_CONFIGURATION)?.unwrap_or(1) == 2;
    let tiled = ifd.has(tags::TILE_WIDTH) || ifd.has(tags::TILE_OFFSETS);
    let (block_height, block_width, offsets_tag, counts_tag) = if tiled {
        let tile_width = ifd.one(file, tags::TILE_WIDTH)?.unwrap_or(0);
        let tile_height = ifd.one(file, tags::TILE_LENGTH)?.unwrap_or(0);
        if tile_width == 0 || tile_height == 0 || tile_width > 1 << 24 || tile_height > 1 << 24 {
            return Err(invalid(format!("its tiles of {tile_width} x {tile_height} are not a picture's")));
        }
        (tile_height, tile_width, tags::TILE_OFFSETS, tags::TILE_BYTE_COUNTS)
    } else {
        let rows = ifd.one(file, tags::ROWS_PER_STRIP)?.unwrap_or(u64::MAX).clamp(1, height);
        if height % rows != 0 {
            return Ok(Err(format!(
                "its last strip is shorter than the others ({height} rows in strips of {rows}): a Zarr chunk grid is regular"
            )));
        }
        (rows, width, tags::STRIP_OFFSETS, tags::STRIP_BYTE_COUNTS)
    };
    let (down, across) = (height.div_ceil(block_height), width.div_ceil(block_width));
    let planes = if planar { samples } else { 1 };
    let blocks = down.checked_mul(across).and_then(|b| b.checked_mul(planes));
    let blocks = match blocks {
        Some(blocks) if blocks <= chunk_budget => blocks,
        _ => {
            return Err(FormatError::TooLarge(format!(
                "its IFD at byte {} makes more chunks than limits.max_chunks ({}) allows",
                ifd.offset, limits.max_chunks
            )));
        }
    };
    let (shape, chunk_shape, dimension_names) = match (samples, planar) {
        (1, _) => (vec![height, width], vec![block_height, block_width], vec!["y", "x"]),
        (_, false) => (vec![height, width, samples], vec![block_height, block_width, samples], vec!["y", "x", "band"]),
        (_, true) => (vec![samples, height, width], vec![1, block_height, block_width], vec!["band", "y", "x"]),
    };
    let compression = ifd.one(file, tags::COMPRESSION)?.unwrap_or(1);
    let layout = Layout {
        compression,
        predictor: ifd.one(file, tags::PREDICTOR)?.unwrap_or(1),
        data_type,
        big_endian,
        chunk_shape: &chunk_shape,
        chunky_samples: samples > 1 && !planar,
        jpeg_tables: ifd.has(tags::JPEG_TABLES),
    };
    let codecs = match codecs::chain(&layout) {
        Ok(codecs) => codecs,
        Err(why) => return Ok(Err(why)),
    };
    if !ifd.has(offsets_tag) || !ifd.has(counts_tag) {
        return Err(invalid("it has no tile or strip offsets and byte counts".into()));
    }
    let (offset_count, byte_count_count) = (ifd.count(offsets_tag), ifd.count(counts_tag));
    if offset_count != blocks || byte_count_count != blocks {
        return Err(invalid(format!(
            "it lists {offset_count} offsets and {byte_count_count} byte counts for its {blocks} tiles or strips"
        )));
    }
    let offsets = ifd.unsigned(file, offsets_tag, blocks)?.unwrap_or_default();
    let counts = ifd.unsigned(file, counts_tag, blocks)?.unwrap_or_default();
    let raw_size = chunk_shape.iter().fold(codecs::element_size(data_type), |size, n| size.saturating_mul(*n));
    let mut chunks = Vec::with_capacity(blocks as usize);
    for (index, (offset, length)) in offsets.into_iter().zip(counts).enumerate() {
        if index % 4096 == 0 {
            limits.check_time()?;
        }
        if offset == 0 || length == 0 {
            continue; // a sparse block (GDAL's SPARSE_OK): it reads as the fill value
        }
        if offset.checked_add(length).is_none_or(|end| end > file.len()) {
            return Err(invalid(format!(
                "its tile or strip {index} ({length} bytes at byte {offset}) goes past the end of the {}-byte file",
                file.len()
            )));
        }
        let length = if compression == 1 {
            if length < raw_size {
                return Ok(Err(format!("its uncompressed block {index} is {length} bytes, short of {raw_size}")));
            }
            raw_size
        } else {
            length
        };
        let index = index as u64;
        let (plane, within) = (index / (down * across), index % (down * across));
        let (row, column) = (within / across, within % across);
        let key = match (samples, planar) {
            (1, _) => vec![row, column],
            (_, false) => vec![row, column, 0],
            (_, true) => vec![plane, row, column],
        };
        chunks.push((key, Chunk::Range { offset, length }));
    }
    Ok(Ok(Image { shape, chunk_shape, dimension_names, data_type, codecs, chunks, width, height }))
}

/// The Zarr data type of the samples, when every sample has the same one Zarr has.
fn data_type(file: &dyn ByteRanges, ifd: &Ifd, samples: u64) -> Result<Option<&'static str>, FormatError> {
    let bits = ifd.unsigned(file, tags::BITS_PER_SAMPLE, samples.max(8))?.unwrap_or_else(|| vec![1]);
    let formats = ifd.unsigned(file, tags::SAMPLE_FORMAT, samples.max(8))?.unwrap_or_else(|| vec![1]);
    let (Some(&first_bits), Some(&first_format)) = (bits.first(), formats.first()) else { return Ok(None) };
    if bits.iter().any(|b| *b != first_bits) || formats.iter().any(|f| *f != first_format) {
        return Ok(None);
    }
    Ok(match (first_format, first_bits) {
        (1 | 4, 8) => Some("uint8"),
        (1 | 4, 16) => Some("uint16"),
        (1 | 4, 32) => Some("uint32"),
        (1 | 4, 64) => Some("uint64"),
        (2, 8) => Some("int8"),
        (2, 16) => Some("int16"),
        (2, 32) => Some("int32"),
        (2, 64) => Some("int64"),
        (3, 16) => Some("float16"),
        (3, 32) => Some("float32"),
        (3, 64) => Some("float64"),
        _ => None,
    })
}
