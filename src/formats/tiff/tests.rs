//! The TIFF parser on files written here, byte by byte (classic and BigTIFF, both byte
//! orders): what a reader of the store sees (shapes, chunks, codecs, attributes, the
//! hierarchy) and what is left out with a warning. Hostile files: `hostile_tests.rs`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::parse;
use crate::formats::{Chunk, FormatError, Limits, Parsed, Parser};

/// A tag's values, by TIFF field type.
pub(super) enum V {
    Short(Vec<u16>),
    Long(Vec<u32>),
    Long8(Vec<u64>),
    Double(Vec<f64>),
    Ascii(&'static str),
}

/// Writes TIFF files: data blobs where they are put, IFDs chained in the order written.
pub(super) struct Writer {
    big_endian: bool,
    bigtiff: bool,
    pub(super) bytes: Vec<u8>,
    /// Where the last IFD's next-IFD offset is, to link the next one.
    pub(super) next_at: usize,
}

impl Writer {
    pub(super) fn new(big_endian: bool, bigtiff: bool) -> Self {
        let mut w = Self { big_endian, bigtiff, bytes: Vec::new(), next_at: 4 };
        w.bytes.extend_from_slice(if big_endian { b"MM" } else { b"II" });
        if bigtiff {
            w.put(43, 2);
            w.put(8, 2);
            w.put(0, 2);
            w.next_at = 8;
            w.put(0, 8);
        } else {
            w.put(42, 2);
            w.put(0, 4);
        }
        w
    }

    fn put(&mut self, value: u64, size: usize) {
        let be = value.to_be_bytes();
        let le = value.to_le_bytes();
        if self.big_endian {
            self.bytes.extend_from_slice(&be[8 - size..]);
        } else {
            self.bytes.extend_from_slice(&le[..size]);
        }
    }

    pub(super) fn patch(&mut self, at: usize, value: u64) {
        let size = if self.bigtiff { 8 } else { 4 };
        let saved = std::mem::take(&mut self.bytes);
        self.put(value, size);
        let field = std::mem::replace(&mut self.bytes, saved);
        self.bytes[at..at + size].copy_from_slice(&field);
    }

    /// Appends `data`; its offset.
    pub(super) fn blob(&mut self, data: &[u8]) -> u64 {
        let at = self.bytes.len() as u64;
        self.bytes.extend_from_slice(data);
        at
    }

    /// Appends an IFD of `entries` (sorted by tag), linked from the one before; its offset.
    pub(super) fn ifd(&mut self, mut entries: Vec<(u16, V)>) -> u64 {
        entries.sort_by_key(|(tag, _)| *tag);
        if self.bytes.len() % 2 == 1 {
            self.bytes.push(0);
        }
        let start = self.bytes.len() as u64;
        let (count_size, entry_size, field) = if self.bigtiff { (8, 20, 8) } else { (2, 12, 4) };
        let mut values_at = start as usize + count_size + entries.len() * entry_size + field;
        self.patch(self.next_at, start);
        self.put(entries.len() as u64, count_size);
        let mut out_of_line = Vec::new();
        for (tag, value) in &entries {
            let mut raw = Writer { big_endian: self.big_endian, bigtiff: self.bigtiff, bytes: Vec::new(), next_at: 0 };
            let (kind, count) = match value {
                V::Short(v) => (3, v.iter().map(|x| raw.put(u64::from(*x), 2)).count()),
                V::Long(v) => (4, v.iter().map(|x| raw.put(u64::from(*x), 4)).count()),
                V::Long8(v) => (16, v.iter().map(|x| raw.put(*x, 8)).count()),
                V::Double(v) => (12, v.iter().map(|x| raw.put(x.to_bits(), 8)).count()),
                V::Ascii(s) => {
                    raw.bytes.extend_from_slice(s.as_bytes());
                    raw.bytes.push(0);
                    (2, s.len() + 1)
                }
            };
            self.put(u64::from(*tag), 2);
            self.put(kind, 2);
            self.put(count as u64, field);
            if raw.bytes.len() <= field {
                raw.bytes.resize(field, 0);
                self.bytes.extend_from_slice(&raw.bytes);
            } else {
                self.put(values_at as u64, field);
                values_at += raw.bytes.len();
                out_of_line.extend_from_slice(&raw.bytes);
            }
        }
        self.next_at = self.bytes.len();
        self.put(0, field);
        self.bytes.extend_from_slice(&out_of_line);
        start
    }

