//! An HDF5 filter pipeline as the bytes-to-bytes codecs VirtualiZarr's HDFParser writes
//! (numcodecs' names through zarr-python's adapters), in pipeline order.

use hdf5_reader::messages::filter_pipeline::FilterPipelineMessage;
use serde_json::{Value, json};

/// HDF5's registered filter ids.
const DEFLATE: u16 = 1;
const SHUFFLE: u16 = 2;
const FLETCHER32: u16 = 3;
const SZIP: u16 = 4;
const NBIT: u16 = 5;
const SCALEOFFSET: u16 = 6;
const BZIP2: u16 = 307;
const BLOSC: u16 = 32001;
const LZ4: u16 = 32004;
const ZSTD: u16 = 32015;

/// Blosc's compressor codes (the filter's 7th parameter) by name.
const BLOSC_COMPRESSORS: [&str; 6] = ["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"];

/// The codecs of `pipeline` for elements of `element_size` bytes, or why it cannot be served
/// (the sentence's end: "uses the szip filter, which ...").
pub(super) fn codecs(pipeline: Option<&FilterPipelineMessage>, element_size: usize) -> Result<Vec<Value>, String> {
    let Some(pipeline) = pipeline else { return Ok(Vec::new()) };
    pipeline.filters.iter().map(|filter| codec(filter.id, &filter.client_data, element_size)).collect()
}

fn codec(id: u16, parameters: &[u32], element_size: usize) -> Result<Value, String> {
    let parameter = |i: usize| parameters.get(i).copied();
    Ok(match id {
        DEFLATE => json!({"name": "numcodecs.zlib", "configuration": {"level": parameter(0).unwrap_or(6)}}),
        SHUFFLE => {
            let element_size = parameter(0).map_or(element_size, |n| n as usize);
            json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": element_size}})
        }
        FLETCHER32 => json!({"name": "numcodecs.fletcher32", "configuration": {}}),
        ZSTD => json!({"name": "numcodecs.zstd", "configuration": {"level": parameter(0).unwrap_or(0) as i32}}),
        BZIP2 => json!({"name": "numcodecs.bz2", "configuration": {"level": parameter(0).unwrap_or(9)}}),
        BLOSC => {
            let compressor = parameter(6).and_then(|c| BLOSC_COMPRESSORS.get(c as usize)).unwrap_or(&"blosclz");
            json!({"name": "numcodecs.blosc", "configuration": {
                "cname": compressor,
                "clevel": parameter(4).unwrap_or(5),
                "shuffle": parameter(5).unwrap_or(1),
                "blocksize": 0,
            }})
        }
        SZIP => return Err("uses the szip filter, which no Zarr codec decodes".into()),
        NBIT => return Err("uses the nbit filter, which no Zarr codec decodes".into()),
        SCALEOFFSET => return Err("uses the scaleoffset filter, which no Zarr codec decodes".into()),
        LZ4 => {
            return Err("uses HDF5's lz4 filter, whose block framing numcodecs' lz4 codec does not read".into());
        }
        other => return Err(format!("uses the HDF5 filter {other}, which no Zarr codec is known to decode")),
    })
}
