//! The source dictionary of a manifest block: each source object's URL, coded against the one
//! before it, and what a read checks the object against (its recorded ETag, packed when it is
//! hex, or its size when it has no ETag). It stays in this encoded form in memory and is
//! decoded on access from the nearest restart point, so a block whose chunks lie in a thousand
//! daily files costs a few bytes per file instead of a URL and an ETag string each.
//!
//! A URL is coded one of two ways, whichever is shorter:
//! - front-coded: the bytes it shares with the previous URL, and the rest;
//! - by its numbers: when it has the previous URL's shape (the same text between runs of digits,
//!   and runs of the same widths), only the runs that differ from their prediction, each as the
//!   difference. A run is predicted to change by its step: how much it changed the first time
//!   since the last front-coded URL (none before that). Names made of
//!   times (`..._s20230010000204_e20230010009512_c20230010009587.nc`, every ten minutes) then
//!   cost a few bytes each, where front coding leaves most of their last 40 characters.
//!
//! Entry (format 2, the blocks of version 3): varint header; when even, the bytes shared with
//! the previous URL (0 at every restart point) doubled, then varint suffix length and suffix;
//! when odd, the mask of the runs that differ from their prediction (bit 0: the last run),
//! shifted left once, then a zigzag varint difference for each of them, first run first. Then the check: kind, payload. Format 1 (version
//! 2 blocks) is front coding only: varint shared bytes, varint suffix length, suffix, check.

use std::borrow::Cow;
use std::fmt::Write;

use bytes::Bytes;

use super::BlockError;
pub use crate::zarr::source::SourceCheck;
use crate::zarr::spill::{get_varint, put_varint};

/// Every `RESTART`-th entry carries its whole URL: a lookup decodes at most this many entries
/// (a URL of 100 bytes then costs 3 bytes an entry).
const RESTART: usize = 32;
/// Runs of digits a numbers-coded URL may have (one bit each in the header).
const MAX_RUNS: usize = 62;
/// The widest run of digits read as a number (10^18 fits in an i64).
const MAX_DIGITS: usize = 18;
/// 10^n, for n up to [`MAX_DIGITS`]: the first value a run of n digits cannot hold.
const POW10: [i128; MAX_DIGITS + 1] = {
    let mut table = [1i128; MAX_DIGITS + 1];
    let mut n = 1;
    while n <= MAX_DIGITS {
        table[n] = table[n - 1] * 10;
        n += 1;
    }
    table
};

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
/// The digest of an ETag ([`SourceCheck::Digest`]), 8 bytes: only in cached blocks.
const DIGEST: u8 = 6;

/// A source object as a block refers to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSource<'a> {
    /// Absolute URL of the object.
    pub url: Cow<'a, str>,
    /// What reads check it against.
    pub check: SourceCheck<'a>,
}

/// The encoded dictionary of one block (always format 2 in memory).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceTable {
    data: Bytes,
    /// Offset in `data` of every `RESTART`-th entry.
    restarts: Box<[u32]>,
    len: u32,
}

/// A run of digits of a URL: where it is, how wide, its value, and its step (how much it
/// changed in the first numbers-coded URL of this chain).
#[derive(Debug, Clone, Copy)]
struct Run {
    start: usize,
    width: usize,
    value: u64,
    step: Option<i64>,
}

/// The runs of digits of `url`, or `None` when it has too many or one too wide to code by
/// numbers.
fn runs(url: &str) -> Option<Vec<Run>> {
    let b = url.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i - start > MAX_DIGITS || out.len() == MAX_RUNS {
            return None;
        }
        let value = b[start..i].iter().fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
        out.push(Run { start, width: i - start, value, step: None });
    }
    Some(out)
}

impl Run {
    fn predicted(&self) -> i128 {
        i128::from(self.value) + i128::from(self.step.unwrap_or(0))
    }

    /// Moves to `value`. The first step seen is kept: a jump (a new hour, day or year in a
    /// name of times) costs its one entry, and the next is predicted with the usual step again.
    fn advance(&mut self, value: u64) {
        self.step = self.step.or(Some(value as i64 - self.value as i64));
        self.value = value;
    }
}