    pub(super) fn finish(self) -> Bytes {
        Bytes::from(self.bytes)
    }
}

/// A 40 x 30 uint16 image in 16 x 16 tiles (3 x 2 of them), deflated (made-up bytes: the
/// parser never reads tile data).
pub(super) fn tiled(w: &mut Writer, extra: Vec<(u16, V)>) -> Vec<u64> {
    let offsets: Vec<u64> = (0..6).map(|i| w.blob(&vec![i as u8; 10 + i])).collect();
    let mut entries = vec![
        (256, V::Long(vec![40])),
        (257, V::Long(vec![30])),
        (258, V::Short(vec![16])),
        (259, V::Short(vec![8])),
        (322, V::Short(vec![16])),
        (323, V::Short(vec![16])),
        (324, V::Long(offsets.iter().map(|o| *o as u32).collect())),
        (325, V::Long((0..6).map(|i| 10 + i).collect())),
    ];
    entries.retain(|(tag, _)| !extra.iter().any(|(t, _)| t == tag));
    entries.extend(extra);
    w.ifd(entries);
    offsets
}

fn ok(file: &Bytes) -> Parsed {
    parse(file, &Limits::default()).unwrap()
}

fn meta<'a>(parsed: &'a Parsed, path: &str) -> &'a serde_json::Map<String, Value> {
    &parsed.nodes[path].metadata
}

pub(super) fn invalid(file: Bytes) -> String {
    match parse(&file, &Limits::default()) {
        Err(FormatError::Invalid(message)) => message,
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[test]
fn a_tiled_image_is_one_array_of_its_tiles_in_every_byte_order_and_offset_size() {
    for (big_endian, bigtiff) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut w = Writer::new(big_endian, bigtiff);
        let offsets = tiled(&mut w, vec![]);
        let file = w.finish();
        assert_eq!(Parser::detect(&file[..8]), Some(Parser::Tiff));
        let parsed = ok(&file);
        assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "0"]);
        let array = meta(&parsed, "0");
        assert_eq!(array["shape"], json!([30, 40]));
        assert_eq!(array["chunk_grid"]["configuration"]["chunk_shape"], json!([16, 16]));
        assert_eq!(array["data_type"], "uint16");
        assert_eq!(array["dimension_names"], json!(["y", "x"]));
        let endian = if big_endian { "big" } else { "little" };
        assert_eq!(
            array["codecs"],
            json!([{"name": "bytes", "configuration": {"endian": endian}},
                   {"name": "numcodecs.zlib", "configuration": {"level": 6}}])
        );
        let chunks = &parsed.nodes["0"].chunks;
        assert_eq!(chunks.len(), 6);
        assert_eq!(chunks[4], (vec![1, 1], Chunk::Range { offset: offsets[4], length: 14 }));
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    }
}

#[test]
fn strips_are_chunks_only_when_they_divide_the_image() {
    let strips = |rows: u32, height: u32| {
        let mut w = Writer::new(false, false);
        let count = height.div_ceil(rows);
        let offsets: Vec<u32> = (0..count).map(|_| w.blob(&[0; 8]) as u32).collect();
        w.ifd(vec![
            (256, V::Long(vec![8])),
            (257, V::Long(vec![height])),
            (258, V::Short(vec![8])),
            (259, V::Short(vec![5])),
            (273, V::Long(offsets)),
            (278, V::Long(vec![rows])),
            (279, V::Long(vec![8; count as usize])),
            (317, V::Short(vec![2])),
        ]);
        w.finish()
    };
    let parsed = ok(&strips(4, 12));
    let array = meta(&parsed, "0");
    assert_eq!(array["chunk_grid"]["configuration"]["chunk_shape"], json!([4, 8]));
    assert_eq!(
        array["codecs"],
        json!([{"name": "numcodecs.imagecodecs_delta",
                "configuration": {"axis": -1, "dist": 1, "shape": [4, 8], "dtype": "|u1"}},
               {"name": "bytes"},
               {"name": "numcodecs.imagecodecs_lzw", "configuration": {}}])
    );
    assert_eq!(parsed.nodes["0"].chunks.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), [[0, 0], [1, 0], [2, 0]]);
    // one strip taller than the image is the whole image
    assert_eq!(meta(&ok(&strips(100, 12)), "0")["chunk_grid"]["configuration"]["chunk_shape"], json!([12, 8]));
    // a short last strip: left out, and a file with nothing else is a 422 saying why
    let message = invalid(strips(5, 12));
    assert!(message.contains("last strip is shorter"), "{message}");
}

