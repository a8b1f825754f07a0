//! Quick-look images: one chunk of a numeric array decoded through the array's own codecs
//! (zarrs), its first 2-D plane mapped to the viridis colour map (fill values and NaN
//! transparent), downsampled to at most [`MAX_SIDE`] pixels a side and encoded as PNG, with a
//! colour bar under it. Pure: the caller brings the chunk's bytes.

use std::borrow::Cow;
use std::io::Write;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde_json::{Map, Value};
use zarrs::array::{Array, ArrayMetadata, ArrayMetadataV3, ArrayToBytesCodecTraits, CodecOptions};
use zarrs::storage::store::MemoryStore;

/// The largest side of a quick-look image, in pixels (the plane is sampled down to it).
pub const MAX_SIDE: u64 = 512;
/// A plane smaller than this a side is enlarged by a whole factor.
const MIN_SIDE: u64 = 256;
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
    /// zarrs cannot read the metadata or decode the chunk.
    #[error("the chunk cannot be decoded: {0}")]
    Decode(String),
}

/// A rendered quick look: the PNG and the range its colours span.
#[derive(Debug, Clone, PartialEq)]
pub struct Quicklook {
    /// The PNG image.
    pub png: Vec<u8>,
    /// The smallest value drawn (`None` when every value is fill or NaN).
    pub min: Option<f64>,
    /// The largest value drawn.
    pub max: Option<f64>,
    /// The plane's shape before sampling (rows, columns).
    pub plane: [u64; 2],
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

/// Decodes `encoded` (one chunk of the array described by `metadata`; `None` for a missing
/// chunk, drawn as fill) and draws its first 2-D plane, provided the decoded chunk takes at
/// most `max_bytes`; nothing is decoded before that is checked.
pub fn render(
    metadata: &Map<String, Value>,
    encoded: Option<&[u8]>,
    max_bytes: u64,
) -> Result<Quicklook, QuicklookError> {
    let data_type = metadata.get("data_type").and_then(Value::as_str).unwrap_or("?").to_owned();
    let size = numeric_size(&data_type).ok_or_else(|| QuicklookError::NotNumeric(data_type.clone()))?;
    let decode = |e: &dyn std::fmt::Display| QuicklookError::Decode(e.to_string());
    let v3: ArrayMetadataV3 = serde_json::from_value(Value::Object(metadata.clone())).map_err(|e| decode(&e))?;
    let array =
        Array::new_with_metadata(Arc::new(MemoryStore::new()), "/", ArrayMetadata::V3(v3)).map_err(|e| decode(&e))?;
    let zeros = vec![0u64; array.dimensionality()];
    let shape: Vec<NonZeroU64> = array.chunk_shape(&zeros).map_err(|e| decode(&e))?.to_vec();
    let elements = shape.iter().try_fold(1u64, |n, d| n.checked_mul(d.get()));
    let bytes = elements.and_then(|n| n.checked_mul(size as u64)).unwrap_or(u64::MAX);
    if bytes > max_bytes || encoded.is_some_and(|e| e.len() as u64 > max_bytes) {
        return Err(QuicklookError::TooLarge { bytes, max: max_bytes });
    }
    let fill = array.fill_value().as_ne_bytes().to_vec();
    let raw = match encoded {
        Some(encoded) => array
            .codecs()
            .decode(Cow::Borrowed(encoded), &shape, array.data_type(), array.fill_value(), &CodecOptions::default())
            .map_err(|e| decode(&e))?
            .into_fixed()
            .map_err(|e| decode(&e))?
            .into_owned(),
        None => fill.repeat(usize::try_from(elements.unwrap_or(0)).unwrap_or(0)),
    };
    let dims: Vec<u64> = shape.iter().map(|d| d.get()).collect();
    let (rows, cols) = match dims.as_slice() {
        [] => (1, 1),
        [n] => (1, *n),
        [.., r, c] => (*r, *c),
    };
    let value = |i: usize| -> f64 {
        let b = &raw[i * size..(i + 1) * size];
        if b == fill.as_slice() {
            return f64::NAN;
        }
        as_f64(&data_type, b)
    };
    Ok(draw(rows, cols, value))
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

/// Samples the `rows` x `cols` plane (nearest neighbour) to at most [`MAX_SIDE`] a side (a plane
/// under [`MIN_SIDE`] a side is enlarged by a whole factor, so that a small chunk can be seen),
/// maps it to viridis over its finite range and adds the colour bar.
fn draw(rows: u64, cols: u64, value: impl Fn(usize) -> f64) -> Quicklook {
    let zoom = (MIN_SIDE / rows.max(cols).max(1)).max(1);
    let (h, w) = ((rows * zoom).clamp(1, MAX_SIDE) as usize, (cols * zoom).clamp(1, MAX_SIDE) as usize);
    let at = |y: usize, x: usize| {
        let (r, c) = (y as u64 * rows / h as u64, x as u64 * cols / w as u64);
        value((r * cols + c) as usize)
    };
    let samples: Vec<f64> = (0..h).flat_map(|y| (0..w).map(move |x| (y, x))).map(|(y, x)| at(y, x)).collect();
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
    Quicklook { png: png_rgba(width as u32, (h + BAR) as u32, &rgba), min, max, plane: [rows, cols] }
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
mod tests {
    use super::*;
    use serde_json::json;

    fn array(data_type: &str, shape: Value, chunks: Value, fill: Value) -> Map<String, Value> {
        json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": fill,
               "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})
        .as_object()
        .unwrap()
        .clone()
    }

    fn pixel(png: &[u8]) -> (u32, u32) {
        (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()))
    }

    #[test]
    fn draws_the_first_plane_with_its_range() {
        let m = array("float32", json!([2, 3, 4]), json!([1, 3, 4]), json!(-1.0));
        let values: Vec<u8> = (0..12).flat_map(|i| if i == 5 { -1.0f32 } else { i as f32 }.to_le_bytes()).collect();
        let q = render(&m, Some(&values), 1 << 20).unwrap();
        assert_eq!((q.min, q.max), (Some(0.0), Some(11.0)), "the fill value is not part of the range");
        assert_eq!(q.plane, [3, 4]);
        assert_eq!(&q.png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(pixel(&q.png), (256, 192 + BAR as u32), "a small plane enlarged 64 times");
        assert_eq!(crc32(b"IEND"), 0xAE42_6082);
    }

    #[test]
    fn big_planes_are_sampled_down_and_big_chunks_refused() {
        let m = array("uint8", json!([2000, 1000]), json!([2000, 1000]), json!(0));
        let q = render(&m, Some(&vec![7u8; 2_000_000]), 4 << 20).unwrap();
        assert_eq!(pixel(&q.png), (512, 512 + BAR as u32));
        let wide = array("uint8", json!([1, 1000]), json!([1, 1000]), json!(0));
        assert_eq!(pixel(&render(&wide, Some(&[1u8; 1000]), 1000).unwrap().png), (512, 1 + BAR as u32));
        assert_eq!(render(&m, None, 1000), Err(QuicklookError::TooLarge { bytes: 2_000_000, max: 1000 }));
        let s = array("string", json!([2]), json!([2]), json!(""));
        assert!(matches!(render(&s, None, 1000), Err(QuicklookError::NotNumeric(_))));
    }

    #[test]
    fn a_missing_chunk_is_all_fill() {
        let m = array("int16", json!([4, 4]), json!([2, 2]), json!(3));
        let q = render(&m, None, 1000).unwrap();
        assert_eq!((q.min, q.max), (None, None));
    }

    #[test]
    fn viridis_is_close_to_matplotlibs_table() {
        let near = |a: [u8; 3], b: [u8; 3]| a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 4);
        assert!(near(viridis(0.0), [68, 1, 84]), "{:?}", viridis(0.0));
        assert!(near(viridis(0.5), [33, 145, 140]), "{:?}", viridis(0.5));
        assert!(near(viridis(1.0), [253, 231, 37]), "{:?}", viridis(1.0));
    }
}
