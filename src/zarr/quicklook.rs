//! Quick-look images: an overview of a whole 2-D slice of a numeric array (the first index of
//! its leading dimensions, all of its last two), sampled to at most [`MAX_SIDE`] pixels a side
//! from at most [`MAX_CHUNKS`] of its chunks (`quicklook/overview.rs` picks them), each decoded
//! by the bounded decoder (`decode.rs`); packed values unpacked and missing ones masked as CF
//! says (`quicklook/cf.rs`); mapped to the viridis colour map (fill values, missing values and
//! NaN transparent) and encoded as PNG, with a colour bar under it. Pure: the caller brings
//! each chunk's bytes.

pub mod cf;
pub mod overview;

use std::io::Write;

use serde_json::{Map, Value};

use super::decode::ChunkDecoder;

/// The largest side of a quick-look image, in pixels (the slice is sampled down to it).
pub const MAX_SIDE: u64 = 512;
/// A slice smaller than this a side is enlarged by a whole factor.
const MIN_SIDE: u64 = 256;
/// The most chunks one overview reads (a strided subset when the slice spans more).
pub const MAX_CHUNKS: u64 = 32;
/// Height of the colour bar under the image, in pixels.
const BAR: usize = 12;

/// Why there is no quick-look image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuicklookError {
    /// The data type is not numeric (strings, bytes, structured types).
    #[error("arrays of data type {0} have no quick-look image: only numbers are drawn")]
    NotNumeric(String),
    /// The decoded chunk would exceed the bound.
    #[error("a chunk of this array takes {bytes} bytes decoded, above the {max} a quick look may decode")]
    TooLarge {
        /// Its decoded size (`u64::MAX`: more than 2^64).
        bytes: u64,
        /// The bound.
        max: u64,
    },
    /// The metadata cannot be read or a chunk cannot be decoded (within its bound).
    #[error("the chunk cannot be decoded: {0}")]
    Decode(String),
}

/// A rendered quick look: the PNG and what its colours span.
#[derive(Debug, Clone, PartialEq)]
pub struct Quicklook {
    /// The PNG image.
    pub png: Vec<u8>,
    /// The smallest value drawn, unpacked (`None` when every value is fill, missing or NaN).
    pub min: Option<f64>,
    /// The largest value drawn.
    pub max: Option<f64>,
    /// The slice's shape before sampling (rows, columns).
    pub plane: [u64; 2],
    /// The values' `units`, when the attributes say.
    pub units: Option<String>,
}

/// The element size of a numeric data type, `None` for anything else.
fn numeric_size(data_type: &str) -> Option<usize> {
    Some(match data_type {
        "bool" | "int8" | "uint8" => 1,
        "int16" | "uint16" | "float16" => 2,
        "int32" | "uint32" | "float32" => 4,
        "int64" | "uint64" | "float64" => 8,
        _ => return None,
    })
}

/// An overview being drawn: which chunks it reads, and the values of its pixels read so far.
pub struct Overview {
    data_type: String,
    size: usize,
    elements: u64,
    decoder: ChunkDecoder,
    fill: Vec<u8>,
    packing: cf::Packing,
    plan: overview::Plan,
    /// Each pixel's stored value (NaN: fill, missing, or not read yet).
    values: Vec<f64>,
}

impl std::fmt::Debug for Overview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overview").field("plan", &self.plan.chunks).finish_non_exhaustive()
    }
}

impl Overview {
    /// The overview of an array of `shape` (`metadata` describes it) in chunks of
    /// `chunk_shape`, provided a decoded chunk takes at most `max_bytes`: nothing is read or
    /// decoded before that is checked.
    pub fn new(
        metadata: &Map<String, Value>,
        shape: &[u64],
        chunk_shape: &[u64],
        max_bytes: u64,
    ) -> Result<Self, QuicklookError> {
        let data_type = metadata.get("data_type").and_then(Value::as_str).unwrap_or("?").to_owned();
        let size = numeric_size(&data_type).ok_or_else(|| QuicklookError::NotNumeric(data_type.clone()))?;
        let elements = chunk_shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
        let bytes = elements.and_then(|n| n.checked_mul(size as u64)).unwrap_or(u64::MAX);
        if bytes > max_bytes {
            return Err(QuicklookError::TooLarge { bytes, max: max_bytes });
        }
        let decoder =
            ChunkDecoder::new(metadata, chunk_shape, max_bytes).map_err(|e| QuicklookError::Decode(e.to_string()))?;
        let fill = decoder.fill_value().as_ne_bytes().to_vec();
        let attributes = metadata.get("attributes").and_then(Value::as_object);
        let packing = cf::Packing::from_attributes(attributes, &data_type, le_f64);
        let plan = overview::plan(shape, chunk_shape, MAX_CHUNKS, MAX_SIDE, MIN_SIDE);
        let values = vec![f64::NAN; plan.pixels.len()];
        Ok(Self { data_type, size, elements: elements.unwrap_or(0), decoder, fill, packing, plan, values })
    }