/// The URL before, and its runs once a numbers-coded entry needed them: what the next entry is
/// coded against.
#[derive(Default)]
struct Previous {
    url: String,
    runs: Option<Vec<Run>>,
    /// The runs' values are newer than their digits in `url` (written once, when needed).
    stale: bool,
}

impl Previous {
    fn restart(&mut self) {
        self.url.clear();
        self.runs = None;
        self.stale = false;
    }

    /// Writes the runs' values into `url`, each as wide as it was.
    fn render(&mut self) {
        if !std::mem::take(&mut self.stale) {
            return;
        }
        for run in self.runs.iter().flatten() {
            let mut digits = [b'0'; MAX_DIGITS];
            let mut v = run.value;
            for d in digits[..run.width].iter_mut().rev() {
                *d = b'0' + (v % 10) as u8;
                v /= 10;
            }
            if let Ok(text) = std::str::from_utf8(&digits[..run.width]) {
                self.url.replace_range(run.start..run.start + run.width, text);
            }
        }
    }

    fn front(&mut self, shared: usize, suffix: &str) {
        self.render();
        self.url.truncate(shared);
        self.url.push_str(suffix);
        self.runs = None;
    }

    /// Applies a numbers-coded entry: `mask` and the differences read by `next`.
    fn numbers(&mut self, mask: u64, mut next: impl FnMut() -> Result<i64, BlockError>) -> Result<(), BlockError> {
        let runs = match &mut self.runs {
            Some(r) => r,
            None => self.runs.insert(runs(&self.url).ok_or(BlockError("source URL cannot be coded by its numbers"))?),
        };
        if runs.len() < 64 && mask >> runs.len() != 0 {
            return Err(BlockError("source URL changes a run of digits it does not have"));
        }
        // Bit 0 is the last run: the runs that change most (times in file names) come last.
        let n = runs.len();
        for (i, run) in runs.iter_mut().enumerate() {
            let mut value = run.predicted();
            if mask >> (n - 1 - i) & 1 == 1 {
                value += i128::from(next()?);
            }
            if !(0..POW10[run.width]).contains(&value) {
                return Err(BlockError("source URL's number does not fit its digits"));
            }
            let value = value as u64;
            run.advance(value);
        }
        self.stale = true;
        Ok(())
    }

    /// The numbers coding of `url` against this one: header mask and differences, when `url`
    /// has the same shape.
    fn code_numbers(&mut self, url: &str) -> Option<(u64, Vec<i64>, Vec<u64>)> {
        if self.runs.is_none() {
            self.runs = Some(runs(&self.url)?);
        }
        let before = self.runs.as_ref()?;
        let after = runs(url)?;
        if before.len() != after.len() || before.is_empty() {
            return None;
        }
        let mut from = 0;
        for (a, b) in before.iter().zip(&after) {
            if a.start != b.start
                || a.width != b.width
                || self.url.as_bytes()[from..a.start] != url.as_bytes()[from..b.start]
            {
                return None;
            }
            from = a.start + a.width;
        }
        if self.url.as_bytes()[from..] != url.as_bytes()[from..] {
            return None;
        }
        let mut mask = 0u64;
        let mut differences = Vec::new();
        let n = before.len();
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            let difference = i128::from(b.value) - a.predicted();
            if difference != 0 {
                mask |= 1 << (n - 1 - i);
                differences.push(i64::try_from(difference).ok()?);
            }
        }
        Some((mask, differences, after.iter().map(|r| r.value).collect()))
    }

    /// Moves to `url`, coded by its numbers `values` against this one (as [`Self::numbers`]
    /// decodes it).
    fn numbered(&mut self, url: &str, values: &[u64]) {
        if let Some(runs) = &mut self.runs {
            runs.iter_mut().zip(values).for_each(|(run, v)| run.advance(*v));
        }
        self.url.clear();
        self.url.push_str(url);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

fn varint_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Reads entries one after another from a restart point.
struct Walker<'a> {
    r: &'a [u8],
    previous: Previous,
}

