//! Manifest blocks: the chunk references of one tile of an array's chunk grid, in a compact
//! binary form (the records bit-packed, a few bytes per reference) that is both the stored row
//! and the cached value.
//!
//! Layout (little-endian): `"ZGB" 3`, flags (bit 0: sparse), tile length, source count,
//! record count, inline length, the source dictionary's length and the dictionary itself
//! ([`sources`]); for sparse blocks the sorted slots; the records ([`records`]); inline bytes.
//! Version 2 blocks (records of a fixed 16 bytes, `offset u64, length u32, source u32`) and
//! version 1 blocks (also a plain list of URL and ETag strings) are still read.

mod records;
mod sources;

use std::collections::HashMap;

use bytes::Bytes;

pub use sources::{BlockSource, SourceCheck, SourceTable};

const MAGIC_V1: &[u8; 4] = b"ZGB\x01";
const MAGIC_V2: &[u8; 4] = b"ZGB\x02";
const MAGIC: &[u8; 4] = b"ZGB\x03";
const MISSING: u32 = u32::MAX;
const INLINE: u32 = u32::MAX - 1;
/// An assembled chunk: its recipe is in the inline bytes.
const ASSEMBLED: u32 = u32::MAX - 2;
/// The largest number of distinct sources in one block.
pub const MAX_SOURCES: usize = (u32::MAX - 3) as usize;

/// One chunk reference, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    offset: u64,
    length: u32,
    source: u32,
}

const MISSING_RECORD: Record = Record { offset: 0, length: 0, source: MISSING };

/// Where the bytes of one chunk are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkRef<'a> {
    /// `length` bytes at `offset` in `source`.
    Virtual { source: BlockSource<'a>, offset: u64, length: u64 },
    /// The bytes themselves.
    Inline(Bytes),
    /// Made from pieces of other chunks: its recipe ([`crate::zarr::assembled::Recipe`], encoded).
    Assembled(Bytes),
    /// No chunk: readers use the fill value.
    Missing,
}

/// A decoded block: the references of one tile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestBlock {
    tile_len: u32,
    sources: SourceTable,
    /// Sorted slots of the records when sparse; `None` when `records` covers every slot.
    slots: Option<Box<[u32]>>,
    records: records::Packed,
    inline: Bytes,
    /// Where a cached block is stored ([`ManifestBlock::at`]).
    stored: Option<Box<BlockAddress>>,
}

/// Where a block is stored: its version, array and tile. A cached block keeps it, so that a read
/// refused for a source's ETag can name the whole ETag from the stored block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockAddress {
    /// The version's id.
    pub version: i64,
    /// The array's path.
    pub node: String,
    /// The tile.
    pub tile: u64,
}

/// Counts of a block's stored references by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Virtual references.
    pub virtual_: u64,
    /// Inline chunks.
    pub inline: u64,
    /// Assembled chunks.
    pub assembled: u64,
    /// The bytes the virtual references name.
    pub virtual_bytes: u64,
    /// The inline chunks' bytes.
    pub inline_bytes: u64,
}

