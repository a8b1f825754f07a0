//! The TIFF codecs a file's tiles are written with, as imagecodecs names them and zarrs does
//! not have: LZW, PackBits and JPEG (bytes to bytes) and the horizontal and floating-point
//! predictors `delta` and `floatpred` (array to array). zarrgate decodes them itself, bounded
//! like every other codec (`decode.rs`), so that a TIFF store served with portable codecs
//! (`?codecs=portable`) is transcoded like any other; they are never encoded. Pure.

mod floatpred;
pub mod jpeg;

use serde_json::Value;
use weezl::{BitOrder, LzwStatus, decode::Decoder};

pub use floatpred::FloatPred;

/// Bytes-to-bytes codecs decoded here.
pub const BYTES_TO_BYTES: &[&str] =
    &["numcodecs.imagecodecs_lzw", "numcodecs.imagecodecs_packbits", "numcodecs.imagecodecs_jpeg"];
/// Array-to-array codecs undone here, after zarrs decoded the rest.
pub const ARRAY_TO_ARRAY: &[&str] = &["numcodecs.imagecodecs_delta", "numcodecs.imagecodecs_floatpred"];

/// One of the [`ARRAY_TO_ARRAY`] codecs, undone on a chunk zarrs decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Predictor {
    /// `imagecodecs_delta`: TIFF's horizontal predictor.
    Delta(Delta),
    /// `imagecodecs_floatpred`: TIFF's floating-point predictor.
    FloatPred(FloatPred),
}

impl Predictor {
    /// The predictor `name` of `configuration`, for chunks of `chunk_shape` whose values are
    /// `size` bytes; `stored_big_endian` is the order the chain's `bytes` codec reads them in
    /// (`None`: its serializer is another).
    pub fn new(
        name: &str,
        configuration: Option<&Value>,
        chunk_shape: &[u64],
        size: usize,
        stored_big_endian: Option<bool>,
    ) -> Result<Self, String> {
        match name {
            "numcodecs.imagecodecs_delta" => Delta::new(configuration, chunk_shape.len(), size).map(Self::Delta),
            // It reorders the stored bytes: only a `bytes` codec says which they were.
            "numcodecs.imagecodecs_floatpred" => match stored_big_endian {
                Some(big) => FloatPred::new(configuration, chunk_shape, size, big).map(Self::FloatPred),
                None => Err("imagecodecs_floatpred over a serializer other than bytes".into()),
            },
            other => Err(format!("{other} is not undone here")),
        }
    }

    /// Undoes the predictor in `raw`, a chunk of `shape` as zarrs decoded it (C order, native
    /// byte order).
    pub fn undo(&self, raw: &mut [u8], shape: &[u64]) {
        match self {
            Self::Delta(delta) => delta.undo(raw, shape),
            Self::FloatPred(floatpred) => floatpred.undo(raw),
        }
    }
}

/// Decodes `input` with the bytes-to-bytes codec `name` (one of [`BYTES_TO_BYTES`]), stopping
/// past `bound` bytes: `Ok` holds at most `bound + 1` bytes (one more says it went past).
pub fn decode_bytes(name: &str, input: &[u8], bound: u64) -> Result<Vec<u8>, String> {
    match name {
        "numcodecs.imagecodecs_lzw" => lzw(input, bound),
        "numcodecs.imagecodecs_packbits" => packbits(input, bound),
        "numcodecs.imagecodecs_jpeg" => jpeg::decode(input, bound),
        other => Err(format!("{other} is not decoded here")),
    }
}