#[test]
fn chunky_samples_are_the_last_dimension_and_planar_samples_the_first() {
    let rgb = |planar: u16| {
        let mut w = Writer::new(false, false);
        let tiles = if planar == 2 { 3 } else { 1 };
        let offsets: Vec<u32> = (0..tiles).map(|_| w.blob(&[1; 5]) as u32).collect();
        w.ifd(vec![
            (256, V::Long(vec![20])),
            (257, V::Long(vec![10])),
            (258, V::Short(vec![32, 32, 32])),
            (259, V::Short(vec![50000])),
            (277, V::Short(vec![3])),
            (284, V::Short(vec![planar])),
            (317, V::Short(vec![3])),
            (322, V::Short(vec![32])),
            (323, V::Short(vec![16])),
            (324, V::Long(offsets)),
            (325, V::Long(vec![5; tiles])),
            (339, V::Short(vec![3, 3, 3])),
        ]);
        w.finish()
    };
    let chunky = ok(&rgb(1));
    let array = meta(&chunky, "0");
    assert_eq!(array["shape"], json!([10, 20, 3]));
    assert_eq!(array["chunk_grid"]["configuration"]["chunk_shape"], json!([16, 32, 3]));
    assert_eq!(array["dimension_names"], json!(["y", "x", "band"]));
    assert_eq!(array["data_type"], "float32");
    assert_eq!(array["codecs"][0]["configuration"]["axis"], -2);
    assert_eq!(array["codecs"][0]["configuration"]["shape"], json!([16, 32, 3]));
    assert_eq!(array["codecs"][2], json!({"name": "zstd", "configuration": {"level": 0, "checksum": false}}));
    assert_eq!(chunky.nodes["0"].chunks[0].0, [0, 0, 0]);

    let planar = ok(&rgb(2));
    let array = meta(&planar, "0");
    assert_eq!(array["shape"], json!([3, 10, 20]));
    assert_eq!(array["chunk_grid"]["configuration"]["chunk_shape"], json!([1, 16, 32]));
    assert_eq!(array["dimension_names"], json!(["band", "y", "x"]));
    assert_eq!(array["codecs"][0]["configuration"]["axis"], -1);
    let keys: Vec<Vec<u64>> = planar.nodes["0"].chunks.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, [[0, 0, 0], [1, 0, 0], [2, 0, 0]]);
}

/// GeoKeys of WGS 84 / UTM 33N, 10 m pixels, top left corner at (500000, 4000000).
pub(super) fn utm() -> Vec<(u16, V)> {
    vec![
        (33550, V::Double(vec![10.0, 10.0, 0.0])),
        (33922, V::Double(vec![0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0])),
        (34735, V::Short(vec![1, 1, 0, 4, 1024, 0, 1, 1, 1025, 0, 1, 1, 1026, 34737, 7, 0, 3072, 0, 1, 32633])),
        (34737, V::Ascii("UTM 33|")),
    ]
}

