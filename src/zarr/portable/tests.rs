use serde_json::json;

use super::*;

/// A float32 array of chunks (4, 3) with `codecs`.
fn array(codecs: Value) -> Map<String, Value> {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": [10, 3], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "NaN", "codecs": codecs, "dimension_names": ["time", "x"],
        "attributes": {"units": "K"},
    })
    .as_object()
    .cloned()
    .unwrap()
}

/// netCDF4's default: zlib with HDF5's shuffle, as VirtualiZarr's HDFParser writes it.
fn netcdf4() -> Map<String, Value> {
    array(json!([
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 4}},
    ]))
}

fn codec_names(metadata: &Map<String, Value>) -> Vec<String> {
    names(metadata).into_iter().map(str::to_owned).collect()
}

fn values(metadata: &Map<String, Value>, encoded: &[u8]) -> Vec<f32> {
    let decoder = ChunkDecoder::new(metadata, &[4, 3], 1 << 20).unwrap();
    let raw = decoder.decode(encoded).unwrap().into_fixed().unwrap().into_owned();
    raw.chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect()
}

#[test]
fn netcdf4_zlib_and_shuffle_are_served_as_gzip_and_read_back_the_same_values() {
    let source = netcdf4();
    let served = served(&source, &[4, 3], 1).unwrap().unwrap();
    assert_eq!(codec_names(&served), ["bytes", "gzip"]);
    assert_eq!(served["codecs"][1]["configuration"]["level"], 1);
    // Everything but the codecs is the array as stored.
    for key in ["shape", "data_type", "chunk_grid", "fill_value", "dimension_names", "attributes"] {
        assert_eq!(served[key], source[key], "{key}");
    }
    assert!(is_portable(&served));

    let wanted: Vec<f32> = (0..12).map(|i| i as f32 * 1.5 - 3.0).collect();
    let raw: Vec<u8> = wanted.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let encoded = assembled::encode(&source, &[4, 3], raw, 4).unwrap();
    let out = transcode(&source, &served, &[4, 3], &encoded, 1 << 20, 1).unwrap();
    assert_eq!(values(&served, &out.bytes), wanted);
    // And the served chunk is what a reader of gzip alone decodes: a gzip stream.
    assert_eq!(&out.bytes[..2], &[0x1f, 0x8b]);
}

#[test]
fn portable_arrays_are_served_as_they_are() {
    for codecs in [
        json!([{"name": "bytes", "configuration": {"endian": "little"}}]),
        json!([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 5}}]),
        json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}, {"name": "zstd",
            "configuration": {"level": 3, "checksum": false}}, {"name": "crc32c"}]),
    ] {
        assert_eq!(served(&array(codecs.clone()), &[4, 3], 1), Ok(None), "{codecs}");
    }
}

#[test]
fn a_chain_keeps_its_portable_compressor_and_compresses_only_if_it_did() {
    let shuffle_zstd = array(json!([
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "zstd", "configuration": {"level": 7, "checksum": false}},
    ]));
    let served_zstd = served(&shuffle_zstd, &[4, 3], 1).unwrap().unwrap();
    assert_eq!(codec_names(&served_zstd), ["bytes", "zstd"]);
    assert_eq!(served_zstd["codecs"][1]["configuration"]["level"], 7);

    let checksummed = array(json!([
        {"name": "bytes", "configuration": {"endian": "big"}},
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.fletcher32"},
    ]));
    let plain = served(&checksummed, &[4, 3], 1).unwrap().unwrap();
    assert_eq!(codec_names(&plain), ["bytes"]);
    // The byte order is the file's: any is portable.
    assert_eq!(plain["codecs"][0]["configuration"]["endian"], "big");
}

#[test]
fn arrays_that_cannot_be_transcoded_say_why() {
    let strings = json!({
        "zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": "", "codecs": [{"name": "vlen-utf8"}, {"name": "numcodecs.zlib", "configuration": {"level": 1}}],
    });
    let why = served(strings.as_object().unwrap(), &[2], 1).unwrap_err();
    assert!(why.contains("variable length"), "{why}");

    // JPEG is decoded to 8-bit samples only (a float32 array of them is not a TIFF's).
    let jpeg = array(json!([{"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.imagecodecs_jpeg"}]));
    let why = served(&jpeg, &[4, 3], 1).unwrap_err();
    assert!(why.contains("wider than 8 bits"), "{why}");
    // A codec neither zarrs nor zarrgate decodes.
    let lerc = array(json!([{"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.imagecodecs_lerc"}]));
    let why = served(&lerc, &[4, 3], 1).unwrap_err();
    assert!(why.contains("numcodecs.imagecodecs_lerc"), "{why}");
}

