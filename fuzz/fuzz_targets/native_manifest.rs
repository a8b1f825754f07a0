//! The native manifest parser and validation: any bytes are read without a panic, and a
//! document that parses is validated (every problem listed, or a store ready to write).
#![no_main]

use libfuzzer_sys::fuzz_target;
use zarrgate::zarr::native::parse_slice;
use zarrgate::zarr::validate::validate;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = parse_slice(data) {
        let _ = validate(doc, &|_| true);
    }
});
