//! The source dictionary of a manifest block: each source object's URL, front-coded against the
//! one before it, and what a read checks the object against (its recorded ETag, packed when it
//! is hex, or its size when it has no ETag). It stays in this encoded form in memory and is
//! decoded on access from the nearest restart point, so a block whose chunks lie in a thousand
//! daily files costs a few bytes per file instead of a URL and an ETag string each.
//!
//! Entry: varint bytes shared with the previous URL (0 at every restart point), varint suffix
//! length, suffix, check kind, check payload.

use std::borrow::Cow;
use std::fmt::Write;

use bytes::Bytes;

use super::BlockError;
pub use crate::zarr::source::SourceCheck;
use crate::zarr::spill::{get_varint, put_varint};

/// Every `RESTART`-th entry carries its whole URL: a lookup decodes at most this many entries.
const RESTART: usize = 16;

const UNCHECKED: u8 = 0;
/// An ETag as it is (weak ones, and any other shape).
const RAW: u8 = 1;
/// `"<lowercase hex>"`: S3, GCS and Azure MD5s (16 bytes instead of 34).
const HEX: u8 = 2;
/// `"<lowercase hex>-<parts>"`: S3 multipart uploads.
const HEX_PARTS: u8 = 3;
/// `<hex>-<hex>-<hex>`: local files (inode, modification time, size).
const HEX_TRIPLE: u8 = 4;
/// No ETag; the object's size.
const SIZE: u8 = 5;

/// A source object as a block refers to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSource<'a> {
    /// Absolute URL of the object.
    pub url: Cow<'a, str>,
    /// What reads check it against.
    pub check: SourceCheck<'a>,
}

/// The encoded dictionary of one block.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceTable {
    data: Bytes,
    /// Offset in `data` of every `RESTART`-th entry.
    restarts: Box<[u32]>,
    len: u32,
}

impl SourceTable {
    /// The dictionary of `sources`, in this order (a block's records refer to them by position).
    pub fn build<'s>(sources: impl IntoIterator<Item = (&'s str, &'s SourceCheck<'s>)>) -> Self {
        let mut data = Vec::new();
        let mut restarts = Vec::new();
        let mut previous = "";
        let mut len = 0u32;
        for (i, (url, check)) in sources.into_iter().enumerate() {
            let shared = if i % RESTART == 0 {
                restarts.push(data.len() as u32);
                0
            } else {
                shared_prefix(previous, url)
            };
            put_varint(&mut data, shared as u64);
            put_varint(&mut data, (url.len() - shared) as u64);
            data.extend_from_slice(&url.as_bytes()[shared..]);
            put_check(&mut data, check);
            previous = url;
            len += 1;
        }
        Self { data: data.into(), restarts: restarts.into(), len }
    }

    /// Reads a stored dictionary of `len` entries, checking every entry.
    pub fn decode(data: Bytes, len: u32) -> Result<Self, BlockError> {
        let mut restarts = Vec::with_capacity((len as usize).div_ceil(RESTART).min(data.len()));
        let mut r: &[u8] = &data;
        let mut url = String::new();
        for i in 0..len as usize {
            if i % RESTART == 0 {
                restarts.push((data.len() - r.len()) as u32);
            }
            let shared = read_len(&mut r)?;
            if (i % RESTART == 0 && shared != 0) || shared > url.len() || !url.is_char_boundary(shared) {
                return Err(BlockError("source URL shares more than the previous one has"));
            }
            let suffix_len = read_len(&mut r)?;
            let suffix = take(&mut r, suffix_len)?;
            url.truncate(shared);
            url.push_str(std::str::from_utf8(suffix).map_err(|_| BlockError("source is not UTF-8"))?);
            skip_check(&mut r)?;
        }
        if !r.is_empty() {
            return Err(BlockError("trailing bytes in the source dictionary"));
        }
        Ok(Self { data, restarts: restarts.into(), len })
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the block has no virtual reference.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The encoded form, as stored.
    pub fn as_bytes(&self) -> &[u8] {
        &self.data
    }

    /// Heap bytes held.
    pub fn weight(&self) -> usize {
        self.data.len() + self.restarts.len() * 4
    }

    /// Source `i`, decoded from its restart point (the table was checked when it was decoded).
    pub fn get(&self, i: u32) -> Option<BlockSource<'_>> {
        if i >= self.len {
            return None;
        }
        let start = *self.restarts.get(i as usize / RESTART)? as usize;
        let mut r: &[u8] = self.data.get(start..)?;
        let target = i as usize % RESTART;
        let mut url = String::new();
        for step in 0..=target {
            let shared = read_len(&mut r).ok()?;
            let suffix_len = read_len(&mut r).ok()?;
            let suffix = std::str::from_utf8(take(&mut r, suffix_len).ok()?).ok()?;
            if step < target {
                skip_check(&mut r).ok()?;
                url.truncate(shared);
                url.push_str(suffix);
                continue;
            }
            let check = read_check(&mut r).ok()?;
            if target == 0 {
                return Some(BlockSource { url: Cow::Borrowed(suffix), check });
            }
            url.truncate(shared);
            url.push_str(suffix);
            return Some(BlockSource { url: Cow::Owned(url), check });
        }
        None
    }
}

