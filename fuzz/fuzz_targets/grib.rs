//! GRIB2 files: any bytes (and any index text) give a hierarchy or an error, never a panic,
//! within the deadline, and every message referenced lies inside the file.
#![no_main]

use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zarrgate::formats::{Chunk, Limits, grib};

fuzz_target!(|data: &[u8]| {
    // What follows a line `IDX`, if any, is the file's index (NOAA's or ECMWF's).
    let (file, index) = match data.windows(5).position(|w| w == b"\nIDX\n") {
        Some(at) => (&data[..at], std::str::from_utf8(&data[at + 5..]).ok()),
        None => (data, None),
    };
    let bytes = Bytes::copy_from_slice(file);
    let limits = Limits { deadline: Some(Instant::now() + Duration::from_secs(2)), ..Limits::default() };
    if let Ok(parsed) = grib::parse(&bytes, &limits, index) {
        for node in parsed.nodes.values() {
            for (_, chunk) in &node.chunks {
                if let Chunk::Range { offset, length } = chunk {
                    assert!(offset + length <= file.len() as u64);
                }
            }
        }
    }
});