impl<'a> Walker<'a> {
    /// Reads the next entry's URL into `self.previous.url`, returning the check's bytes still in
    /// `self.r`. `restart`: the entry is at a restart point.
    fn url(&mut self, restart: bool, format: u8) -> Result<(), BlockError> {
        if restart {
            self.previous.restart();
        }
        let header = get_varint(&mut self.r).map_err(|_| BlockError("truncated source dictionary"))?;
        let (numbers, shared) = if format == 1 { (false, header) } else { (header & 1 == 1, header >> 1) };
        if numbers {
            if restart {
                return Err(BlockError("source URL coded by numbers at a restart point"));
            }
            let mut r = self.r;
            let next = || get_varint(&mut r).map(unzigzag).map_err(|_| BlockError("truncated source dictionary"));
            self.previous.numbers(shared, next)?;
            self.r = r;
            return Ok(());
        }
        let shared = usize::try_from(shared).map_err(|_| BlockError("source dictionary length out of range"))?;
        if (restart && shared != 0) || shared > self.previous.url.len() || !self.previous.url.is_char_boundary(shared) {
            return Err(BlockError("source URL shares more than the previous one has"));
        }
        let suffix_len = read_len(&mut self.r)?;
        let suffix = take(&mut self.r, suffix_len)?;
        let suffix = std::str::from_utf8(suffix).map_err(|_| BlockError("source is not UTF-8"))?;
        self.previous.front(shared, suffix);
        Ok(())
    }
}

