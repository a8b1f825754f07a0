//! A TIFF image's Compression and Predictor as a Zarr v3 codec chain. The names are those
//! virtual-tiff and kerchunk's `tiff_to_zarr` (through tifffile) give them, spelled as the
//! README's zarr-python 3 recipe registers numcodecs codecs (`numcodecs.<id>`): deflate is
//! `numcodecs.zlib` and LZMA `numcodecs.lzma` (stock zarr-python reads both); LZW, PackBits and
//! JPEG are imagecodecs' (`numcodecs.imagecodecs_lzw`...); the predictors are imagecodecs'
//! `delta` and `floatpred` with the chunk's shape and dtype, as tifffile writes them. Zstandard
//! is the core `zstd` codec, which stock zarr-python and zarrs both read (virtual-tiff's
//! `imagecodecs_zstd` only worked around numcodecs releases that could not decompress frames
//! without a content size, as libtiff writes them).

use serde_json::{Value, json};

/// What the codecs need to know of an image.
pub struct Layout<'a> {
    pub compression: u64,
    pub predictor: u64,
    /// The Zarr v3 data type (`uint16`, `float32`...).
    pub data_type: &'a str,
    pub big_endian: bool,
    /// The chunk's shape, samples included.
    pub chunk_shape: &'a [u64],
    /// Samples interleaved in each pixel (chunky, more than one): the last dimension.
    pub chunky_samples: bool,
    /// The IFD has JPEGTables (JPEG tiles that are not whole JPEG streams).
    pub jpeg_tables: bool,
}

/// The codecs of an image, or why it cannot be served (the end of "image N is left out: ...").
pub fn chain(layout: &Layout) -> Result<Vec<Value>, String> {
    let mut codecs = Vec::new();
    if let Some(predictor) = predictor(layout)? {
        codecs.push(predictor);
    }
    let size = element_size(layout.data_type);
    codecs.push(if size == 1 {
        json!({"name": "bytes"})
    } else {
        json!({"name": "bytes", "configuration": {"endian": if layout.big_endian { "big" } else { "little" }}})
    });
    if let Some(compressor) = compressor(layout)? {
        codecs.push(compressor);
    }
    Ok(codecs)
}

fn compressor(layout: &Layout) -> Result<Option<Value>, String> {
    Ok(Some(match layout.compression {
        1 => return Ok(None),
        8 | 32946 => json!({"name": "numcodecs.zlib", "configuration": {"level": 6}}),
        5 => json!({"name": "numcodecs.imagecodecs_lzw", "configuration": {}}),
        50000 => json!({"name": "zstd", "configuration": {"level": 0, "checksum": false}}),
        34925 => json!({"name": "numcodecs.lzma", "configuration": {}}),
        32773 => json!({"name": "numcodecs.imagecodecs_packbits", "configuration": {}}),
        7 if layout.jpeg_tables => {
            return Err(
                "its JPEG tiles share JPEGTables, which no Zarr codec is given (a tile alone is no JPEG)".into()
            );
        }
        7 => json!({"name": "numcodecs.imagecodecs_jpeg", "configuration": {}}),
        6 => return Err("it is old-style JPEG (Compression 6), which no Zarr codec decodes".into()),
        other => {
            return Err(format!("its compression {other} ({}) is not one zarrgate maps to a Zarr codec", name(other)));
        }
    }))
}

/// What a TIFF compression code is, to name it in a warning.
fn name(compression: u64) -> &'static str {
    match compression {
        2 => "CCITT RLE",
        3 | 4 => "CCITT fax",
        33003 | 33004 | 33005 | 34712 => "JPEG 2000",
        34887 => "LERC",
        34892 => "lossy JPEG",
        34933 => "PNG",
        22610 | 34934 => "JPEG XR",
        50001 => "WebP",
        50002 | 52546 => "JPEG XL",
        _ => "unknown",
    }
}

fn predictor(layout: &Layout) -> Result<Option<Value>, String> {
    let float = layout.data_type.starts_with("float");
    let id = match layout.predictor {
        1 => return Ok(None),
        2 if float => return Err("it uses the horizontal predictor on floats, which no Zarr codec undoes".into()),
        2 => "numcodecs.imagecodecs_delta",
        3 if !float => return Err("it uses the floating-point predictor on integers".into()),
        3 => "numcodecs.imagecodecs_floatpred",
        other => return Err(format!("its predictor {other} is not one zarrgate maps to a Zarr codec")),
    };
    let dtype = numpy_dtype(layout.data_type, layout.big_endian);
    let axis = if layout.chunky_samples { -2 } else { -1 };
    Ok(Some(json!({"name": id, "configuration": {
        "axis": axis, "dist": 1, "shape": layout.chunk_shape, "dtype": dtype,
    }})))
}

/// numpy's name of a Zarr data type in the file's byte order (`<u2`, `>f4`, `|u1`).
fn numpy_dtype(data_type: &str, big_endian: bool) -> String {
    let size = element_size(data_type);
    let kind = &data_type[..1];
    let order = if size == 1 {
        "|"
    } else if big_endian {
        ">"
    } else {
        "<"
    };
    format!("{order}{kind}{size}")
}

/// Bytes of one element of a Zarr numeric data type.
pub fn element_size(data_type: &str) -> u64 {
    data_type.trim_start_matches(|c: char| c.is_ascii_alphabetic()).parse::<u64>().map_or(1, |bits| bits / 8)
}