fn shared_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    (0..=n).rev().find(|&k| b.is_char_boundary(k)).unwrap_or(0)
}

fn read_len(r: &mut &[u8]) -> Result<usize, BlockError> {
    let n = get_varint(r).map_err(|_| BlockError("truncated source dictionary"))?;
    usize::try_from(n).map_err(|_| BlockError("source dictionary length out of range"))
}

fn take<'a>(r: &mut &'a [u8], n: usize) -> Result<&'a [u8], BlockError> {
    if r.len() < n {
        return Err(BlockError("truncated source dictionary"));
    }
    let (head, tail) = r.split_at(n);
    *r = tail;
    Ok(head)
}

fn put_check(out: &mut Vec<u8>, check: &SourceCheck<'_>) {
    match check {
        SourceCheck::Unchecked => out.push(UNCHECKED),
        SourceCheck::Size(n) => {
            out.push(SIZE);
            put_varint(out, *n);
        }
        SourceCheck::ETag(etag) => {
            let mut packed = Vec::new();
            for kind in [HEX, HEX_PARTS, HEX_TRIPLE] {
                packed.clear();
                packed.push(kind);
                // Packed only if it renders back to exactly the same text.
                if pack(kind, etag, &mut packed)
                    && read_check(&mut &packed[..]).ok().as_ref() == Some(&SourceCheck::ETag(Cow::Borrowed(etag)))
                {
                    out.extend_from_slice(&packed);
                    return;
                }
            }
            out.push(RAW);
            put_varint(out, etag.len() as u64);
            out.extend_from_slice(etag.as_bytes());
        }
    }
}

/// Appends the payload of `etag` packed as `kind`, or returns false if it has another shape.
fn pack(kind: u8, etag: &str, out: &mut Vec<u8>) -> bool {
    let quoted = etag.strip_prefix('"').and_then(|e| e.strip_suffix('"'));
    match (kind, quoted) {
        (HEX, Some(hex)) => put_hex(out, hex),
        (HEX_PARTS, Some(inner)) => match inner.rsplit_once('-') {
            Some((hex, parts)) => match parts.parse::<u64>() {
                Ok(n) if put_hex(out, hex) => {
                    put_varint(out, n);
                    true
                }
                _ => false,
            },
            None => false,
        },
        (HEX_TRIPLE, None) => {
            let numbers: Vec<Option<u64>> = etag.split('-').map(|p| u64::from_str_radix(p, 16).ok()).collect();
            if numbers.len() != 3 || numbers.iter().any(Option::is_none) {
                return false;
            }
            numbers.into_iter().flatten().for_each(|n| put_varint(out, n));
            true
        }
        _ => false,
    }
}

fn put_hex(out: &mut Vec<u8>, hex: &str) -> bool {
    let ok =
        !hex.is_empty() && hex.len().is_multiple_of(2) && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if ok {
        put_varint(out, hex.len() as u64 / 2);
        for pair in hex.as_bytes().chunks_exact(2) {
            let digit = |b: u8| if b.is_ascii_digit() { b - b'0' } else { b - b'a' + 10 };
            out.push(digit(pair[0]) << 4 | digit(pair[1]));
        }
    }
    ok
}

/// Steps over a check, verifying its shape without rendering it (no allocation).
fn skip_check(r: &mut &[u8]) -> Result<(), BlockError> {
    let varint = |r: &mut &[u8]| get_varint(r).map_err(|_| BlockError("truncated source dictionary"));
    match take(r, 1)?[0] {
        UNCHECKED => {}
        RAW => {
            let n = read_len(r)?;
            std::str::from_utf8(take(r, n)?).map_err(|_| BlockError("ETag is not UTF-8"))?;
        }
        HEX => {
            let n = read_len(r)?;
            take(r, n)?;
        }
        HEX_PARTS => {
            let n = read_len(r)?;
            take(r, n)?;
            varint(r)?;
        }
        HEX_TRIPLE => {
            for _ in 0..3 {
                varint(r)?;
            }
        }
        SIZE => {
            varint(r)?;
        }
        _ => return Err(BlockError("unknown source check")),
    }
    Ok(())
}