impl SourceTable {
    /// The dictionary of `sources`, in this order (a block's records refer to them by position).
    pub fn build<'s>(sources: impl IntoIterator<Item = (&'s str, &'s SourceCheck<'s>)>) -> Self {
        let mut data = Vec::new();
        let mut restarts = Vec::new();
        let mut previous = Previous::default();
        let mut len = 0u32;
        for (i, (url, check)) in sources.into_iter().enumerate() {
            if i % RESTART == 0 {
                restarts.push(data.len() as u32);
                previous.restart();
            }
            let shared = if i % RESTART == 0 { 0 } else { shared_prefix(&previous.url, url) };
            let front_cost =
                varint_len(shared as u64 * 2) + varint_len((url.len() - shared) as u64) + url.len() - shared;
            let numbers = if i % RESTART == 0 { None } else { previous.code_numbers(url) };
            match numbers {
                Some((mask, differences, values))
                    if varint_len(mask << 1 | 1)
                        + differences.iter().map(|d| varint_len(zigzag(*d))).sum::<usize>()
                        < front_cost =>
                {
                    put_varint(&mut data, mask << 1 | 1);
                    for d in &differences {
                        put_varint(&mut data, zigzag(*d));
                    }
                    previous.numbered(url, &values);
                }
                _ => {
                    put_varint(&mut data, shared as u64 * 2);
                    put_varint(&mut data, (url.len() - shared) as u64);
                    data.extend_from_slice(&url.as_bytes()[shared..]);
                    previous.front(shared, &url[shared..]);
                }
            }
            put_check(&mut data, check);
            len += 1;
        }
        Self { data: data.into(), restarts: restarts.into(), len }
    }

    /// Reads a stored dictionary of `len` entries in `format` (1: version 2 blocks, 2: version
    /// 3), checking every entry. A format 1 dictionary is coded again in format 2.
    pub fn decode(data: Bytes, len: u32, format: u8) -> Result<Self, BlockError> {
        let mut restarts = Vec::with_capacity((len as usize).div_ceil(RESTART).min(data.len()));
        let mut walker = Walker { r: &data, previous: Previous::default() };
        let mut entries = Vec::new();
        for i in 0..len as usize {
            if i % RESTART == 0 {
                restarts.push((data.len() - walker.r.len()) as u32);
            }
            walker.url(i % RESTART == 0, format)?;
            if format == 1 {
                let check = read_check(&mut walker.r)?.into_owned();
                entries.push((walker.previous.url.clone(), check));
            } else {
                skip_check(&mut walker.r)?;
            }
        }
        if !walker.r.is_empty() {
            return Err(BlockError("trailing bytes in the source dictionary"));
        }
        if format == 1 {
            return Ok(Self::build(entries.iter().map(|(u, c)| (u.as_str(), c))));
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

    /// The same dictionary with every ETag longer than its digest held as the digest
    /// ([`SourceCheck::digested`]): the form a cached block keeps (an S3 MD5 costs 9 bytes
    /// instead of 18). `None` when no entry would change.
    pub fn digested(&self) -> Option<Self> {
        let entries: Vec<BlockSource<'_>> = (0..self.len).filter_map(|i| self.get(i)).collect();
        let checks: Vec<SourceCheck<'_>> = entries.iter().map(|e| e.check.as_borrowed().digested()).collect();
        if entries.iter().zip(&checks).all(|(e, c)| e.check == *c) {
            return None;
        }
        Some(Self::build(entries.iter().zip(&checks).map(|(e, c)| (&*e.url, c))))
    }

    /// Source `i`, decoded from its restart point (the table was checked when it was decoded).
    pub fn get(&self, i: u32) -> Option<BlockSource<'_>> {
        if i >= self.len {
            return None;
        }
        let start = *self.restarts.get(i as usize / RESTART)? as usize;
        let target = i as usize % RESTART;
        if target == 0 {
            // A restart point carries its whole URL: borrowed, not copied.
            let mut r = self.data.get(start..)?;
            if get_varint(&mut r).ok()? != 0 {
                return None;
            }
            let len = read_len(&mut r).ok()?;
            let url = std::str::from_utf8(take(&mut r, len).ok()?).ok()?;
            let check = read_check(&mut r).ok()?;
            return Some(BlockSource { url: Cow::Borrowed(url), check });
        }
        let mut walker = Walker { r: self.data.get(start..)?, previous: Previous::default() };
        for step in 0..=target {
            walker.url(step == 0, 2).ok()?;
            if step < target {
                skip_check(&mut walker.r).ok()?;
            }
        }
        let check = read_check(&mut walker.r).ok()?;
        walker.previous.render();
        Some(BlockSource { url: Cow::Owned(walker.previous.url), check })
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
        SourceCheck::Digest(d) => {
            out.push(DIGEST);
            out.extend_from_slice(&d.to_le_bytes());
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
        DIGEST => {
            take(r, 8)?;
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
        DIGEST => {
            let mut d = [0u8; 8];
            d.copy_from_slice(take(r, 8)?);
            SourceCheck::Digest(u64::from_le_bytes(d))
        }
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
        assert_eq!(SourceTable::decode(t.data.clone(), 1000, 2).unwrap(), t);
    }

    /// GOES ABI names, every ten minutes for five days: start, end and creation times.
    fn goes_names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let minutes = i * 10;
                let (day, hour, minute) = (1 + minutes / 1440, minutes / 60 % 24, minutes % 60);
                let jitter = (i * 7919) % 900;
                format!(
                    "s3://noaa-goes16/ABI-L2-CMIPF/2023/{day:03}/{hour:02}/OR_ABI-L2-CMIPF-M6C13_G16_s2023{day:03}{hour:02}{minute:02}204_e2023{day:03}{hour:02}{:02}{:03}_c2023{day:03}{hour:02}{:02}{:03}.nc",
                    minute + 9,
                    512,
                    minute + 9,
                    100 + jitter,
                )
            })
            .collect()
    }

    #[test]
    fn names_made_of_times_cost_a_few_bytes_each() {
        let names = goes_names(720);
        let checks: Vec<SourceCheck<'static>> = (0..names.len()).map(|_| SourceCheck::Unchecked).collect();
        let t = SourceTable::build(names.iter().map(String::as_str).zip(&checks));
        let per_name = t.weight() as f64 / names.len() as f64;
        // Front coding alone: about 45 bytes a name.
        // 8.5 here: a whole URL every 32 entries, 4 bytes an entry between, 1 of check.
        assert!(per_name < 10.0, "{per_name:.1} bytes a name");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(t.get(i as u32).unwrap().url, name.as_str(), "entry {i}");
        }
        assert_eq!(SourceTable::decode(t.data.clone(), names.len() as u32, 2).unwrap(), t);
    }

    #[test]
    fn numbers_that_change_width_or_shape_fall_back_to_front_coding() {
        let names = [
            "s3://b/f9.nc",
            "s3://b/f10.nc",
            "s3://b/f11.nc",
            "s3://b/g11.nc",
            "s3://b/g12.nc",
            "s3://b/g13.nc",
            "s3://b/99999999999999999999/1.nc",
            "s3://b/99999999999999999999/2.nc",
            "s3://b/0.nc",
            "s3://b/9.nc",
            "s3://b/5.nc",
            "s3://b/0.nc",
        ];
        let checks: Vec<SourceCheck<'static>> = (0..names.len()).map(|i| SourceCheck::Size(i as u64)).collect();
        let t = SourceTable::build(names.iter().copied().zip(&checks));
        for (i, name) in names.iter().enumerate() {
            let got = t.get(i as u32).unwrap();
            assert_eq!((got.url.as_ref(), got.check), (*name, SourceCheck::Size(i as u64)));
        }
        assert_eq!(SourceTable::decode(t.data.clone(), names.len() as u32, 2).unwrap(), t);
    }

    #[test]
    fn version_2_dictionaries_are_read() {
        // Format 1: shared bytes, suffix length, suffix, check.
        let mut v1 = Vec::new();
        for (shared, suffix) in [(0u8, "s3://b/a1.nc"), (8, "2.nc")] {
            v1.extend_from_slice(&[shared, suffix.len() as u8]);
            v1.extend_from_slice(suffix.as_bytes());
            v1.extend_from_slice(&[SIZE, 3]);
        }
        let t = SourceTable::decode(v1.into(), 2, 1).unwrap();
        assert_eq!(t.get(1).unwrap(), BlockSource { url: "s3://b/a2.nc".into(), check: SourceCheck::Size(3) });
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
            let decoded = SourceTable::decode(t.data.clone(), sources.len() as u32, 2).unwrap();
            prop_assert_eq!(&decoded, &t);
            for (i, (url, check)) in sources.iter().enumerate() {
                let got = decoded.get(i as u32).unwrap();
                prop_assert_eq!(got.url.as_ref(), url.as_str());
                prop_assert_eq!(&got.check, check);
            }
        }

        #[test]
        fn related_names_round_trip(
            steps in proptest::collection::vec((0usize..4, -30i64..300, any::<bool>()), 1..70)
        ) {
            // Names whose numbers move by steps, sometimes past their width, sometimes renamed.
            let mut numbers = [7i64, 120, 30_000, 5];
            let mut names = Vec::new();
            for (which, step, rename) in steps {
                numbers[which] = (numbers[which] + step).max(0);
                let [a, b, c, d] = numbers;
                let stem = if rename { "x" } else { "y" };
                names.push(format!("s3://b{d}/{a:03}/{stem}_{b:04}_{c:06}.nc"));
            }
            let checks: Vec<SourceCheck<'static>> = names.iter().map(|_| SourceCheck::Unchecked).collect();
            let t = SourceTable::build(names.iter().map(String::as_str).zip(&checks));
            prop_assert_eq!(&SourceTable::decode(t.data.clone(), names.len() as u32, 2).unwrap(), &t);
            for (i, name) in names.iter().enumerate() {
                let got = t.get(i as u32).unwrap();
                prop_assert_eq!(got.url.as_ref(), name.as_str());
            }
        }

        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..120), len in 0u32..40) {
            if let Ok(t) = SourceTable::decode(data.clone().into(), len, 2) {
                for i in 0..len + 2 { let _ = t.get(i); }
            }
            if let Ok(t) = SourceTable::decode(data.into(), len, 1) {
                for i in 0..len + 2 { let _ = t.get(i); }
            }
        }
    }
}
