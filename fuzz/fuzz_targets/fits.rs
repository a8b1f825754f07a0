//! FITS headers: any bytes are parsed without a panic, in bounded time, and every reference
//! stays inside the file.
#![no_main]

use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zarrgate::formats::{Chunk, Limits, Parser};

fuzz_target!(|data: &[u8]| {
    let file = Bytes::copy_from_slice(data);
    let limits = Limits { deadline: Some(Instant::now() + Duration::from_secs(2)), ..Limits::default() };
    if let Ok(parsed) = Parser::Fits.parse(std::sync::Arc::new(file), &limits) {
        for node in parsed.nodes.values() {
            for (_, chunk) in &node.chunks {
                if let Chunk::Range { offset, length } = chunk {
                    assert!(offset + length <= data.len() as u64);
                }
            }
        }
    }
});
