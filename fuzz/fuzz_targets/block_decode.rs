//! A stored manifest block that is corrupt is an error, never a panic; one that decodes
//! encodes back to a block that decodes to the same references.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zarrgate::zarr::ManifestBlock;

fuzz_target!(|data: &[u8]| {
    let Ok(block) = ManifestBlock::decode(data) else { return };
    let refs: Vec<_> = block.iter().collect();
    let again = ManifestBlock::decode(&block.encode()).expect("an encoded block decodes");
    assert_eq!(again.iter().collect::<Vec<_>>(), refs);
});
