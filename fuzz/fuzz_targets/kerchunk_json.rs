//! Kerchunk JSON references (version 0 and 1, with templates and gen), converted to v3 and
//! validated: any bytes are read without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zarrgate::zarr::kerchunk::parse_slice;
use zarrgate::zarr::validate::validate;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = parse_slice(data) {
        let _ = validate(doc, &|_| true);
    }
});