#[test]
fn geokeys_transform_crs_and_nodata_are_attributes_xarray_and_rioxarray_read() {
    let mut w = Writer::new(true, false);
    let mut extra = utm();
    extra.push((42113, V::Ascii("-9999")));
    extra.push((339, V::Short(vec![2])));
    tiled(&mut w, extra);
    let parsed = ok(&w.finish());
    assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "0", "spatial_ref", "x", "y"]);
    let array = meta(&parsed, "0");
    let attrs = &array["attributes"];
    assert_eq!(attrs["ProjectedCSTypeGeoKey"], 32633);
    assert_eq!(attrs["GTCitationGeoKey"], "UTM 33");
    assert_eq!(attrs["ModelTiepoint"], json!([0.0, 0.0, 0.0, 500000.0, 4000000.0, 0.0]));
    assert_eq!(attrs["transform"], json!([10.0, 0.0, 500000.0, 0.0, -10.0, 4000000.0]));
    assert_eq!(attrs["grid_mapping"], "spatial_ref");
    assert_eq!(attrs["coordinates"], "spatial_ref");
    assert_eq!(array["data_type"], "int16");
    assert_eq!(attrs["_FillValue"], -9999);
    assert_eq!(array["fill_value"], -9999);
    let crs = &meta(&parsed, "spatial_ref")["attributes"];
    assert_eq!(crs["spatial_ref"], "EPSG:32633");
    assert_eq!(crs["GeoTransform"], "500000 10 0 4000000 0 -10");
    assert_eq!(meta(&parsed, "spatial_ref")["shape"], json!([]));
    // pixel centres, as rioxarray's open_rasterio gives them
    let centres = |path: &str| match &parsed.nodes[path].chunks[..] {
        [(index, Chunk::Inline(bytes))] if index == &[0] => {
            bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect::<Vec<f64>>()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(centres("x")[..2], [500005.0, 500015.0]);
    assert_eq!(centres("y").len(), 30);
    assert_eq!(centres("y")[29], 4000000.0 - 295.0);
    assert_eq!(meta(&parsed, "x")["dimension_names"], json!(["x"]));
    assert_eq!(meta(&parsed, "y")["attributes"]["standard_name"], "projection_y_coordinate");
}

#[test]
fn a_float_nodata_is_encoded_as_xarray_decodes_it_and_one_that_does_not_fit_is_left_out() {
    let file = |nodata: &'static str, format: u16, bits: u16| {
        let mut w = Writer::new(false, false);
        tiled(&mut w, vec![(42113, V::Ascii(nodata)), (339, V::Short(vec![format])), (258, V::Short(vec![bits]))]);
        w.finish()
    };
    let parsed = ok(&file("nan", 3, 32));
    assert_eq!(meta(&parsed, "0")["fill_value"], "NaN");
    assert_eq!(meta(&parsed, "0")["attributes"]["_FillValue"], "AAAAAAAA+H8=");
    let parsed = ok(&file("-1", 1, 8));
    assert!(meta(&parsed, "0")["attributes"].get("_FillValue").is_none());
    assert_eq!(meta(&parsed, "0")["fill_value"], 0);
    assert!(parsed.warnings[0].contains("GDAL_NODATA -1 does not fit its uint8 values"), "{:?}", parsed.warnings);
}

#[test]
fn a_cog_is_a_multiscales_group_of_sibling_levels() {
    let mut w = Writer::new(false, true);
    let mut extra = utm();
    extra.push((42113, V::Ascii("0")));
    tiled(&mut w, extra);
    // the overview: 20 x 15 in one 16 x 16 tile... made 2 x 1 tiles
    let offsets = [w.blob(&[1; 4]), w.blob(&[2; 4])];
    w.ifd(vec![
        (254, V::Long(vec![1])),
        (256, V::Long(vec![20])),
        (257, V::Long(vec![15])),
        (258, V::Short(vec![16])),
        (259, V::Short(vec![8])),
        (322, V::Short(vec![16])),
        (323, V::Short(vec![16])),
        (324, V::Long8(offsets.to_vec())),
        (325, V::Long8(vec![4, 4])),
    ]);
    // a mask: left out
    w.ifd(vec![(254, V::Long(vec![4])), (256, V::Long(vec![40])), (257, V::Long(vec![30]))]);
    let parsed = ok(&w.finish());
    let paths: Vec<&String> = parsed.nodes.keys().collect();
    assert_eq!(paths, ["", "0", "0/0", "0/spatial_ref", "0/x", "0/y", "1", "1/0", "1/spatial_ref", "1/x", "1/y"]);
    assert_eq!(meta(&parsed, "1/x")["shape"], json!([20]));
    assert_eq!(
        meta(&parsed, "")["attributes"]["multiscales"],
        json!({"layout": [
            {"asset": "0", "transform": {"scale": [1.0, 1.0]}},
            {"asset": "1", "derived_from": "0", "transform": {"scale": [2.0, 2.0]}},
        ]})
    );
    assert_eq!(meta(&parsed, "")["attributes"]["zarr_conventions"][0]["name"], "multiscales");
    let overview = meta(&parsed, "1/0");
    assert_eq!(overview["shape"], json!([15, 20]));
    assert_eq!(overview["attributes"]["transform"], json!([20.0, 0.0, 500000.0, 0.0, -20.0, 4000000.0]));
    assert_eq!(overview["attributes"]["_FillValue"], 0);
    assert_eq!(meta(&parsed, "1/spatial_ref")["attributes"]["GeoTransform"], "500000 20 0 4000000 0 -20");
    assert_eq!(parsed.warnings.len(), 1);
    assert!(parsed.warnings[0].contains("image 2") && parsed.warnings[0].contains("transparency mask"));
}

