//! A tar archive of kerchunk parquet references: any bytes are read without a panic, and what
//! is read is validated.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zarrgate::zarr::kerchunk::parquet::parse_tar;
use zarrgate::zarr::spill::Scratch;
use zarrgate::zarr::validate::validate;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = parse_tar(data, &Scratch::in_memory()) {
        let _ = validate(doc, &|_| true);
    }
});
