//! Scratch space for one registration: append-only logs that keep what a manifest document
//! says in memory up to a budget shared by the whole registration, and in temporary files past
//! it, so that a document of any size is registered in bounded memory.
//!
//! The files are unnamed (`O_TMPFILE` or unlinked at once): the operating system removes them
//! when the registration ends, even if the process dies. A write that fails (a full disk) is
//! remembered by the [`Scratch`] and reported by [`Scratch::check`]; the logs keep counting so
//! that offsets stay consistent, and reading a log that lost data is an error.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A log smaller than this stays in memory even past the budget: many small logs (one per
/// array) are cheap, and writing them out one by one would not be.
const MIN_SPILL: usize = 256 << 10;

/// What one registration may hold in memory, and where the rest goes. Clones share the budget.
#[derive(Debug, Clone)]
pub struct Scratch(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    budget: usize,
    held: AtomicUsize,
    /// Of `held`, what the registration keeps outside the logs ([`Scratch::reserve`]).
    reserved: AtomicUsize,
    dir: Option<PathBuf>,
    /// The first write that failed: its kind and message.
    failure: Mutex<Option<(io::ErrorKind, String)>>,
}

impl Scratch {
    /// Logs hold at most about `budget` bytes in memory in all; the rest goes to unnamed files
    /// in `dir` (the system's temporary directory when `None`).
    pub fn new(budget: usize, dir: Option<PathBuf>) -> Self {
        Self(Arc::new(Shared {
            budget,
            held: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            dir,
            failure: Mutex::new(None),
        }))
    }

    /// Everything in memory: for documents known to be small (and tests).
    pub fn in_memory() -> Self {
        Self::new(usize::MAX, None)
    }

    /// The memory budget, for the sorter that works beside the logs.
    pub fn budget(&self) -> usize {
        self.0.budget
    }

    /// Where spill files go.
    pub fn dir(&self) -> PathBuf {
        self.0.dir.clone().unwrap_or_else(std::env::temp_dir)
    }

    /// Bytes the logs hold in memory now.
    pub fn held(&self) -> usize {
        self.0.held.load(Ordering::Relaxed)
    }

    /// Counts `n` more bytes that the registration holds outside the logs to its end (a join's
    /// state for each file): the logs then spill sooner. What is so reserved in all, or, when
    /// that alone is past the budget, `Err` of it: the registration cannot be held within it.
    pub fn reserve(&self, n: usize) -> Result<usize, usize> {
        self.0.held.fetch_add(n, Ordering::Relaxed);
        let total = self.0.reserved.fetch_add(n, Ordering::Relaxed).saturating_add(n);
        if total > self.0.budget { Err(total) } else { Ok(total) }
    }

    /// The first write that failed, if any; the registration cannot go on after one.
    pub fn check(&self) -> io::Result<()> {
        match self.0.failure.lock().ok().and_then(|f| f.clone()) {
            Some((kind, message)) => Err(io::Error::new(kind, message)),
            None => Ok(()),
        }
    }

    /// Records a failure that ends the registration (reported by [`Scratch::check`]).
    pub fn record_failure(&self, e: &io::Error) {
        self.fail(e.kind(), e.to_string());
    }

    fn fail(&self, kind: io::ErrorKind, message: String) {
        if let Ok(mut f) = self.0.failure.lock()
            && f.is_none()
        {
            *f = Some((kind, message));
        }
    }

    /// Counts `n` more bytes held; true when the budget is now exceeded.
    fn hold(&self, n: usize) -> bool {
        self.0.held.fetch_add(n, Ordering::Relaxed).saturating_add(n) > self.0.budget
    }

    fn release(&self, n: usize) {
        self.0.held.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::in_memory()
    }
}

/// An append-only log of bytes: a file prefix (once the budget was exceeded) and an in-memory
/// tail.
#[derive(Debug)]
pub struct SpillLog {
    scratch: Scratch,
    file: Option<File>,
    /// Bytes in the file; the memory tail follows them.
    spilled: u64,
    mem: Vec<u8>,
    /// A write to the file failed: the log lost data.
    broken: bool,
}

impl SpillLog {
    /// An empty log drawing on `scratch`.
    pub fn new(scratch: &Scratch) -> Self {
        Self { scratch: scratch.clone(), file: None, spilled: 0, mem: Vec::new(), broken: false }
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.spilled + self.mem.len() as u64
    }

    /// True when nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when part of the log is in a file.
    pub fn spilled(&self) -> bool {
        self.spilled > 0
    }

    /// Appends `bytes`; their offset in the log.
    pub fn append(&mut self, bytes: &[u8]) -> u64 {
        let at = self.len();
        self.mem.extend_from_slice(bytes);
        if self.scratch.hold(bytes.len()) && self.mem.len() >= MIN_SPILL {
            self.spill();
        }
        at
    }

    /// Moves the memory tail to the file.
    fn spill(&mut self) {
        let tail = std::mem::take(&mut self.mem);
        self.scratch.release(tail.len());
        self.spilled += tail.len() as u64;
        if self.broken {
            return;
        }
        let written = match &mut self.file {
            Some(f) => f.write_all(&tail),
            None => tempfile::tempfile_in(self.scratch.dir()).and_then(|mut f| {
                f.write_all(&tail)?;
                self.file = Some(f);
                Ok(())
            }),
        };
        if let Err(e) = written {
            self.broken = true;
            let message = format!("writing scratch space under {} failed: {e}", self.scratch.dir().display());
            self.scratch.fail(e.kind(), message);
        }
    }

