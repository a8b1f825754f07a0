//! Block encodings compared: the stored form of a manifest block (what PostgreSQL keeps and a
//! cold read fetches and decodes), for blocks of 1,024 to 65,536 references.
//!
//!   cargo run --release --example block_encoding            # prints a table, writes bench/results/block_encoding.json
//!
//! Encodings:
//! - `packed`: what zarrgate stores (block version 3): the records bit-packed, each field from the
//!   block's smallest value in the bits its range needs, after the block's source dictionary
//!   (URLs front-coded or coded by their numbers); the cache keeps the same form with long ETags
//!   as digests (`memory B/ref`), and a lookup unpacks one record and decodes its URL from the
//!   nearest restart point (`lookup ns`, a reference with its URL, mean over the block). Until
//!   stop 48 it was `fixed`: 16 bytes per reference (offset u64, length u32, source u32).
//! - `varint`: LEB128 source, length, and offset as the zigzag difference from where the previous
//!   chunk ended (consecutive chunks of one file cost one byte for it).
//! - `packed+zstd`, `varint+zstd`: the same, compressed with zstd level 3.
//!
//! - `fixed (v1 strings)`: the previous source dictionary, for the `file per chunk` layout: a URL
//!   and an ETag string per source, kept as two heap strings each in memory.
//!
//! Four layouts of references: `sequential` (chunks one after the other in a few files, as in
//! the netCDF/HDF5 files VirtualiZarr indexes, lengths 8-16 KiB like compressed chunks),
//! `scattered` (each chunk in one of 64 files at a random offset: the worst case for deltas),
//! `file per chunk` (each chunk the one chunk of a daily file with an S3 MD5 ETag: contiguous
//! netCDF3/HDF5 time series) and `GOES names` (the same, the files named as GOES ABI files are,
//! every ten minutes, with start, end and creation times). `memory B/ref` is the decoded block's weight in the cache.
//! Every figure is the median of 7 runs.

use std::time::Instant;

use zarrgate::zarr::block::{BlockBuilder, ChunkRef, ManifestBlock, SourceCheck};

/// A small deterministic generator (xorshift), so every run sees the same blocks.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Sequential,
    Scattered,
    FilePerChunk,
    GoesNames,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Scattered => "scattered",
            Self::FilePerChunk => "file per chunk",
            Self::GoesNames => "GOES names",
        }
    }
}

fn block(n: u32, layout: Layout) -> ManifestBlock {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(n) ^ layout as u64);
    let mut b = BlockBuilder::new(n);
    let mut offset = 4096u64;
    for slot in 0..n {
        let length = 8192 + (rng.next() % 8192) as u32;
        if layout == Layout::GoesNames {
            let minutes = slot * 10;
            let (day, hour, minute) = (1 + minutes / 1440, minutes / 60 % 24, minutes % 60);
            let created = 100 + rng.next() % 900;
            let url = format!(
                "s3://noaa-goes16/ABI-L2-CMIPF/2023/{day:03}/{hour:02}/OR_ABI-L2-CMIPF-M6C13_G16_s2023{day:03}{hour:02}{minute:02}204_e2023{day:03}{hour:02}{:02}512_c2023{day:03}{hour:02}{:02}{created:03}.nc",
                minute + 9,
                minute + 9
            );
            let etag = format!("\"{:016x}{:016x}\"", rng.next(), rng.next());
            b.push_virtual(slot, &url, SourceCheck::ETag(etag.into()), 4096, length);
            continue;
        }
        if layout == Layout::FilePerChunk {
            let url = format!("s3://era5-archive/reanalysis/2t/era5_2t_{:06}.nc", 20_000 + slot);
            let etag = format!("\"{:016x}{:016x}\"", rng.next(), rng.next());
            b.push_virtual(slot, &url, SourceCheck::ETag(etag.into()), 4096, length);
            continue;
        }
        let (file, at) = if layout == Layout::Scattered {
            (rng.next() % 64, rng.next() % (1 << 36))
        } else {
            let at = offset;
            offset += u64::from(length);
            (u64::from(slot) * 8 / u64::from(n), at)
        };
        let url = format!("s3://era5-archive/reanalysis/2024/file-{file:03}.nc");
        b.push_virtual(slot, &url, SourceCheck::Unchecked, at, length);
    }
    b.finish()
}