#[test]
fn what_cannot_be_virtualized_is_left_out_with_a_warning() {
    let mut w = Writer::new(false, false);
    tiled(&mut w, vec![]);
    tiled(&mut w, vec![(259, V::Short(vec![7])), (347, V::Short(vec![0xFFD8, 0xFFD9]))]);
    tiled(&mut w, vec![(262, V::Short(vec![6]))]);
    tiled(&mut w, vec![(259, V::Short(vec![6]))]);
    tiled(&mut w, vec![(258, V::Short(vec![1]))]);
    tiled(&mut w, vec![(259, V::Short(vec![34887]))]);
    tiled(&mut w, vec![(339, V::Short(vec![3])), (258, V::Short(vec![32])), (317, V::Short(vec![2]))]);
    let parsed = ok(&w.finish());
    assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "0"]);
    let expected = [
        "JPEGTables",
        "YCbCr",
        "old-style JPEG",
        "not all one 8, 16, 32 or 64-bit",
        "34887 (LERC)",
        "horizontal predictor on floats",
    ];
    assert_eq!(parsed.warnings.len(), expected.len(), "{:?}", parsed.warnings);
    for (index, (warning, words)) in parsed.warnings.iter().zip(expected).enumerate() {
        assert!(warning.starts_with(&format!("image {}", index + 1)), "{warning}");
        assert!(warning.contains(words), "{warning} should say {words}");
    }
}

#[test]
fn several_pages_are_sibling_arrays_named_by_their_index() {
    let mut w = Writer::new(false, false);
    for _ in 0..3 {
        tiled(&mut w, vec![]);
    }
    let parsed = ok(&w.finish());
    assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "0", "1", "2"]);
    assert!(!meta(&parsed, "").contains_key("multiscales"));
}

#[test]
fn files_tifffile_wrote_parse_as_expected() {
    let seed = |name: &str| {
        let path = format!("{}/fuzz/seeds/tiff/{name}", env!("CARGO_MANIFEST_DIR"));
        ok(&Bytes::from(std::fs::read(path).unwrap()))
    };
    let geotiff = seed("tiled_deflate.tif");
    assert_eq!(geotiff.nodes.keys().collect::<Vec<_>>(), ["", "0", "spatial_ref", "x", "y"]);
    assert_eq!(meta(&geotiff, "spatial_ref")["attributes"]["spatial_ref"], "EPSG:4326");
    assert_eq!(meta(&geotiff, "x")["attributes"]["standard_name"], "longitude");
    let planar = seed("bigtiff_be_planar.tif");
    assert_eq!(meta(&planar, "0")["shape"], json!([3, 30, 40]));
    assert_eq!(meta(&planar, "0")["data_type"], "uint16");
    assert_eq!(meta(&planar, "0")["codecs"][0]["configuration"]["dtype"], ">u2");
    assert_eq!(planar.nodes["0"].chunks.len(), 9);
    let pyramid = seed("pages_overview.tif");
    assert_eq!(pyramid.nodes.keys().collect::<Vec<_>>(), ["", "0", "0/0", "1", "1/0"]);
    assert_eq!(meta(&pyramid, "1/0")["shape"], json!([15, 20]));
}