    /// Reads `len` bytes at `offset` into `out` (replacing its contents).
    pub fn read_at(&self, offset: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        out.clear();
        out.resize(len, 0);
        let mut filled = 0;
        while filled < len {
            let n = self.read_some(offset + filled as u64, &mut out[filled..])?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of a scratch log"));
            }
            filled += n;
        }
        Ok(())
    }

    /// Reads what is at `offset` into `buf`, from the file or the memory tail; 0 at the end.
    fn read_some(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        if self.broken {
            return Err(io::Error::other("a scratch log lost data when its write failed"));
        }
        if offset < self.spilled {
            let want = buf.len().min(usize::try_from(self.spilled - offset).unwrap_or(usize::MAX));
            let file = self.file.as_ref().ok_or_else(|| io::Error::other("scratch file missing"))?;
            file.read_exact_at(&mut buf[..want], offset)?;
            return Ok(want);
        }
        let start = usize::try_from(offset - self.spilled).unwrap_or(usize::MAX).min(self.mem.len());
        let n = buf.len().min(self.mem.len() - start);
        buf[..n].copy_from_slice(&self.mem[start..start + n]);
        Ok(n)
    }

    /// Whether every write to the log went through: the first that failed, if one did.
    pub fn check(&self) -> io::Result<()> {
        self.scratch.check()
    }

    /// A buffered reader of the whole log from its start.
    pub fn reader(&self) -> io::BufReader<LogReader<'_>> {
        io::BufReader::with_capacity(1 << 16, LogReader { log: self, at: 0 })
    }
}

impl Default for SpillLog {
    fn default() -> Self {
        Self::new(&Scratch::in_memory())
    }
}

impl Drop for SpillLog {
    fn drop(&mut self) {
        self.scratch.release(self.mem.len());
    }
}

/// Reads a [`SpillLog`] from its start.
#[derive(Debug)]
pub struct LogReader<'a> {
    log: &'a SpillLog,
    at: u64,
}

impl Read for LogReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.log.read_some(self.at, buf)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// Appends `v` as an LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads an LEB128 varint.
pub fn get_varint(r: &mut impl Read) -> io::Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = get_u8(r)?;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidData, "varint longer than 64 bits in a scratch log"))
}

/// Reads one byte (give it a buffered reader).
pub fn get_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut byte = [0u8; 1];
    r.read_exact(&mut byte)?;
    Ok(byte[0])
}

/// Reads `n` bytes into `out` (replacing its contents).
pub fn get_bytes(r: &mut impl Read, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
    out.clear();
    out.resize(n, 0);
    r.read_exact(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spills_past_the_budget_and_reads_back_across_the_boundary() {
        let scratch = Scratch::new(MIN_SPILL, None);
        let mut log = SpillLog::new(&scratch);
        let data: Vec<u8> = (0..3 * MIN_SPILL + 17).map(|i| (i % 251) as u8).collect();
        for piece in data.chunks(1000) {
            log.append(piece);
        }
        assert!(log.spilled(), "past the budget the log goes to a file");
        assert!(scratch.held() <= 2 * MIN_SPILL, "held {}", scratch.held());
        let mut out = Vec::new();
        log.reader().read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
        let at = log.spilled as usize - 5;
        let mut some = Vec::new();
        log.read_at(at as u64, 10, &mut some).unwrap();
        assert_eq!(some, data[at..at + 10]);
        assert!(log.read_at(data.len() as u64 - 2, 10, &mut some).is_err());
        scratch.check().unwrap();
        drop(log);
        assert_eq!(scratch.held(), 0);
    }

    #[test]
    fn a_failed_spill_is_reported_and_the_log_refuses_reads() {
        let scratch = Scratch::new(0, Some(PathBuf::from("/nonexistent/zarrgate-scratch")));
        let mut log = SpillLog::new(&scratch);
        log.append(&vec![7u8; MIN_SPILL]);
        let e = scratch.check().unwrap_err();
        assert!(e.to_string().contains("/nonexistent/zarrgate-scratch"), "{e}");
        assert!(scratch.check().is_err(), "the failure stays");
        assert!(log.reader().read_to_end(&mut Vec::new()).is_err());
        assert_eq!(log.len(), MIN_SPILL as u64);
    }

    #[test]
    fn what_is_reserved_makes_the_logs_spill_sooner_and_is_refused_past_the_budget() {
        let scratch = Scratch::new(MIN_SPILL + 100, None);
        assert_eq!(scratch.reserve(100), Ok(100));
        let mut log = SpillLog::new(&scratch);
        log.append(&vec![1u8; MIN_SPILL + 1]);
        assert!(log.spilled(), "the log alone is within the budget; with what is reserved, it is not");
        assert_eq!(scratch.held(), 100);
        assert_eq!(scratch.reserve(MIN_SPILL), Ok(MIN_SPILL + 100));
        assert_eq!(scratch.reserve(1), Err(MIN_SPILL + 101));
    }

    #[test]
    fn small_logs_stay_in_memory() {
        let scratch = Scratch::new(10, None);
        let mut log = SpillLog::new(&scratch);
        log.append(b"hello");
        log.append(b" world");
        assert!(!log.spilled());
        let mut out = Vec::new();
        log.read_at(6, 5, &mut out).unwrap();
        assert_eq!(out, b"world");
    }

    proptest::proptest! {
        #[test]
        fn varints_round_trip(values in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..50)) {
            let mut out = Vec::new();
            for v in &values {
                put_varint(&mut out, *v);
            }
            let mut r = &out[..];
            for v in &values {
                proptest::prop_assert_eq!(get_varint(&mut r).unwrap(), *v);
            }
            proptest::prop_assert!(r.is_empty());
        }
    }
}
