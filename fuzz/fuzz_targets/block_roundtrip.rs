//! Any set of references encodes to a block that decodes to exactly those references.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zarrgate::zarr::ManifestBlock;
use zarrgate::zarr::block::{BlockBuilder, ChunkRef, SourceCheck};

#[derive(Debug, Arbitrary)]
enum Ref {
    Virtual { url: u8, etag: Option<String>, size: Option<u64>, offset: u64, length: u32 },
    Inline(Vec<u8>),
}

fuzz_target!(|input: (u16, Vec<(u16, Ref)>)| {
    let (tile_len, refs) = input;
    let tile_len = u32::from(tile_len.max(1));
    let refs: BTreeMap<u32, Ref> = refs.into_iter().map(|(slot, r)| (u32::from(slot) % tile_len, r)).collect();
    let url = |n: u8| format!("s3://bucket/{}/file-{n}.nc", n % 7);
    let check = |etag: &Option<String>, size: Option<u64>| match (etag, size) {
        (Some(e), _) => SourceCheck::ETag(e.clone().into()),
        (None, Some(n)) => SourceCheck::Size(n),
        (None, None) => SourceCheck::Unchecked,
    };
    // One check per URL, as a version records one set of facts per source.
    let mut checks: BTreeMap<u8, SourceCheck<'static>> = BTreeMap::new();
    let mut builder = BlockBuilder::new(tile_len);
    for (slot, r) in &refs {
        match r {
            Ref::Virtual { url: n, etag, size, offset, length } => {
                let c = checks.entry(*n).or_insert_with(|| check(etag, *size)).clone();
                builder.push_virtual(*slot, &url(*n), c, *offset, *length);
            }
            Ref::Inline(bytes) => builder.push_inline(*slot, bytes),
        }
    }
    let block = ManifestBlock::decode(&builder.finish().encode()).expect("an encoded block decodes");
    for slot in 0..tile_len.min(4096) {
        match (refs.get(&slot), block.get(slot)) {
            (None, ChunkRef::Missing) => {}
            (Some(Ref::Inline(bytes)), ChunkRef::Inline(got)) => assert_eq!(&got[..], &bytes[..]),
            (Some(Ref::Virtual { url: n, offset, length, .. }), ChunkRef::Virtual { source, offset: o, length: l }) => {
                assert_eq!((&*source.url, &source.check), (url(*n).as_str(), &checks[n]));
                assert_eq!((*offset, u64::from(*length)), (o, l));
            }
            (want, got) => panic!("slot {slot}: put {want:?}, read {got:?}"),
        }
    }
});