/// TIFF's LZW: codes of 9 to 12 bits, most significant bit first, widened one code early (the
/// "early change" libtiff writes).
fn lzw(input: &[u8], bound: u64) -> Result<Vec<u8>, String> {
    let limit = usize::try_from(bound.saturating_add(1)).unwrap_or(usize::MAX);
    let mut decoder = Decoder::with_tiff_size_switch(BitOrder::Msb, 8);
    let mut out = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    let mut rest = input;
    loop {
        let result = decoder.decode_bytes(rest, &mut buffer);
        rest = &rest[result.consumed_in..];
        let room = limit - out.len();
        out.extend_from_slice(&buffer[..result.consumed_out.min(room)]);
        if out.len() >= limit {
            return Ok(out);
        }
        match result.status {
            Ok(LzwStatus::Done) => return Ok(out),
            // A tile whose stream ends without its end code (libtiff writes one; others may not).
            Ok(LzwStatus::NoProgress) if rest.is_empty() => return Ok(out),
            Ok(LzwStatus::NoProgress) => return Err("the LZW stream makes no progress".into()),
            Ok(LzwStatus::Ok) => {}
            Err(e) => return Err(format!("LZW: {e}")),
        }
    }
}

/// PackBits (Apple's run-length encoding, TIFF compression 32773).
fn packbits(input: &[u8], bound: u64) -> Result<Vec<u8>, String> {
    let limit = usize::try_from(bound.saturating_add(1)).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    let mut at = 0;
    while at < input.len() && out.len() < limit {
        let header = input[at] as i8;
        at += 1;
        match header {
            0..=127 => {
                let n = header as usize + 1;
                let literal = input.get(at..at + n).ok_or("a PackBits literal run goes past the tile's end")?;
                out.extend_from_slice(&literal[..n.min(limit - out.len())]);
                at += n;
            }
            -127..=-1 => {
                let byte = *input.get(at).ok_or("a PackBits repeat run goes past the tile's end")?;
                let n = (1 - i16::from(header)) as usize;
                out.resize(out.len() + n.min(limit - out.len()), byte);
                at += 1;
            }
            -128 => {}
        }
    }
    Ok(out)
}

/// An array-to-array codec undone after decoding: imagecodecs' `delta` (TIFF's horizontal
/// predictor), a cumulative sum along one axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    /// The axis, counted from the first (the configuration's negative axes resolved).
    axis: usize,
    /// Bytes of one element.
    size: usize,
    /// Whether the elements are signed (the sum wraps the same either way; kept for clarity of
    /// the error below).
    integer: bool,
}

impl Delta {
    /// The `delta` codec of `configuration` (`{"axis": -1, "dist": 1, "dtype": "<u2", ...}`),
    /// for chunks of `ndim` dimensions whose elements are `size` bytes.
    pub fn new(configuration: Option<&Value>, ndim: usize, size: usize) -> Result<Self, String> {
        let get = |key: &str| configuration.and_then(|c| c.get(key));
        let axis = get("axis").and_then(Value::as_i64).unwrap_or(-1);
        let dist = get("dist").and_then(Value::as_i64).unwrap_or(1);
        if dist != 1 {
            return Err(format!("imagecodecs_delta with dist {dist} (only 1 is decoded)"));
        }
        let resolved = if axis < 0 { ndim as i64 + axis } else { axis };
        let axis = usize::try_from(resolved)
            .ok()
            .filter(|a| *a < ndim)
            .ok_or_else(|| format!("imagecodecs_delta along axis {axis} of a {ndim}-d chunk"))?;
        let dtype = get("dtype").and_then(Value::as_str).unwrap_or("");
        let integer = dtype.contains(['u', 'i']);
        if !integer || !matches!(size, 1 | 2 | 4 | 8) {
            return Err(format!("imagecodecs_delta of {dtype:?} (integers only)"));
        }
        Ok(Self { axis, size, integer })
    }

    /// Undoes the predictor in `raw`, the chunk's elements in C order and native byte order,
    /// for a chunk of `shape`.
    pub fn undo(&self, raw: &mut [u8], shape: &[u64]) {
        let len = shape[self.axis] as usize;
        let inner = shape[self.axis + 1..].iter().product::<u64>() as usize * self.size;
        let slab = len * inner;
        if slab == 0 || len < 2 {
            return;
        }
        for block in raw.chunks_exact_mut(slab) {
            for i in 1..len {
                let (before, now) = block.split_at_mut(i * inner);
                let previous = &before[(i - 1) * inner..];
                for (x, p) in now[..inner].chunks_exact_mut(self.size).zip(previous.chunks_exact(self.size)) {
                    add(x, p);
                }
            }
        }
        debug_assert!(self.integer);
    }
}

