//! Any bytes as a chunk of arrays whose codecs compress (gzip, zlib, zstd, bz2, blosc, a
//! checksum, a shard with compressed inner chunks, TIFF's LZW and PackBits with its horizontal
//! predictor, which zarrgate decodes itself): the bounded decoder answers a whole chunk or an
//! error, never a panic, and never holds more than the chunk can take.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use zarrgate::zarr::decode::ChunkDecoder;

fn chains() -> Vec<Value> {
    let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let delta = json!({"name": "numcodecs.imagecodecs_delta",
        "configuration": {"axis": -1, "dist": 1, "shape": [8, 8], "dtype": "<u4"}});
    let zstd = json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}});
    let gzip = json!({"name": "gzip", "configuration": {"level": 1}});
    let blosc = json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}});
    let shard = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 4],
        "codecs": [bytes.clone(), zstd.clone()],
        "index_codecs": [bytes.clone(), {"name": "crc32c"}], "index_location": "end"}});
    vec![
        json!([bytes.clone(), zstd]),
        json!([bytes.clone(), gzip.clone()]),
        json!([bytes.clone(), {"name": "numcodecs.zlib", "configuration": {"level": 1}}]),
        json!([bytes.clone(), {"name": "numcodecs.bz2", "configuration": {"level": 1}}]),
        json!([bytes.clone(), blosc]),
        json!([bytes.clone(), {"name": "crc32c"}, gzip.clone()]),
        json!([shard, gzip]),
        json!([delta.clone(), bytes.clone(), {"name": "numcodecs.imagecodecs_lzw", "configuration": {}}]),
        json!([delta, bytes, {"name": "numcodecs.imagecodecs_packbits", "configuration": {}}]),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    let chains = chains();
    let codecs = chains[usize::from(which) % chains.len()].clone();
    let metadata = json!({"zarr_format": 3, "node_type": "array", "shape": [8, 8], "data_type": "uint32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": codecs});
    let metadata = metadata.as_object().expect("an object").clone();
    let decoder = ChunkDecoder::new(&metadata, &[8, 8], 1 << 20).expect("every chain here is bounded");
    if let Ok(chunk) = decoder.decode(bytes) {
        assert_eq!(chunk.into_fixed().expect("fixed size").len(), 256, "a whole chunk");
    }
});
