//! imagecodecs' `floatpred`: TIFF's floating-point predictor (Predictor 3, TIFF Technical Note
//! 3), undone. Each row of a chunk was stored as its values' most significant bytes, then their
//! next bytes, and so on (the same order whatever the file's byte order), each byte differenced
//! from the one a pixel before it.

use serde_json::Value;

/// The floating-point predictor of one array's chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatPred {
    /// Bytes of one value (2, 4 or 8).
    size: usize,
    /// Values in one predicted row: the predicted axis times the samples after it.
    row: usize,
    /// Bytes one difference spans: the samples interleaved in a pixel, times `dist`.
    stride: usize,
    /// Whether the `bytes` codec reads the stored chunk as big-endian: the order zarrs decoded
    /// the predicted bytes in, to be turned back before they are undone.
    stored_big_endian: bool,
}

impl FloatPred {
    /// The `floatpred` codec of `configuration` (`{"axis": -1, "dist": 1, "dtype": ">f4",
    /// "shape": [...]}`) for chunks of `chunk_shape` whose values are `size` bytes, stored in
    /// big-endian order if `stored_big_endian`.
    pub fn new(
        configuration: Option<&Value>,
        chunk_shape: &[u64],
        size: usize,
        stored_big_endian: bool,
    ) -> Result<Self, String> {
        let get = |key: &str| configuration.and_then(|c| c.get(key));
        let dtype = get("dtype").and_then(Value::as_str).unwrap_or("");
        if !dtype.contains('f') || !matches!(size, 2 | 4 | 8) || !dtype.ends_with(&size.to_string()) {
            return Err(format!("imagecodecs_floatpred of {dtype:?} over values of {size} bytes (floats only)"));
        }
        let dist = get("dist").and_then(Value::as_u64).unwrap_or(1);
        if !matches!(dist, 1 | 2 | 4) {
            return Err(format!("imagecodecs_floatpred with dist {dist} (1, 2 or 4 are decoded)"));
        }
        // imagecodecs views the chunk with the configuration's shape (tifffile squeezes it).
        let shape: Vec<u64> = match get("shape").and_then(Value::as_array) {
            Some(dims) => dims.iter().filter_map(Value::as_u64).collect(),
            None => chunk_shape.to_vec(),
        };
        if elements(&shape).is_none() || elements(&shape) != elements(chunk_shape) {
            return Err(format!("imagecodecs_floatpred of shape {shape:?} over chunks of {chunk_shape:?}"));
        }
        let (ndim, axis) = (shape.len() as i64, get("axis").and_then(Value::as_i64).unwrap_or(-1));
        let resolved = if axis < 0 { ndim + axis } else { axis };
        // The predicted axis is the last (one sample a pixel) or the one before it (chunky samples).
        if !(ndim - 2..ndim).contains(&resolved) || resolved < 0 {
            return Err(format!("imagecodecs_floatpred along axis {axis} of a {ndim}-d chunk"));
        }
        let from = resolved as usize;
        let samples = if from + 2 == shape.len() { shape[from + 1] } else { 1 };
        let row = elements(&shape[from..]).and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        let stride = samples.checked_mul(dist).and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        if row == 0 || stride == 0 || !row.is_multiple_of(stride) {
            return Err(format!("imagecodecs_floatpred of rows of {row} values, {stride} bytes apart"));
        }
        Ok(Self { size, row, stride, stored_big_endian })
    }

    /// Undoes the predictor in `raw`, the chunk's values in C order as zarrs decoded them
    /// (native byte order): row by row, with one row's bytes held beside it.
    pub fn undo(&self, raw: &mut [u8]) {
        let (size, n) = (self.size, self.row);
        let swapped = self.stored_big_endian != cfg!(target_endian = "big");
        let mut stored = vec![0u8; n * size];
        for row in raw.chunks_exact_mut(n * size) {
            // The row's bytes as the file stored them.
            stored.copy_from_slice(row);
            if swapped {
                stored.chunks_exact_mut(size).for_each(<[u8]>::reverse);
            }
            for i in self.stride..stored.len() {
                stored[i] = stored[i].wrapping_add(stored[i - self.stride]);
            }
            // Byte plane k holds every value's k-th most significant byte.
            for (i, value) in row.chunks_exact_mut(size).enumerate() {
                for (k, byte) in value.iter_mut().enumerate() {
                    let significance = if cfg!(target_endian = "big") { k } else { size - 1 - k };
                    *byte = stored[significance * n + i];
                }
            }
        }
    }
}

