//! HDF5 / netCDF4 files parsed by formats::hdf5 (metadata only): any bytes give a hierarchy or
//! an error, never a panic, within the deadline.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use zarrgate::formats::{Limits, Parser};

fuzz_target!(|data: &[u8]| {
    let file = bytes::Bytes::copy_from_slice(data);
    let limits = Limits { deadline: Some(Instant::now() + Duration::from_secs(2)), ..Limits::default() };
    let _ = Parser::Hdf5.parse(std::sync::Arc::new(file), &limits);
});