#[test]
fn a_tiff_jpeg_tile_is_transcoded_to_its_samples() {
    let source = json!({
        "zarr_format": 3, "node_type": "array", "shape": [16, 16], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 16]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}, {"name": "numcodecs.imagecodecs_jpeg", "configuration": {}}],
    });
    let source = source.as_object().unwrap().clone();
    let served = served(&source, &[16, 16], 1).unwrap().unwrap();
    assert_eq!(codec_names(&served), ["bytes", "gzip"]);
    let tile = crate::zarr::imagecodecs::jpeg::tifffile_grey_tile();
    let out = transcode(&source, &served, &[16, 16], &tile, 1 << 20, 1).unwrap();
    let decoder = ChunkDecoder::new(&served, &[16, 16], 1 << 20).unwrap();
    let back = decoder.decode(&out.bytes).unwrap().into_fixed().unwrap().into_owned();
    assert_eq!(back, crate::zarr::imagecodecs::jpeg::decode(&tile, 256).unwrap());
    // The same tile in an array of 8 x 8 chunks declares four times what a chunk takes.
    let small = ChunkDecoder::new(&source, &[8, 8], 1 << 20).unwrap();
    assert!(matches!(small.decode(&tile), Err(crate::zarr::decode::DecodeError::TooLarge { bound: 64, .. })));
}

#[test]
fn a_chunk_that_is_not_what_its_codecs_say_is_refused_not_served() {
    let (source, chunk) = (netcdf4(), [4u64, 3]);
    let served = served(&source, &chunk, 1).unwrap().unwrap();
    assert!(matches!(transcode(&source, &served, &chunk, b"not zlib", 1 << 20, 1), Err(AssembleError::Codec(_))));
    // A chunk that inflates past its decoded size is a bomb: refused within the bound.
    let raw = vec![0u8; 48];
    let encoded = assembled::encode(&source, &chunk, raw, 4).unwrap();
    assert!(transcode(&source, &served, &chunk, &encoded, 47, 1).is_err());
}

#[test]
fn a_tiff_tile_of_lzw_and_the_horizontal_predictor_is_transcoded_to_its_values() {
    // uint16 (4, 3) tiles as tifffile writes them: predictor 2, then LZW.
    let source = json!({
        "zarr_format": 3, "node_type": "array", "shape": [4, 3], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "dimension_names": ["y", "x"],
        "codecs": [
            {"name": "numcodecs.imagecodecs_delta", "configuration": {"axis": -1, "dist": 1, "shape": [4, 3], "dtype": "<u2"}},
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "numcodecs.imagecodecs_lzw", "configuration": {}},
        ],
    });
    let source = source.as_object().unwrap().clone();
    let served = served(&source, &[4, 3], 1).unwrap().unwrap();
    assert_eq!(codec_names(&served), ["bytes", "gzip"]);
    let values: Vec<u16> = (0..12).map(|i| 1000 + i * 37 - (i % 3) * 500).collect();
    let mut predicted = values.clone();
    for row in predicted.chunks_exact_mut(3) {
        for x in (1..3).rev() {
            row[x] = row[x].wrapping_sub(row[x - 1]);
        }
    }
    let raw: Vec<u8> = predicted.iter().flat_map(|v| v.to_le_bytes()).collect();
    let encoded = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8).encode(&raw).unwrap();
    let out = transcode(&source, &served, &[4, 3], &encoded, 1 << 20, 1).unwrap();
    let decoder = ChunkDecoder::new(&served, &[4, 3], 1 << 20).unwrap();
    let back = decoder.decode(&out.bytes).unwrap().into_fixed().unwrap().into_owned();
    let back: Vec<u16> = back.chunks_exact(2).map(|b| u16::from_ne_bytes([b[0], b[1]])).collect();
    assert_eq!(back, values);
}

#[test]
fn a_tiff_tile_of_deflate_and_the_floating_point_predictor_is_transcoded_to_its_values() {
    // A float32 (2, 3) tile as tifffile writes it with predictor 3 (the same bytes in a
    // little- and a big-endian file), then deflate.
    let predicted = [
        0x3F, 0x81, 0x7A, 0x86, 0x50, 0x73, 0x7D, 0x00, 0x12, 0xEE, 0x00, 0x6F, 0x44, 0x07, 0x35, 0x00, 0x64, 0x1C,
        0x00, 0xE1, 0x1F, 0x00, 0xC0, 0x40,
    ];
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut zlib, &predicted).unwrap();
    let encoded = zlib.finish().unwrap();
    for endian in ["little", "big"] {
        let order = if endian == "big" { ">" } else { "<" };
        let source = json!({
            "zarr_format": 3, "node_type": "array", "shape": [2, 3], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0,
            "codecs": [
                {"name": "numcodecs.imagecodecs_floatpred", "configuration": {"axis": -1, "dist": 1, "shape": [2, 3], "dtype": format!("{order}f4")}},
                {"name": "bytes", "configuration": {"endian": endian}},
                {"name": "numcodecs.zlib", "configuration": {"level": 6}},
            ],
        });
        let source = source.as_object().unwrap().clone();
        let served = served(&source, &[2, 3], 1).unwrap().unwrap();
        assert_eq!(codec_names(&served), ["bytes", "gzip"]);
        let out = transcode(&source, &served, &[2, 3], &encoded, 1 << 20, 1).unwrap();
        let decoder = ChunkDecoder::new(&served, &[2, 3], 1 << 20).unwrap();
        let back = decoder.decode(&out.bytes).unwrap().into_fixed().unwrap().into_owned();
        let back: Vec<f32> = back.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(back, [1.5, -2.25, 1e-3, 1024.0, 3.0e7, -0.0], "{endian}");
        // A tile that inflates past the chunk is refused within the bound.
        assert!(transcode(&source, &served, &[2, 3], &encoded, 23, 1).is_err());
    }
}