fn read_check<'a>(r: &mut &'a [u8]) -> Result<SourceCheck<'a>, BlockError> {
    let kind = take(r, 1)?[0];
    let hex = |r: &mut &'a [u8]| -> Result<String, BlockError> {
        let n = read_len(r)?;
        Ok(take(r, n)?.iter().fold(String::with_capacity(2 * n), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        }))
    };
    Ok(match kind {
        UNCHECKED => SourceCheck::Unchecked,
        RAW => {
            let n = read_len(r)?;
            let text = std::str::from_utf8(take(r, n)?).map_err(|_| BlockError("ETag is not UTF-8"))?;
            SourceCheck::ETag(Cow::Borrowed(text))
        }
        HEX => SourceCheck::ETag(Cow::Owned(format!("\"{}\"", hex(r)?))),
        HEX_PARTS => {
            let digest = hex(r)?;
            let parts = get_varint(r).map_err(|_| BlockError("truncated source dictionary"))?;
            SourceCheck::ETag(Cow::Owned(format!("\"{digest}-{parts}\"")))
        }
        HEX_TRIPLE => {
            let mut n = || get_varint(r).map_err(|_| BlockError("truncated source dictionary"));
            let (a, b, c) = (n()?, n()?, n()?);
            SourceCheck::ETag(Cow::Owned(format!("{a:x}-{b:x}-{c:x}")))
        }
        SIZE => SourceCheck::Size(get_varint(r).map_err(|_| BlockError("truncated source dictionary"))?),
        _ => return Err(BlockError("unknown source check")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(sources: &[(String, SourceCheck<'static>)]) -> SourceTable {
        SourceTable::build(sources.iter().map(|(u, c)| (u.as_str(), c)))
    }

    #[test]
    fn daily_files_cost_a_few_bytes_each() {
        let sources: Vec<(String, SourceCheck<'static>)> = (0..1000)
            .map(|d| {
                let url = format!("s3://era5-bucket/reanalysis/single-levels/2t/era5_2t_{:05}.nc", 20_000 + d);
                (url, SourceCheck::ETag(format!("\"{:032x}\"", (u128::MAX / 7).wrapping_mul(d as u128)).into()))
            })
            .collect();
        let t = table(&sources);
        // 16 bytes of MD5, a few of file name suffix, lengths and kinds (138 as strings).
        assert!(t.weight() < 1000 * 28, "{} bytes for 1000 sources", t.weight());
        for (i, (url, check)) in sources.iter().enumerate() {
            let got = t.get(i as u32).unwrap();
            assert_eq!((got.url.as_ref(), &got.check), (url.as_str(), check));
        }
        assert_eq!(t.get(1000), None);
        assert_eq!(SourceTable::decode(t.data.clone(), 1000).unwrap(), t);
    }

    #[test]
    fn every_etag_shape_comes_back_exactly() {
        let shapes = [
            "\"9b2cf535f27731c974343645a3985328\"",
            "\"9b2cf535f27731c974343645a3985328-12\"",
            "\"9B2CF535F27731C974343645A3985328\"",
            "\"9b2\"",
            "\"-3\"",
            "\"ab-007\"",
            "W/\"5f0c-1a2b\"",
            "5f0c-1a2b",
            "1a2b3c-18b5a9f2c3d4e5f6-400",
            "01-2-3",
            "",
            "\"\"",
            "é-\"x\"",
        ];
        let sources: Vec<(String, SourceCheck<'static>)> = shapes
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("file:///d/{i}.nc"), SourceCheck::ETag(Cow::Owned((*e).to_owned()))))
            .chain([("file:///d/x".into(), SourceCheck::Size(1 << 40)), ("file:///d/y".into(), SourceCheck::Unchecked)])
            .collect();
        let t = table(&sources);
        for (i, (url, check)) in sources.iter().enumerate() {
            let got = t.get(i as u32).unwrap();
            assert_eq!((got.url.as_ref(), &got.check), (url.as_str(), check), "entry {i}");
        }
    }

    proptest! {
        #[test]
        fn any_sources_round_trip(
            sources in proptest::collection::vec(("[a-zé/:.0-9]{0,30}", proptest::option::of("[\"a-fA-FW/0-9é-]{0,40}"), any::<u64>()), 0..60)
        ) {
            let sources: Vec<(String, SourceCheck<'static>)> = sources
                .into_iter()
                .map(|(u, e, n)| (u, match e { Some(e) => SourceCheck::ETag(e.into()), None => SourceCheck::Size(n) }))
                .collect();
            let t = table(&sources);
            let decoded = SourceTable::decode(t.data.clone(), sources.len() as u32).unwrap();
            prop_assert_eq!(&decoded, &t);
            for (i, (url, check)) in sources.iter().enumerate() {
                let got = decoded.get(i as u32).unwrap();
                prop_assert_eq!(got.url.as_ref(), url.as_str());
                prop_assert_eq!(&got.check, check);
            }
        }

        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..120), len in 0u32..40) {
            if let Ok(t) = SourceTable::decode(data.into(), len) {
                for i in 0..len + 2 { let _ = t.get(i); }
            }
        }
    }
}