    /// The grid coordinates of the chunks to read, in order.
    pub fn chunks(&self) -> &[Vec<u64>] {
        &self.plan.chunks
    }

    /// The chunks the slice spans (more than [`Overview::chunks`] when a subset is read).
    pub fn spanned(&self) -> u64 {
        self.plan.spanned
    }

    /// Takes chunk number `at` of [`Overview::chunks`]: its encoded bytes (`None`: missing,
    /// drawn as fill).
    pub fn add(&mut self, at: usize, encoded: Option<&[u8]>) -> Result<(), QuicklookError> {
        let Some(encoded) = encoded else { return Ok(()) };
        let decode = |e: &dyn std::fmt::Display| QuicklookError::Decode(e.to_string());
        let raw = self.decoder.decode(encoded).map_err(|e| decode(&e))?.into_fixed().map_err(|e| decode(&e))?;
        if raw.len() as u64 != self.elements.saturating_mul(self.size as u64) {
            return Err(decode(&format!("it decodes to {} bytes, not {} elements", raw.len(), self.elements)));
        }
        for (value, (chunk, element)) in self.values.iter_mut().zip(&self.plan.pixels) {
            if *chunk as usize == at {
                let b = &raw[*element as usize * self.size..][..self.size];
                *value = if b == self.fill.as_slice() { f64::NAN } else { as_f64(&self.data_type, b) };
            }
        }
        Ok(())
    }

    /// The image of what was read.
    pub fn finish(self) -> Quicklook {
        let samples: Vec<f64> = self.values.iter().map(|v| self.packing.unpack(*v)).collect();
        let [h, w] = self.plan.size;
        let (png, min, max) = draw(h, w, &samples);
        Quicklook { png, min, max, plane: self.plan.plane, units: self.packing.units }
    }
}

/// Element `index` (C order) of one chunk of the array `metadata` describes, unpacked as CF
/// says (`None`: missing): the first and last values of a coordinate array.
pub fn element(
    metadata: &Map<String, Value>,
    chunk_shape: &[u64],
    encoded: Option<&[u8]>,
    index: u64,
    max_bytes: u64,
) -> Result<Option<f64>, QuicklookError> {
    let mut one = Overview::new(metadata, chunk_shape, chunk_shape, max_bytes)?;
    let Some(encoded) = encoded else { return Ok(None) };
    one.plan.pixels = vec![(0, index)];
    // A coordinate equal to the fill value (0 degrees east) is a coordinate all the same.
    one.fill.clear();
    one.values = vec![f64::NAN];
    one.add(0, Some(encoded))?;
    let v = one.packing.unpack(one.values[0]);
    Ok(v.is_finite().then_some(v))
}

/// One element of `data_type` from little-endian bytes (as attributes carry it), `None` when
/// the length does not fit.
fn le_f64(data_type: &str, b: &[u8]) -> Option<f64> {
    if numeric_size(data_type) != Some(b.len()) {
        return None;
    }
    let mut ne = b.to_vec();
    if cfg!(target_endian = "big") {
        ne.reverse();
    }
    Some(as_f64(data_type, &ne))
}

