//! Hostile files and failing readers: limits, truncations, flipped bytes, a cyclic and a
//! duplicating chunk B-tree, an upstream failure. Always an error (or a result), never a panic
//! or a hang.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::parse;
use super::tests::{FILES, fixture};
use crate::formats::{ByteRanges, FormatError, Limits};

#[test]
fn limits_are_kept() {
    let file = fixture("earliest.h5");
    let few_chunks = Limits { max_chunks: 10, ..Limits::default() };
    assert!(
        matches!(parse(Arc::new(file.clone()), &few_chunks), Err(FormatError::TooLarge(m)) if m.contains("max_chunks"))
    );
    let few_nodes = Limits { max_nodes: 3, ..Limits::default() };
    assert!(
        matches!(parse(Arc::new(file.clone()), &few_nodes), Err(FormatError::TooLarge(m)) if m.contains("max_nodes"))
    );
    let shallow = Limits { max_depth: 1, ..Limits::default() };
    assert!(
        matches!(parse(Arc::new(file.clone()), &shallow), Err(FormatError::TooLarge(m)) if m.contains("group sub") && m.contains("max_depth"))
    );
    let exactly = Limits { max_nodes: 19, ..Limits::default() };
    assert!(parse(Arc::new(file.clone()), &exactly).is_ok(), "earliest.h5 has 2 groups and 17 datasets");
    let one_fewer = Limits { max_nodes: 18, ..Limits::default() };
    assert!(parse(Arc::new(file.clone()), &one_fewer).is_err());
    let late = Limits { deadline: Some(Instant::now()), ..Limits::default() };
    assert!(matches!(parse(Arc::new(file.clone()), &late), Err(FormatError::TooLarge(_))));
    let no_inline = Limits { max_inline_bytes: 4, ..Limits::default() };
    let parsed = parse(Arc::new(file.clone()), &no_inline).unwrap();
    assert!(!parsed.nodes.contains_key("compact") && !parsed.nodes.contains_key("vlen_strings"));
    assert!(
        parsed.warnings.iter().any(|w| w.contains("compact") && w.contains("max_inline_bytes")),
        "{:?}",
        parsed.warnings
    );
}

/// A reader that fails upstream after `after` reads.
struct Failing {
    file: Bytes,
    after: std::sync::atomic::AtomicUsize,
}

impl ByteRanges for Failing {
    fn len(&self) -> u64 {
        ByteRanges::len(&self.file)
    }

    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError> {
        if self.after.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(FormatError::Read("the object store said 503".into()));
        }
        self.file.read(offset, len)
    }
}

#[test]
fn an_upstream_failure_is_reported_as_ours() {
    for after in [0, 1, 5, 20] {
        let failing = Failing { file: fixture("netcdf4.nc"), after: after.into() };
        assert_eq!(
            parse(Arc::new(failing), &Limits::default()),
            Err(FormatError::Read("the object store said 503".into())),
            "after {after}"
        );
    }
}

#[test]
fn truncated_files_are_refused() {
    for file in FILES {
        let bytes = fixture(file);
        let len = bytes.len();
        for cut in (0..len).step_by((len / 97).max(1)).chain([len - 1]) {
            let result = parse(Arc::new(bytes.slice(..cut)), &Limits::default());
            assert!(result.is_err(), "{file} cut at {cut} of {len} parsed");
        }
    }
}

/// A file as a remote one looks to the parser: not all in memory, so that its structures are
/// read ahead, side by side on the pool (`side_by_side`), as a file past
/// `files.first_read_bytes` is.
struct Remote(Bytes);

impl ByteRanges for Remote {
    fn len(&self) -> u64 {
        ByteRanges::len(&self.0)
    }

    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError> {
        self.0.read(offset, len)
    }
}

/// `bytes` to parse, every other time as a remote file (read ahead on the pool).
fn either_way(bytes: Vec<u8>, i: usize) -> Arc<dyn ByteRanges> {
    if i.is_multiple_of(2) { Arc::new(Bytes::from(bytes)) } else { Arc::new(Remote(Bytes::from(bytes))) }
}