/// Values in an array of `shape`, if they can be counted.
fn elements(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Tiles written by tifffile 2026.3.3 (`imwrite(..., predictor=3, compression="zlib")`,
    /// inflated), the same bytes for `byteorder="<"` and `">"`.
    const F4: &str = "3f817a8650737d0012ee006f44073500641c00e11f00c040";
    const F8: &str = "3f8180b80a07f70021df00fb050054ac0044bc002dd300187e03bff76e77c88a923ce3e1883a3e00f808757e0d9cbda7";
    /// An RGB tile of 2 x 3 pixels (`photometric="rgb"`, chunky samples).
    const RGB: &str = "3f40bf01807f08760338ca3fe080009449900c37f0000000245300dcad00000000009c003d3e000100800101c08d0dc0cd8000674d00ccb300cd000067cd00cd3400cd000066cd00";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The chunk as zarrs hands it over: the stored bytes read as values of `size` bytes in the
    /// stored order, in native order.
    fn as_zarrs_decodes(stored: &[u8], size: usize, big_endian: bool) -> Vec<u8> {
        let mut raw = stored.to_vec();
        if big_endian != cfg!(target_endian = "big") {
            raw.chunks_exact_mut(size).for_each(<[u8]>::reverse);
        }
        raw
    }

    fn undone(stored: &str, configuration: Value, shape: &[u64], size: usize, big_endian: bool) -> Vec<u8> {
        let predictor = FloatPred::new(Some(&configuration), shape, size, big_endian).unwrap();
        let mut raw = as_zarrs_decodes(&hex(stored), size, big_endian);
        predictor.undo(&mut raw);
        raw
    }

    #[test]
    fn tifffiles_float32_and_float64_tiles_decode_to_their_values_in_either_byte_order() {
        let f4 = [1.5f32, -2.25, 1e-3, 1024.0, 3.0e7, -0.0];
        let f8 = [1.5f64, -2.25, std::f64::consts::PI, 1e300, -1e-300, 7.0];
        for (big_endian, order) in [(false, "<"), (true, ">")] {
            let config = json!({"axis": -1, "dist": 1, "dtype": format!("{order}f4"), "shape": [2, 3]});
            let raw = undone(F4, config, &[2, 3], 4, big_endian);
            let got: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), f4.map(f32::to_bits), "{order}f4");
            let config = json!({"axis": -1, "dist": 1, "dtype": format!("{order}f8"), "shape": [2, 3]});
            let raw = undone(F8, config, &[2, 3], 8, big_endian);
            let got: Vec<f64> = raw.chunks_exact(8).map(|b| f64::from_ne_bytes(b.try_into().unwrap())).collect();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), f8.map(f64::to_bits), "{order}f8");
        }
    }

    #[test]
    fn chunky_samples_are_differenced_each_from_its_own_sample() {
        let want = [1.0f32, 2.0, -1.0, 3.5, -4.0, 0.25, 5e5, 6e-6, 9.0, 0.1, 0.2, 0.0, 0.3, 0.4, -0.0, 0.5, 0.6, 2.0];
        for (big_endian, order) in [(false, "<"), (true, ">")] {
            // tifffile's chain for chunky samples: axis -2 of (y, x, samples).
            let config = json!({"axis": -2, "dist": 1, "dtype": format!("{order}f4"), "shape": [2, 3, 3]});
            let raw = undone(RGB, config, &[2, 3, 3], 4, big_endian);
            let got: Vec<u32> = raw.chunks_exact(4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())).collect();
            assert_eq!(got, want.map(f32::to_bits), "{order}f4");
        }
    }

    #[test]
    fn configurations_it_cannot_undo_are_refused() {
        let new = |c: Value, size| FloatPred::new(Some(&c), &[2, 3], size, false);
        assert!(new(json!({"dtype": "<f4"}), 4).is_ok());
        assert!(new(json!({"dtype": "<u4"}), 4).is_err(), "integers");
        assert!(new(json!({"dtype": "<f8"}), 4).is_err(), "a dtype that is not the array's");
        assert!(new(json!({"dtype": "<f4", "dist": 3}), 4).is_err());
        assert!(new(json!({"dtype": "<f4", "axis": -3}), 4).is_err());
        assert!(new(json!({"dtype": "<f4", "axis": 0, "shape": [1, 2, 3]}), 4).is_err(), "a 2-d row");
        assert!(new(json!({"dtype": "<f4", "shape": [4, 3]}), 4).is_err(), "not the chunk's size");
        // tifffile squeezes a planar tile of one sample: the rows are the same.
        assert!(FloatPred::new(Some(&json!({"dtype": ">f4", "shape": [2, 3]})), &[1, 2, 3], 4, true).is_ok());
    }
}
