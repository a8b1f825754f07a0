//! DMR++ sidecars: any bytes are read by the DMR++ parser without a panic, within a deadline.
#![no_main]

use std::time::{Duration, Instant};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zarrgate::formats::{Limits, Parser};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { deadline: Some(Instant::now() + Duration::from_secs(2)), ..Limits::default() };
    let _ = Parser::Dmrpp.parse(std::sync::Arc::new(Bytes::copy_from_slice(data)), &limits);
});
