//! The Range header: whatever the header says, the answer is the whole body, a 416, or a
//! non-empty range inside the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zarrgate::http::range::{Plan, single_range};

fuzz_target!(|input: (u64, &str)| {
    let (len, text) = input;
    let len = len % (1 << 40);
    match single_range(text, len) {
        Plan::Partial(range) => {
            assert!(range.start < range.end, "{text:?} on {len} bytes: empty range {range:?}");
            assert!(range.end <= len, "{text:?} on {len} bytes: {range:?} past the end");
        }
        Plan::Full | Plan::Unsatisfiable | Plan::NotModified => {}
    }
});
