//! GRIB2 files: any bytes (and any index text) give a hierarchy or an error, never a panic,
//! within the deadline, and every message referenced lies inside the file.
#![no_main]

use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zarrgate::formats::{Chunk, Limits, grib};

fuzz_target!(init: {
    // gribberish (the metadata of each message) trusts what it reads and panics on a date that
    // is none, an offset past a section...: `formats::grib` catches that and leaves the message
    // out. libFuzzer's hook would abort there first; this one lets the catch happen. A panic
    // anywhere else still aborts (libfuzzer-sys aborts on any panic that reaches it).
    std::panic::set_hook(Box::new(|_| {}));
}, |data: &[u8]| {
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