/// A stored block that cannot be decoded (corruption or a newer format).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("manifest block is corrupt: {0}")]
pub struct BlockError(&'static str);

impl ManifestBlock {
    /// A block with no references (a tile with nothing stored).
    pub fn empty(tile_len: u32) -> Self {
        Self {
            tile_len,
            sources: SourceTable::default(),
            slots: Some(Box::new([])),
            records: records::Packed::pack(&[]),
            inline: Bytes::new(),
            stored: None,
        }
    }

    /// The reference at `slot`.
    pub fn get(&self, slot: u32) -> ChunkRef<'_> {
        let record = match &self.slots {
            None => self.records.get(slot as usize),
            Some(slots) => slots.binary_search(&slot).ok().and_then(|i| self.records.get(i)),
        };
        record.map_or(ChunkRef::Missing, |r| self.resolve(&r))
    }

    /// Every stored reference with its slot, in slot order (missing chunks skipped).
    pub fn iter(&self) -> impl Iterator<Item = (u32, ChunkRef<'_>)> + '_ {
        self.records.iter().enumerate().filter(|(_, r)| r.source != MISSING).map(move |(i, r)| {
            let slot = match &self.slots {
                Some(slots) => slots[i],
                None => i as u32,
            };
            (slot, self.resolve(&r))
        })
    }

    /// Number of stored (virtual or inline) references.
    pub fn len(&self) -> usize {
        self.records.iter().filter(|r| r.source != MISSING).count()
    }

    /// Counts of the stored references by kind.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for r in self.records.iter() {
            match r.source {
                MISSING => {}
                INLINE => {
                    c.inline += 1;
                    c.inline_bytes += u64::from(r.length);
                }
                ASSEMBLED => c.assembled += 1,
                _ => {
                    c.virtual_ += 1;
                    c.virtual_bytes += u64::from(r.length);
                }
            }
        }
        c
    }

    /// True when the block holds no reference.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate heap footprint, the weight used by the block cache.
    pub fn weight(&self) -> usize {
        size_of::<Self>()
            + self.sources.weight()
            + self.slots.as_ref().map_or(0, |s| s.len() * 4)
            + self.records.weight()
            + self.inline.len()
            + self.stored.as_ref().map_or(0, |a| size_of::<BlockAddress>() + a.node.len())
    }

    fn resolve(&self, r: &Record) -> ChunkRef<'_> {
        match r.source {
            MISSING => ChunkRef::Missing,
            INLINE | ASSEMBLED => {
                let start = r.offset as usize;
                let bytes = self.inline.slice(start..start + r.length as usize);
                if r.source == INLINE { ChunkRef::Inline(bytes) } else { ChunkRef::Assembled(bytes) }
            }
            // Every record's source was checked against the dictionary when the block was decoded.
            s => match self.sources.get(s) {
                Some(source) => ChunkRef::Virtual { source, offset: r.offset, length: u64::from(r.length) },
                None => ChunkRef::Missing,
            },
        }
    }

    /// The form the block cache keeps: recorded ETags held as their digests where that is
    /// smaller ([`SourceCheck::Digest`]). Reads check the answer's ETag against the digest; an
    /// export or a PATCH reads the stored block, whose ETags are whole.
    pub fn for_serving(mut self) -> Self {
        if let Some(sources) = self.sources.digested() {
            self.sources = sources;
        }
        self
    }

    /// The block, knowing where it is stored.
    #[must_use]
    pub fn at(mut self, address: BlockAddress) -> Self {
        self.stored = Some(Box::new(address));
        self
    }

    /// Where the block is stored, when it was told ([`Self::at`]).
    pub fn stored_at(&self) -> Option<&BlockAddress> {
        self.stored.as_deref()
    }

    /// Serialises the block for storage.
    pub fn encode(&self) -> Vec<u8> {
        let table = self.sources.as_bytes();
        let mut out = Vec::with_capacity(64 + table.len() + self.records.weight() + self.inline.len());
        out.extend_from_slice(MAGIC);
        out.push(u8::from(self.slots.is_some()));
        for n in [self.tile_len, self.sources.len() as u32, self.records.len() as u32] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(self.inline.len() as u64).to_le_bytes());
        out.extend_from_slice(&(table.len() as u32).to_le_bytes());
        out.extend_from_slice(table);
        for slot in self.slots.iter().flat_map(|s| s.iter()) {
            out.extend_from_slice(&slot.to_le_bytes());
        }
        self.records.encode(&mut out);
        out.extend_from_slice(&self.inline);
        out
    }

    /// Reads a stored block, checking every index against the block's own bounds.
    pub fn decode(data: &[u8]) -> Result<Self, BlockError> {
        let mut r = Reader(data);
        let version = match r.take(4)? {
            m if m == MAGIC => 3,
            m if m == MAGIC_V2 => 2,
            m if m == MAGIC_V1 => 1,
            _ => return Err(BlockError("unknown format")),
        };
        let sparse = r.take(1)?[0] == 1;
        let (tile_len, n_sources, n_records) = (r.u32()?, r.u32()?, r.u32()? as usize);
        let inline_len = usize::try_from(r.u64()?).map_err(|_| BlockError("inline too large"))?;
        if n_records > tile_len as usize || (!sparse && n_records != tile_len as usize) {
            return Err(BlockError("record count does not match the tile"));
        }
        let sources = if version == 1 {
            let mut listed = Vec::with_capacity((n_sources as usize).min(data.len() / 8));
            for _ in 0..n_sources {
                let url = r.text()?;
                let etag = r.text()?;
                listed.push((url, etag));
            }
            let checks: Vec<SourceCheck<'_>> =
                listed.iter().map(|(_, e)| SourceCheck::from_facts((!e.is_empty()).then_some(&**e), None)).collect();
            SourceTable::build(listed.iter().zip(&checks).map(|((url, _), check)| (&**url, check)))
        } else {
            let table_len = r.u32()? as usize;
            SourceTable::decode(
                Bytes::copy_from_slice(r.take(table_len)?),
                n_sources,
                if version == 3 { 2 } else { 1 },
            )?
        };
        let slots = if sparse {
            let raw = r.take(n_records.checked_mul(4).ok_or(BlockError("too many records"))?)?;
            let slots: Box<[u32]> = raw.chunks_exact(4).map(le_u32).collect();
            if slots.windows(2).any(|w| w[0] >= w[1]) || slots.last().is_some_and(|s| *s >= tile_len) {
                return Err(BlockError("slots out of order or out of the tile"));
            }
            Some(slots)
        } else {
            None
        };
        let records = if version == 3 {
            let (records, rest) = records::Packed::decode(r.0, n_records)?;
            r.0 = rest;
            records
        } else {
            let raw = r.take(n_records.checked_mul(16).ok_or(BlockError("too many records"))?)?;
            let fixed: Vec<Record> = raw
                .chunks_exact(16)
                .map(|c| Record { offset: le_u64(&c[..8]), length: le_u32(&c[8..12]), source: le_u32(&c[12..]) })
                .collect();
            // Sentinels and sources out of the dictionary are refused before packing.
            for rec in &fixed {
                if !matches!(rec.source, MISSING | INLINE | ASSEMBLED) && rec.source as usize >= sources.len() {
                    return Err(BlockError("record points outside the block"));
                }
            }
            records::Packed::pack(&fixed)
        };
        let inline = Bytes::copy_from_slice(r.take(inline_len)?);
        if !r.0.is_empty() {
            return Err(BlockError("trailing bytes"));
        }
        records.check(sources.len(), inline_len as u64)?;
        Ok(Self { tile_len, sources, slots, records, inline, stored: None })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BlockError> {
        if self.0.len() < n {
            return Err(BlockError("truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, BlockError> {
        self.take(4).map(le_u32)
    }
    fn u64(&mut self) -> Result<u64, BlockError> {
        self.take(8).map(le_u64)
    }
    fn text(&mut self) -> Result<Box<str>, BlockError> {
        let n = self.u32()? as usize;
        let raw = self.take(n)?;
        std::str::from_utf8(raw).map(Into::into).map_err(|_| BlockError("source is not UTF-8"))
    }
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// Collects the references of one tile, in any slot order, then freezes them into a block.
#[derive(Debug)]
pub struct BlockBuilder {
    tile_len: u32,
    sources: Vec<(Box<str>, SourceCheck<'static>)>,
    source_index: HashMap<Box<str>, u32>,
    entries: Vec<(u32, Record)>,
    inline: Vec<u8>,
}

impl BlockBuilder {
    /// A builder for a tile of `tile_len` slots.
    pub fn new(tile_len: u32) -> Self {
        Self { tile_len, sources: Vec::new(), source_index: HashMap::new(), entries: Vec::new(), inline: Vec::new() }
    }

    /// Adds a virtual reference to `url`, which reads check against `check`. The caller
    /// guarantees `slot < tile_len` and unique slots.
    pub fn push_virtual(&mut self, slot: u32, url: &str, check: SourceCheck<'_>, offset: u64, length: u32) {
        // Neighbouring chunks mostly come from the same source: try the last one before hashing.
        let last = self.entries.last().map(|(_, r)| r.source).filter(|s| (*s as usize) < self.sources.len());
        let source =
            match last.filter(|s| &*self.sources[*s as usize].0 == url).or_else(|| self.source_index.get(url).copied())
            {
                Some(i) => i,
                None => {
                    let i = self.sources.len() as u32;
                    self.sources.push((url.into(), check.into_owned()));
                    self.source_index.insert(url.into(), i);
                    i
                }
            };
        self.entries.push((slot, Record { offset, length, source }));
    }

    /// Adds an inline chunk (at most 4 GiB).
    pub fn push_inline(&mut self, slot: u32, data: &[u8]) {
        self.push_bytes(slot, data, INLINE);
    }

    /// Adds an assembled chunk, its recipe encoded.
    pub fn push_assembled(&mut self, slot: u32, recipe: &[u8]) {
        self.push_bytes(slot, recipe, ASSEMBLED);
    }

    fn push_bytes(&mut self, slot: u32, data: &[u8], source: u32) {
        let record = Record { offset: self.inline.len() as u64, length: data.len() as u32, source };
        self.inline.extend_from_slice(data);
        self.entries.push((slot, record));
    }

    /// Number of references added so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Freezes the block: dense when at least 80% of the slots are used, sparse otherwise.
    pub fn finish(mut self) -> ManifestBlock {
        self.entries.sort_unstable_by_key(|(slot, _)| *slot);
        // Sources in URL order, so that each shares the longest prefix with the one before it.
        let mut order: Vec<u32> = (0..self.sources.len() as u32).collect();
        order.sort_unstable_by(|a, b| self.sources[*a as usize].0.cmp(&self.sources[*b as usize].0));
        let mut position = vec![0u32; order.len()];
        for (new, old) in order.iter().enumerate() {
            position[*old as usize] = new as u32;
        }
        for (_, r) in &mut self.entries {
            if r.source != INLINE && r.source != ASSEMBLED {
                r.source = position[r.source as usize];
            }
        }
        let sources = SourceTable::build(order.iter().map(|i| {
            let (url, check) = &self.sources[*i as usize];
            (&**url, check)
        }));
        let dense = self.entries.len() as u64 * 20 >= u64::from(self.tile_len) * 16;
        let (slots, records) = if dense {
            let mut records = vec![MISSING_RECORD; self.tile_len as usize];
            for (slot, r) in &self.entries {
                records[*slot as usize] = *r;
            }
            (None, records::Packed::pack(&records))
        } else {
            let slots = self.entries.iter().map(|(s, _)| *s).collect();
            let records: Vec<Record> = self.entries.iter().map(|(_, r)| *r).collect();
            (Some(slots), records::Packed::pack(&records))
        };
        ManifestBlock { tile_len: self.tile_len, sources, slots, records, inline: self.inline.into(), stored: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(n: u32, tile_len: u32) -> ManifestBlock {
        let mut b = BlockBuilder::new(tile_len);
        for slot in (0..n).rev() {
            match slot % 3 {
                0 => b.push_inline(slot, format!("chunk{slot}").as_bytes()),
                1 => {
                    b.push_virtual(slot, "s3://b/a.nc", SourceCheck::ETag("\"e1\"".into()), u64::from(slot) * 100, 100)
                }
                _ => b.push_virtual(slot, "s3://b/b.nc", SourceCheck::Size(1 << 41), 1 << 40, 7),
            }
        }
        b.finish()
    }

    #[test]
    fn dense_and_sparse_blocks_answer_the_same() {
        for (n, tile_len) in [(10, 10), (10, 1000)] {
            let block = sample(n, tile_len);
            assert_eq!(block.slots.is_none(), n == tile_len);
            assert_eq!(block.get(0), ChunkRef::Inline(Bytes::from_static(b"chunk0")));
            match block.get(1) {
                ChunkRef::Virtual { source, offset, length } => {
                    assert_eq!(
                        (&*source.url, source.check, offset, length),
                        ("s3://b/a.nc", SourceCheck::ETag("\"e1\"".into()), 100, 100)
                    );
                }
                other => panic!("{other:?}"),
            }
            match block.get(2) {
                ChunkRef::Virtual { offset, .. } => assert_eq!(offset, 1 << 40),
                other => panic!("{other:?}"),
            }
            assert_eq!(block.get(n), ChunkRef::Missing);
            assert_eq!(block.len(), n as usize);
            assert_eq!(block.sources.len(), 2, "sources are stored once per block");
        }
    }

    #[test]
    fn round_trips_through_bytes() {
        for block in [sample(10, 10), sample(33, 4096), ManifestBlock::empty(8)] {
            assert_eq!(ManifestBlock::decode(&block.encode()).unwrap(), block);
        }
    }

    #[test]
    fn version_1_blocks_are_still_read() {
        let mut v1 = MAGIC_V1.to_vec();
        v1.push(0);
        for n in [2u32, 1, 2] {
            v1.extend_from_slice(&n.to_le_bytes());
        }
        v1.extend_from_slice(&0u64.to_le_bytes());
        for text in ["s3://b/a.nc", "\"e1\""] {
            v1.extend_from_slice(&(text.len() as u32).to_le_bytes());
            v1.extend_from_slice(text.as_bytes());
        }
        for (offset, length, source) in [(8u64, 4u32, 0u32), (0, 0, MISSING)] {
            v1.extend_from_slice(&offset.to_le_bytes());
            v1.extend_from_slice(&length.to_le_bytes());
            v1.extend_from_slice(&source.to_le_bytes());
        }
        let block = ManifestBlock::decode(&v1).unwrap();
        let expected = BlockSource { url: "s3://b/a.nc".into(), check: SourceCheck::ETag("\"e1\"".into()) };
        assert_eq!(block.get(0), ChunkRef::Virtual { source: expected, offset: 8, length: 4 });
        assert_eq!(block.get(1), ChunkRef::Missing);
        assert_eq!(ManifestBlock::decode(&block.encode()).unwrap(), block, "written again as version 2");
    }

    #[test]
    fn a_thousand_files_in_a_block_cost_little_more_than_their_records() {
        let mut b = BlockBuilder::new(1024);
        for slot in (0..1024u32).rev() {
            let url = format!("s3://bucket/era5/2t/era5_2t_{}.nc", 20_000 + slot);
            let etag = format!("\"{:032x}\"", u128::from(slot).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834));
            b.push_virtual(slot, &url, SourceCheck::ETag(etag.into()), 1234, 5678);
        }
        let block = b.finish();
        // 16 bytes of record, 16 of MD5, about 10 of file name suffix and lengths (about 120
        // with a URL and an ETag string per source).
        assert!(block.weight() < 1024 * 45, "{} bytes per reference", block.weight() / 1024);
        match block.get(700) {
            ChunkRef::Virtual { source, .. } => assert_eq!(source.url, "s3://bucket/era5/2t/era5_2t_20700.nc"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn dense_footprint_is_16_bytes_per_reference() {
        let mut b = BlockBuilder::new(65_536);
        for slot in 0..65_536 {
            b.push_virtual(slot, "file:///data/x.nc", SourceCheck::Unchecked, u64::from(slot) * 1000, 1000);
        }
        let block = b.finish();
        assert!(block.weight() < 65_536 * 17, "weight {}", block.weight());
    }

    #[test]
    fn rejects_corrupt_blocks() {
        let good = sample(10, 10).encode();
        assert!(ManifestBlock::decode(&good[..good.len() - 1]).is_err());
        assert!(ManifestBlock::decode(b"nope").is_err());
        let (good, bad_source) = (v2_block(0), v2_block(1));
        assert!(ManifestBlock::decode(&good).is_ok());
        assert!(ManifestBlock::decode(&bad_source).is_err(), "record names source 1 of 1");
    }

    /// A version 2 block of one source and two records (the second's source `source`).
    fn v2_block(source: u32) -> Vec<u8> {
        let mut v2 = MAGIC_V2.to_vec();
        v2.push(0);
        for n in [2u32, 1, 2] {
            v2.extend_from_slice(&n.to_le_bytes());
        }
        v2.extend_from_slice(&0u64.to_le_bytes());
        let check = SourceCheck::ETag("\"0123456789abcdef0123456789abcdef\"".into());
        let table = SourceTable::build([("s3://b/a.nc", &check)]);
        v2.extend_from_slice(&(table.as_bytes().len() as u32).to_le_bytes());
        v2.extend_from_slice(table.as_bytes());
        for (offset, length, source) in [(8u64, 4u32, 0u32), (100, 7, source)] {
            v2.extend_from_slice(&offset.to_le_bytes());
            v2.extend_from_slice(&length.to_le_bytes());
            v2.extend_from_slice(&source.to_le_bytes());
        }
        v2
    }

    #[test]
    fn version_2_blocks_are_read_and_written_again_as_version_3() {
        let block = ManifestBlock::decode(&v2_block(0)).unwrap();
        match block.get(1) {
            ChunkRef::Virtual { source, offset, length } => {
                assert_eq!((&*source.url, offset, length), ("s3://b/a.nc", 100, 7));
            }
            other => panic!("{other:?}"),
        }
        let again = block.encode();
        assert_eq!(&again[..4], MAGIC);
        assert!(again.len() < v2_block(0).len());
        assert_eq!(ManifestBlock::decode(&again).unwrap(), block);
    }

    #[test]
    fn cached_blocks_hold_long_etags_as_digests() {
        let block = ManifestBlock::decode(&v2_block(0)).unwrap();
        let etag = "\"0123456789abcdef0123456789abcdef\"";
        let served = block.clone().for_serving();
        assert!(served.weight() + 8 <= block.weight(), "{} vs {}", served.weight(), block.weight());
        match (block.get(0), served.get(0)) {
            (ChunkRef::Virtual { source: whole, .. }, ChunkRef::Virtual { source: digest, .. }) => {
                assert_eq!(whole.check, SourceCheck::ETag(etag.into()));
                assert_eq!(digest.check, SourceCheck::Digest(crate::zarr::source::etag_digest(etag)));
                assert!(!digest.check.contradicted_by(Some(etag), 0, true));
                assert!(digest.check.contradicted_by(Some("\"0123456789abcdef0123456789abcdee\""), 0, false));
                assert!(digest.check.contradicted_by(None, 0, true));
            }
            other => panic!("{other:?}"),
        }
        // Short ETags stay whole (and are sent as If-Match).
        let short = sample(10, 10);
        assert_eq!(short.clone().for_serving(), short);
    }

    proptest! {
        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ManifestBlock::decode(&data);
        }

        #[test]
        fn decode_never_panics_on_mutated_blocks(i in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut data = sample(12, 20).encode();
            let at = i.index(data.len());
            data[at] = byte;
            if let Ok(block) = ManifestBlock::decode(&data) {
                for slot in 0..25 { let _ = block.get(slot); }
                let _ = block.iter().count();
            }
        }
    }
}
