use super::*;
use proptest::prelude::*;
use std::io::Write;
use zarrs::array::ArrayToBytesCodecTraits;

fn metadata(data_type: &str, chunk: &[u64], codecs: Value) -> Map<String, Value> {
    json!({"zarr_format": 3, "node_type": "array", "shape": chunk, "data_type": data_type,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs})
    .as_object()
    .unwrap()
    .clone()
}

fn bytes_then(codecs: &[Value]) -> Value {
    let mut all = vec![json!({"name": "bytes", "configuration": {"endian": "little"}})];
    all.extend_from_slice(codecs);
    Value::Array(all)
}

/// Encodes `raw` through the array's own codecs, as zarrs writes them.
fn encode(m: &Map<String, Value>, chunk: &[u64], raw: &[u8]) -> Vec<u8> {
    let codecs = m["codecs"].as_array().unwrap();
    let chain = super::chain(codecs).unwrap();
    let array = crate::zarr::metadata::zarrs_array(m.clone()).unwrap();
    let shape: Vec<NonZeroU64> = chunk.iter().map(|d| NonZeroU64::new(*d).unwrap()).collect();
    let bytes = ArrayBytes::new_flen(raw.to_vec());
    chain.encode(bytes, &shape, array.data_type(), array.fill_value(), &CodecOptions::default()).unwrap().into_owned()
}

fn decode(m: &Map<String, Value>, chunk: &[u64], encoded: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let decoder = ChunkDecoder::new(m, chunk, 1 << 20)?;
    Ok(decoder.decode(encoded)?.into_fixed().unwrap().into_owned())
}

/// The 17 bytes of the report: a zstd frame declaring 2^44 bytes, holding one raw byte.
fn zstd_bomb() -> Vec<u8> {
    let mut b = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
    b.extend_from_slice(&(1u64 << 44).to_le_bytes());
    b.extend_from_slice(&[0x09, 0, 0, 7]);
    assert_eq!(b.len(), 17);
    b
}

/// CRC-32C (Castagnoli), as the shard index's checksum.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    g.write_all(data).unwrap();
    g.finish().unwrap()
}

fn sharded(inner: Value) -> Value {
    json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4], "codecs": inner,
           "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
           "index_location": "end"}}])
}

fn all_chains() -> Vec<(&'static str, Value)> {
    vec![
        ("gzip", bytes_then(&[json!({"name": "gzip", "configuration": {"level": 1}})])),
        ("zlib", bytes_then(&[json!({"name": "numcodecs.zlib", "configuration": {"level": 1}})])),
        ("zstd", bytes_then(&[json!({"name": "zstd", "configuration": {"level": 1, "checksum": true}})])),
        ("bz2", bytes_then(&[json!({"name": "numcodecs.bz2", "configuration": {"level": 1}})])),
        (
            "blosc",
            bytes_then(&[
                json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}),
            ]),
        ),
        (
            "crc32c+zstd",
            bytes_then(&[
                json!({"name": "crc32c"}),
                json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}}),
            ]),
        ),
        (
            "transpose",
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 1}}]),
        ),
        ("sharding", sharded(bytes_then(&[json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})]))),
        ("sharding+gzip", {
            let mut s = sharded(bytes_then(&[json!({"name": "gzip", "configuration": {"level": 1}})]));
            s.as_array_mut().unwrap().push(json!({"name": "gzip", "configuration": {"level": 1}}));
            s
        }),
    ]
}

#[test]
fn every_bounded_codec_gives_back_what_zarrs_wrote() {
    let raw: Vec<u8> = (0..64u32).flat_map(|i| (i * 7 % 13).to_le_bytes()).collect();
    for (what, codecs) in all_chains() {
        let m = metadata("uint32", &[8, 8], codecs);
        let encoded = encode(&m, &[8, 8], &raw);
        assert_eq!(decode(&m, &[8, 8], &encoded).unwrap(), raw, "{what}");
    }
}

#[test]
fn a_zstd_frame_declaring_16_tib_is_refused_before_anything_is_reserved() {
    let m = metadata(
        "float32",
        &[4],
        bytes_then(&[json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})]),
    );
    let err = decode(&m, &[4], &zstd_bomb()).unwrap_err();
    assert_eq!(err, DecodeError::TooLarge { codec: "zstd".into(), bound: 16 });
    assert!(err.to_string().contains("more than the 16 bytes"), "{err}");
    // The same frame inside a shard's inner chunk.
    let m = metadata(
        "uint32",
        &[8, 8],
        sharded(bytes_then(&[json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})])),
    );
    let mut shard = zstd_bomb();
    let mut index: Vec<u8> = (0..4)
        .flat_map(|i| if i == 0 { [0u64, 17] } else { [u64::MAX, u64::MAX] })
        .flat_map(u64::to_le_bytes)
        .collect();
    index.extend_from_slice(&crc32c(&index).to_le_bytes());
    shard.extend_from_slice(&index);
    assert!(matches!(decode(&m, &[8, 8], &shard), Err(DecodeError::TooLarge { bound: 64, .. })));
}