/// Stored and in-memory bytes of the block with version 1's dictionary: per source a URL and an
/// ETag, each a length and the text when stored, each a heap string (16-byte pointer and length,
/// 16 bytes of allocator overhead) in memory.
fn v1_sizes(b: &ManifestBlock, n: u32) -> (usize, usize) {
    let mut seen = std::collections::HashSet::new();
    let (mut stored, mut memory) = (29 + 16 * n as usize, 64 + 16 * n as usize);
    for (_, chunk) in b.iter() {
        if let ChunkRef::Virtual { source, .. } = chunk
            && seen.insert(source.url.to_string())
        {
            let etag = match &source.check {
                SourceCheck::ETag(e) => e.len(),
                _ => 0,
            };
            stored += 8 + source.url.len() + etag;
            memory += 32 + source.url.len() + etag + 2 * 16;
        }
    }
    (stored, memory)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(data: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = data[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

/// The varint form: the sources as `fixed` stores them (a header with the dictionary), then per
/// reference source, length, zigzag(offset - end of previous chunk).
fn varint_encode(block: &ManifestBlock, urls: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, urls.len() as u64);
    for u in urls {
        put_varint(&mut out, u.len() as u64);
        out.extend_from_slice(u.as_bytes());
    }
    let mut end = 0u64;
    for (_, chunk) in block.iter() {
        if let ChunkRef::Virtual { source, offset, length } = chunk {
            let s = urls.iter().position(|u| **u == *source.url).unwrap_or(0);
            put_varint(&mut out, s as u64);
            put_varint(&mut out, length);
            let delta = offset as i64 - end as i64;
            put_varint(&mut out, ((delta << 1) ^ (delta >> 63)) as u64);
            end = offset + length;
        }
    }
    out
}

/// Decodes the varint form into the fixed-width records the cache would hold.
fn varint_decode(data: &[u8]) -> Vec<(u64, u32, u32)> {
    let mut at = 0;
    let n = get_varint(data, &mut at);
    for _ in 0..n {
        let len = get_varint(data, &mut at) as usize;
        at += len;
    }
    let mut records = Vec::new();
    let mut end = 0u64;
    while at < data.len() {
        let source = get_varint(data, &mut at) as u32;
        let length = get_varint(data, &mut at);
        let z = get_varint(data, &mut at);
        let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
        let offset = (end as i64 + delta) as u64;
        records.push((offset, length as u32, source));
        end = offset + length;
    }
    records
}

/// Median nanoseconds of `f`, over 7 runs of enough repetitions to last about 20 ms each.
fn time(mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    f();
    let once = started.elapsed().as_nanos().max(1) as f64;
    let reps = ((20e6 / once) as usize).clamp(1, 100_000);
    let mut runs: Vec<f64> = (0..7)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..reps {
                f();
            }
            started.elapsed().as_nanos() as f64 / reps as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[3]
}

fn main() {
    let mut rows = Vec::new();
    println!(
        "{:<15} {:>7} {:<19} {:>10} {:>10} {:>12} {:>12} {:>12} {:>10}",
        "layout", "refs", "encoding", "bytes", "B/ref", "memory B/ref", "encode us", "decode us", "lookup ns"
    );
    let mut row = |layout: Layout,
                   n: u32,
                   name: &str,
                   bytes: usize,
                   memory: Option<usize>,
                   enc: f64,
                   dec: f64,
                   lookup: f64| {
        let per_ref = bytes as f64 / f64::from(n);
        let memory = memory.map(|m| m as f64 / f64::from(n));
        let shown = memory.map_or("-".to_owned(), |m| format!("{m:.2}"));
        let layout = layout.name();
        println!(
            "{layout:<15} {n:>7} {name:<19} {bytes:>10} {per_ref:>10.2} {shown:>12} {:>12.1} {:>12.1} {:>10.0}",
            enc / 1e3,
            dec / 1e3,
            lookup
        );
        let memory = memory.map_or("null".to_owned(), |m| format!("{m:.3}"));
        let us = |x: f64| if x.is_nan() { "null".to_owned() } else { format!("{:.2}", x / 1e3) };
        rows.push(format!(
            r#"{{"layout": "{layout}", "refs": {n}, "encoding": "{name}", "bytes": {bytes}, "bytes_per_ref": {per_ref:.3}, "memory_bytes_per_ref": {memory}, "encode_us": {}, "decode_us": {}, "lookup_ns": {}}}"#,
            us(enc),
            us(dec),
            if lookup.is_nan() { "null".to_owned() } else { format!("{lookup:.0}") }
        ));
    };
    for layout in [Layout::Sequential, Layout::Scattered, Layout::FilePerChunk, Layout::GoesNames] {
        let one_file_each = matches!(layout, Layout::FilePerChunk | Layout::GoesNames);
        let sizes: &[u32] = if one_file_each { &[1024, 4096] } else { &[1024, 4096, 16_384, 65_536] };
        for &n in sizes {
            let b = block(n, layout);
            let mut urls: Vec<String> = b
                .iter()
                .filter_map(|(_, c)| match c {
                    ChunkRef::Virtual { source, .. } => Some(source.url.to_string()),
                    _ => None,
                })
                .collect();
            urls.sort();
            urls.dedup();
            let fixed = b.encode();
            let enc = time(|| drop(std::hint::black_box(b.encode())));
            let dec = time(|| drop(std::hint::black_box(ManifestBlock::decode(&fixed))));
            let served = b.clone().for_serving();
            let lookup = time(|| {
                for slot in 0..n {
                    drop(std::hint::black_box(served.get(slot)));
                }
            }) / f64::from(n);
            row(layout, n, "packed", fixed.len(), Some(served.weight()), enc, dec, lookup);
            if one_file_each {
                let (stored, memory) = v1_sizes(&b, n);
                row(layout, n, "fixed (v1 strings)", stored, Some(memory), f64::NAN, f64::NAN, f64::NAN);
                continue;
            }
            let varint = varint_encode(&b, &urls);
            let enc = time(|| drop(std::hint::black_box(varint_encode(&b, &urls))));
            let dec = time(|| drop(std::hint::black_box(varint_decode(&varint))));
            row(layout, n, "varint", varint.len(), None, enc, dec, f64::NAN);
            let z = zstd::bulk::compress(&fixed, 3).unwrap_or_default();
            let enc = time(|| drop(std::hint::black_box(zstd::bulk::compress(&b.encode(), 3))));
            let dec = time(|| {
                let raw = zstd::bulk::decompress(&z, fixed.len()).unwrap_or_default();
                drop(std::hint::black_box(ManifestBlock::decode(&raw)));
            });
            row(layout, n, "packed+zstd", z.len(), None, enc, dec, f64::NAN);
            let z = zstd::bulk::compress(&varint, 3).unwrap_or_default();
            let enc = time(|| drop(std::hint::black_box(zstd::bulk::compress(&varint_encode(&b, &urls), 3))));
            let dec = time(|| {
                let raw = zstd::bulk::decompress(&z, varint.len()).unwrap_or_default();
                drop(std::hint::black_box(varint_decode(&raw)));
            });
            row(layout, n, "varint+zstd", z.len(), None, enc, dec, f64::NAN);
        }
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/results/block_encoding.json");
    let json = format!("[\n  {}\n]\n", rows.join(",\n  "));
    if let Err(e) = std::fs::write(&out, json) {
        eprintln!("cannot write {}: {e}", out.display());
    }
}