#[test]
fn flipped_bytes_never_panic_or_hang() {
    for file in FILES {
        let bytes = fixture(file);
        let started = Instant::now();
        for (i, at) in (0..bytes.len()).step_by((bytes.len() / 300).max(1)).enumerate() {
            let mut flipped = bytes.to_vec();
            flipped[at] ^= [0xff, 0x01, 0x80, 0x10][(i / 2) % 4];
            let limits = Limits { deadline: Some(Instant::now() + Duration::from_secs(5)), ..Limits::default() };
            let _ = parse(either_way(flipped, i), &limits);
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{file}");
    }
}

#[test]
fn a_file_read_ahead_parses_as_one_in_memory() {
    for file in FILES {
        let bytes = fixture(file);
        let in_memory = parse(Arc::new(bytes.clone()), &Limits::default()).unwrap();
        let remote = parse(Arc::new(Remote(bytes)), &Limits::default()).unwrap();
        assert_eq!(remote, in_memory, "{file}");
    }
}

#[test]
fn a_cyclic_chunk_btree_is_refused_quickly() {
    let mut bytes = fixture("earliest.h5").to_vec();
    // Find an internal v1 B-tree node of raw-data chunks (type 1, level > 0) and point its
    // first child at itself.
    let internal = (0..bytes.len() - 8)
        .find(|&i| &bytes[i..i + 4] == b"TREE" && bytes[i + 4] == 1 && bytes[i + 5] > 0)
        .expect("earliest.h5 has a chunk B-tree of two levels");
    let entries_used = u16::from_le_bytes([bytes[internal + 6], bytes[internal + 7]]);
    assert!(entries_used > 1);
    // signature 4, type 1, level 1, entries 2, siblings 2x8; then key (4+4+8*(rank+1)), child 8.
    let key = 4 + 4 + 8 * 2;
    let child = internal + 24 + key;
    bytes[child..child + 8].copy_from_slice(&(internal as u64).to_le_bytes());
    // In memory, and as a remote file whose chunk indexes are read ahead on the pool first.
    for i in 0..2 {
        let started = Instant::now();
        let result = parse(either_way(bytes.clone(), i), &Limits::default());
        assert!(matches!(result, Err(FormatError::Invalid(_))), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[test]
fn the_read_ahead_pool_reads_every_item_and_outlives_a_panic() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let limits = Limits::default();
    // More calls whose every item panics than the pool has threads: were a thread lost to each
    // panic, none would be left, and the last call's items would go unread.
    for _ in 0..super::SIDE_BY_SIDE_THREADS + 4 {
        super::side_by_side(true, vec![1, 2, 3], &limits, |_: &i32| panic!("a hostile structure"));
    }
    let read = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&read);
    super::side_by_side(true, (0..100).collect(), &limits, move |i: &usize| {
        counted.fetch_add(*i, Ordering::SeqCst);
    });
    assert_eq!(read.load(Ordering::SeqCst), (0..100).sum::<usize>());
    // Past the deadline, and with nothing to wait for, nothing is read.
    let late = Limits { deadline: Some(Instant::now()), ..Limits::default() };
    for (ahead, limits) in [(true, &late), (false, &limits)] {
        let counted = Arc::clone(&read);
        super::side_by_side(ahead, (0..100).collect(), limits, move |_: &usize| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
    }
    assert_eq!(read.load(Ordering::SeqCst), (0..100).sum::<usize>());
}

#[test]
fn a_chunk_listed_twice_is_refused() {
    let mut bytes = fixture("earliest.h5").to_vec();
    // A leaf v1 B-tree node of raw-data chunks of a 1-d dataset: give its second key the
    // first one's chunk offset.
    let leaf = (0..bytes.len() - 8)
        .find(|&i| {
            let chunk_size = bytes.get(i + 24..i + 28) == Some(&4u32.to_le_bytes()[..]);
            &bytes[i..i + 4] == b"TREE" && bytes[i + 4] == 1 && bytes[i + 5] == 0 && bytes[i + 6] > 1 && chunk_size
        })
        .expect("earliest.h5 has a chunk B-tree leaf of many_chunks (4-byte chunks)");
    let key = 4 + 4 + 8 * 2;
    let first = leaf + 24 + 8;
    let second = first + key + 8;
    let offset: Vec<u8> = bytes[first..first + 8].to_vec();
    bytes[second..second + 8].copy_from_slice(&offset);
    let result = parse(Arc::new(Bytes::from(bytes)), &Limits::default());
    assert!(matches!(&result, Err(FormatError::Invalid(m)) if m.contains("twice")), "{result:?}");
}

/// A reader that counts the reads and bytes asked of it.
struct Counting {
    file: Bytes,
    reads: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

impl ByteRanges for Counting {
    fn len(&self) -> u64 {
        ByteRanges::len(&self.file)
    }

    fn read(&self, offset: u64, len: u64) -> Result<Bytes, FormatError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.bytes.fetch_add(len, std::sync::atomic::Ordering::SeqCst);
        self.file.read(offset, len)
    }
}

#[test]
fn only_metadata_is_read() {
    for file in FILES {
        let counting = Arc::new(Counting { file: fixture(file), reads: 0.into(), bytes: 0.into() });
        parse(Arc::clone(&counting) as Arc<dyn ByteRanges>, &Limits::default()).unwrap();
        let ordering = std::sync::atomic::Ordering::SeqCst;
        let (reads, bytes) = (counting.reads.load(ordering), counting.bytes.load(ordering));
        eprintln!("{file}: {reads} reads, {bytes} bytes of {}", ByteRanges::len(&counting.file));
        assert!(reads < 2000, "{file}: {reads} reads");
    }
}