#[test]
fn a_zstd_frame_without_a_declared_size_stops_at_the_bound() {
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    encoder.include_contentsize(false).unwrap();
    encoder.write_all(&vec![0u8; 4 << 20]).unwrap();
    let frame = encoder.finish().unwrap();
    assert!(matches!(zstd::zstd_safe::get_frame_content_size(&frame), Ok(None)));
    let m = metadata(
        "uint8",
        &[1024],
        bytes_then(&[json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})]),
    );
    assert_eq!(decode(&m, &[1024], &frame), Err(DecodeError::TooLarge { codec: "zstd".into(), bound: 1024 }));
}

#[test]
fn a_gzip_bomb_stops_at_the_bound() {
    let bomb = gzip(&vec![0u8; 16 << 20]);
    let m = metadata("uint8", &[4096], bytes_then(&[json!({"name": "gzip", "configuration": {"level": 1}})]));
    assert_eq!(decode(&m, &[4096], &bomb), Err(DecodeError::TooLarge { codec: "gzip".into(), bound: 4096 }));
}

#[test]
fn a_blosc_header_declaring_more_than_the_chunk_is_refused() {
    let codecs = bytes_then(&[
        json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "noshuffle", "typesize": 1, "blocksize": 0}}),
    ]);
    let m = metadata("uint8", &[16], codecs);
    let mut header = vec![2, 1, 0x02, 1];
    header.extend_from_slice(&u32::MAX.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    header.extend_from_slice(&16u32.to_le_bytes());
    assert_eq!(decode(&m, &[16], &header), Err(DecodeError::TooLarge { codec: "blosc".into(), bound: 16 }));
    assert!(matches!(decode(&m, &[16], &[1, 2, 3]), Err(DecodeError::Invalid(e)) if e.contains("blosc header")));
}

#[test]
fn codecs_that_cannot_be_bounded_are_refused() {
    let m = metadata("float32", &[4], json!([{"name": "numcodecs.pcodec"}]));
    let err = ChunkDecoder::new(&m, &[4], 1 << 20).unwrap_err();
    assert_eq!(err, DecodeError::Unbounded { codec: "numcodecs.pcodec".into() });
    assert!(err.to_string().contains("cannot be decoded within a bound"));
    let m = metadata("float32", &[4], bytes_then(&[json!({"name": "numcodecs.lz4"})]));
    assert!(matches!(ChunkDecoder::new(&m, &[4], 1 << 20), Err(DecodeError::Unsupported(_))));
}

#[test]
fn a_tiff_predictor_is_refused_where_it_would_not_be_undone_right() {
    let delta = json!({"name": "numcodecs.imagecodecs_delta", "configuration": {"axis": -1, "dtype": "<u4"}});
    // Inside a shard it works on each inner chunk, which zarrs decodes: not undone, so refused.
    let inner = json!([delta, {"name": "bytes", "configuration": {"endian": "little"}}]);
    let m = metadata("uint32", &[8, 8], sharded(inner));
    assert!(matches!(ChunkDecoder::new(&m, &[8, 8], 1 << 20), Err(DecodeError::Unsupported(_))));
    // The floating-point predictor reorders stored bytes: only over `bytes`, which says their order.
    let floatpred = json!({"name": "numcodecs.imagecodecs_floatpred", "configuration": {"axis": -1, "dtype": "<f4"}});
    let mut chain = vec![floatpred.clone()];
    chain.extend(sharded(bytes_then(&[])).as_array().unwrap().iter().cloned());
    let m = metadata("float32", &[8, 8], Value::Array(chain));
    assert!(
        matches!(ChunkDecoder::new(&m, &[8, 8], 1 << 20), Err(DecodeError::Unsupported(e)) if e.contains("other than bytes"))
    );
    let m = metadata("float32", &[8, 8], json!([floatpred, {"name": "bytes", "configuration": {"endian": "big"}}]));
    assert!(ChunkDecoder::new(&m, &[8, 8], 1 << 20).is_ok());
}

#[test]
fn broken_shards_are_invalid_not_panics() {
    let m = metadata("uint32", &[8, 8], sharded(bytes_then(&[])));
    for bytes in [&[][..], &[0u8; 10], &[0u8; 68], &[0xFF; 68]] {
        assert!(matches!(decode(&m, &[8, 8], bytes), Err(DecodeError::Invalid(_))), "{bytes:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the bytes, the decoder answers (never panics, never passes a bound) and gives
    /// back whole chunks.
    #[test]
    fn any_bytes_decode_to_a_whole_chunk_or_an_error(which in 0usize..9, bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let (_, codecs) = all_chains().swap_remove(which);
        let m = metadata("uint32", &[8, 8], codecs);
        if let Ok(out) = decode(&m, &[8, 8], &bytes) {
            prop_assert_eq!(out.len(), 256);
        }
    }

    #[test]
    fn encoded_chunks_round_trip(which in 0usize..9, raw in proptest::collection::vec(any::<u8>(), 256)) {
        let (_, codecs) = all_chains().swap_remove(which);
        let m = metadata("uint32", &[8, 8], codecs);
        let encoded = encode(&m, &[8, 8], &raw);
        prop_assert_eq!(decode(&m, &[8, 8], &encoded).unwrap(), raw);
    }
}