/// One element as a number (native byte order, as zarrs decodes).
fn as_f64(data_type: &str, b: &[u8]) -> f64 {
    let a = |n: usize| -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..n].copy_from_slice(&b[..n]);
        out
    };
    let x = a(b.len());
    match data_type {
        "bool" | "uint8" => f64::from(b[0]),
        "int8" => f64::from(b[0] as i8),
        "int16" => f64::from(i16::from_ne_bytes([x[0], x[1]])),
        "uint16" => f64::from(u16::from_ne_bytes([x[0], x[1]])),
        "float16" => half_to_f64(u16::from_ne_bytes([x[0], x[1]])),
        "int32" => f64::from(i32::from_ne_bytes([x[0], x[1], x[2], x[3]])),
        "uint32" => f64::from(u32::from_ne_bytes([x[0], x[1], x[2], x[3]])),
        "float32" => f64::from(f32::from_ne_bytes([x[0], x[1], x[2], x[3]])),
        "int64" => i64::from_ne_bytes(x) as f64,
        "uint64" => u64::from_ne_bytes(x) as f64,
        "float64" => f64::from_ne_bytes(x),
        _ => f64::NAN,
    }
}

fn half_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f64::from(h & 0x3ff);
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 if frac == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Maps `samples` (an `h` x `w` image, row-major) to viridis over their finite range and adds
/// the colour bar: the PNG and that range.
fn draw(h: usize, w: usize, samples: &[f64]) -> (Vec<u8>, Option<f64>, Option<f64>) {
    let finite = samples.iter().copied().filter(|v| v.is_finite());
    let (min, max) = finite.fold((None, None), |(lo, hi): (Option<f64>, Option<f64>), v| {
        (Some(lo.map_or(v, |l| l.min(v))), Some(hi.map_or(v, |m| m.max(v))))
    });
    let (lo, span) = match (min, max) {
        (Some(lo), Some(hi)) if hi > lo => (lo, hi - lo),
        (Some(lo), _) => (lo, 1.0),
        _ => (0.0, 1.0),
    };
    let width = w.max(64);
    let mut rgba = vec![0u8; width * (h + BAR) * 4];
    for (i, v) in samples.iter().enumerate() {
        if v.is_finite() {
            let (y, x) = (i / w, i % w);
            let [r, g, b] = viridis(((v - lo) / span).clamp(0.0, 1.0));
            rgba[(y * width + x) * 4..][..4].copy_from_slice(&[r, g, b, 255]);
        }
    }
    for y in h + 2..h + BAR {
        for x in 0..width {
            let [r, g, b] = viridis(x as f64 / (width - 1) as f64);
            rgba[(y * width + x) * 4..][..4].copy_from_slice(&[r, g, b, 255]);
        }
    }
    (png_rgba(width as u32, (h + BAR) as u32, &rgba), min, max)
}

/// Viridis at `t` in [0, 1]: the polynomial fit of matplotlib's table (Matt Zucker, CC0).
pub fn viridis(t: f64) -> [u8; 3] {
    const C: [[f64; 3]; 7] = [
        [0.277_727_327_223_417_7, 0.005_407_344_544_966_578, 0.334_099_805_335_306_1],
        [0.105_093_043_108_577_4, 1.404_613_529_898_575, 1.384_590_162_594_685],
        [-0.330_861_828_725_556_3, 0.214_847_559_468_213, 0.095_095_163_028_236_59],
        [-4.634_230_498_983_486, -5.799_100_973_351_585, -19.332_440_956_279_87],
        [6.228_269_936_347_081, 14.179_933_366_805_09, 56.690_552_600_681_05],
        [4.776_384_997_670_288, -13.745_145_377_746_01, -65.353_032_633_372_34],
        [-5.435_455_855_934_631, 4.645_852_612_178_535, 26.312_435_249_583_2],
    ];
    let mut out = [0u8; 3];
    for (k, o) in out.iter_mut().enumerate() {
        let v = C.iter().rev().fold(0.0, |acc, c| acc * t + c[k]);
        *o = (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    }
    out
}

/// An 8-bit RGBA PNG (no filter, zlib from flate2).
fn png_rgba(width: u32, height: u32, rgba: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(rgba.len() + height as usize);
    for row in rgba.chunks(width as usize * 4) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let idat = z.write_all(&raw).and_then(|()| z.finish()).unwrap_or_default();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(b"IHDR", ihdr.as_slice()), (b"IDAT", idat.as_slice()), (b"IEND", &[][..])] {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    out
}

/// CRC-32 (IEEE), as PNG chunks carry it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[cfg(test)]
mod tests;