/// `x += p`, wrapping, for one native-order integer of 1, 2, 4 or 8 bytes.
fn add(x: &mut [u8], p: &[u8]) {
    match x.len() {
        1 => x[0] = x[0].wrapping_add(p[0]),
        2 => {
            let v = u16::from_ne_bytes([x[0], x[1]]).wrapping_add(u16::from_ne_bytes([p[0], p[1]]));
            x.copy_from_slice(&v.to_ne_bytes());
        }
        4 => {
            let v = u32::from_ne_bytes(x[..4].try_into().unwrap_or_default())
                .wrapping_add(u32::from_ne_bytes(p[..4].try_into().unwrap_or_default()));
            x.copy_from_slice(&v.to_ne_bytes());
        }
        _ => {
            let v = u64::from_ne_bytes(x[..8].try_into().unwrap_or_default())
                .wrapping_add(u64::from_ne_bytes(p[..8].try_into().unwrap_or_default()));
            x.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lzw_decodes_what_tiffs_lzw_encodes_and_stops_at_its_bound() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 ^ (i / 97) as u8).collect();
        let encoded = weezl::encode::Encoder::with_tiff_size_switch(BitOrder::Msb, 8).encode(&data).unwrap();
        assert_eq!(lzw(&encoded, 5000).unwrap(), data);
        // A bomb is cut at the bound (one byte past it, which the caller refuses).
        assert_eq!(lzw(&encoded, 100).unwrap().len(), 101);
        // Junk is an error or a short output, never a panic or more than the bound.
        assert!(lzw(&[0xff, 0xff, 0xff, 0xff], 100).map_or(true, |out| out.len() <= 101));
    }

    #[test]
    fn packbits_decodes_runs_and_literals_and_refuses_runs_past_the_end() {
        // Apple's example: literal run, repeat run, literal.
        let encoded = [0xFE, 0xAA, 0x02, 0x80, 0x00, 0x2A, 0xFD, 0xAA, 0x03, 0x80, 0x00, 0x2A, 0x22, 0xF7, 0xAA];
        let expected = [
            0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0xAA, 0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0x22, 0xAA, 0xAA, 0xAA, 0xAA,
            0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA,
        ];
        assert_eq!(packbits(&encoded, 100).unwrap(), expected);
        assert_eq!(packbits(&encoded, 5).unwrap().len(), 6);
        assert!(packbits(&[0x05, 1, 2], 100).is_err());
        assert!(packbits(&[0xF0], 100).is_err());
    }

    #[test]
    fn delta_is_undone_along_its_axis_with_wrapping_sums() {
        // A 2 x 3 chunk of uint16 differenced along x (axis -1).
        let delta = Delta::new(Some(&json!({"axis": -1, "dist": 1, "dtype": "<u2"})), 2, 2).unwrap();
        let diffs: [u16; 6] = [10, 1, 1, 65535, 2, 3];
        let mut raw: Vec<u8> = diffs.iter().flat_map(|v| v.to_ne_bytes()).collect();
        delta.undo(&mut raw, &[2, 3]);
        let out: Vec<u16> = raw.chunks_exact(2).map(|b| u16::from_ne_bytes([b[0], b[1]])).collect();
        assert_eq!(out, [10, 11, 12, 65535, 1, 4]);
        // Chunky samples: axis -2 of (y, x, samples), each sample summed on its own.
        let delta = Delta::new(Some(&json!({"axis": -2, "dtype": "|u1"})), 3, 1).unwrap();
        let mut raw = vec![1, 100, 2, 3, 4, 5];
        delta.undo(&mut raw, &[1, 3, 2]);
        assert_eq!(raw, [1, 100, 3, 103, 7, 108]);
        assert!(Delta::new(Some(&json!({"dtype": "<f4"})), 2, 4).is_err());
        assert!(Delta::new(Some(&json!({"axis": 3, "dtype": "<u2"})), 2, 2).is_err());
        assert!(Delta::new(Some(&json!({"dist": 2, "dtype": "<u2"})), 2, 2).is_err());
    }
}
