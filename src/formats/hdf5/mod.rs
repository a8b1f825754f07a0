//! HDF5 and netCDF4 files: groups, datasets and their chunk indexes read with `hdf5-reader`
//! (metadata only), turned into Zarr v3 nodes as xarray's h5netcdf engine shows the file.
//!
//! `hdf5-reader` reads through its own `Storage` trait, on an `Arc<dyn Storage>`: the file is
//! handed over shared ([`parse`] takes an `Arc`), and [`FileStorage`] reads from it on whatever
//! thread asks. Our reader's own error (an upstream failure, the driver's budget, the deadline)
//! is kept there and reported as such; any other failure of `hdf5-reader` becomes
//! [`FormatError::Invalid`]. The walk runs on the caller's thread; reads that can overlap
//! (headers of a group's members, chunk indexes) run on a pool of reused threads
//! ([`side_by_side`]), so that a parse starts no thread of its own.

mod attrs;
mod chunks;
mod codecs;
mod dims;
mod links;
mod node;
mod types;
mod walk;

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};

use hdf5_reader::error::Error as Hdf5Error;
use hdf5_reader::{Hdf5File, OpenOptions, Storage, StorageBuffer};

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Largest object header (all its chunks) read: real ones are a few KiB.
const MAX_OBJECT_HEADER_BYTES: usize = 4 << 20;

/// Reads the structure of an HDF5 (or netCDF4) file.
pub fn parse(file: Arc<dyn ByteRanges>, limits: &Limits) -> Result<Parsed, FormatError> {
    // A file all in memory is walked with no read ahead: there is nothing to wait for.
    let ahead = !file.in_memory();
    let storage = Arc::new(FileStorage { file, deadline: limits.deadline, failure: Mutex::new(None) });
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        open_and_walk(Arc::clone(&storage) as Arc<dyn Storage>, limits, ahead)
    }));
    if let Some(error) = storage.failure.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Err(error);
    }
    outcome.unwrap_or_else(|_| Err(FormatError::Invalid("the HDF5 reader failed on it (a panic)".into())))
}

/// `hdf5-reader`'s storage: the file being parsed. The first error of ours is kept (and every
/// later read refused), so that it, not what `hdf5-reader` makes of it, is reported.
struct FileStorage {
    file: Arc<dyn ByteRanges>,
    deadline: Option<std::time::Instant>,
    failure: Mutex<Option<FormatError>>,
}

impl Storage for FileStorage {
    fn len(&self) -> u64 {
        self.file.len()
    }

    fn read_range(&self, offset: u64, len: usize) -> hdf5_reader::error::Result<StorageBuffer> {
        let refused = || Hdf5Error::Other(format!("reading {len} bytes at {offset} failed"));
        if self.failure.lock().unwrap_or_else(PoisonError::into_inner).is_some() {
            return Err(refused());
        }
        let limits = Limits { deadline: self.deadline, ..Limits::default() };
        match limits.check_time().and_then(|()| self.file.read(offset, len as u64)) {
            Ok(bytes) => StorageBuffer::from_shared_owner(Arc::new(bytes), 0, len).map_err(|_| refused()),
            Err(error) => {
                self.failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
                Err(refused())
            }
        }
    }
}

/// Opens the file on `storage` and walks it.
fn open_and_walk(storage: Arc<dyn Storage>, limits: &Limits, ahead: bool) -> Result<Parsed, FormatError> {
    let options = OpenOptions::default()
        .with_chunk_cache_bytes(0)
        .with_max_read_bytes(usize::try_from(limits.max_inline_bytes).unwrap_or(usize::MAX))
        .with_max_object_header_bytes(MAX_OBJECT_HEADER_BYTES);
    let hdf5 = Hdf5File::from_storage_with_options(storage, options).map_err(|e| invalid("the superblock", e))?;
    // The end address is relative to the superblock (or absolute, as the specification reads):
    // allowing for both misses a truncation only inside a user block's length.
    let declared_end = hdf5.superblock().eof_address;
    let superblock_at = hdf5.superblock().base_address;
    if declared_end != u64::MAX && declared_end > hdf5.storage().len().saturating_add(superblock_at) {
        return Err(FormatError::Invalid(format!(
            "its superblock says it ends at byte {declared_end} but it has only {} (truncated?)",
            hdf5.storage().len()
        )));
    }
    walk::walk(&hdf5, limits, ahead)
}

/// Threads of the pool that reads structures side by side, shared by every parse: they mostly
/// wait on the object store.
const SIDE_BY_SIDE_THREADS: usize = 32;

/// Threads of the pool one call of [`side_by_side`] takes at most, so that one file's many
/// datasets do not hold every thread while the other parses wait.
const SIDE_BY_SIDE_PER_PARSE: usize = 8;

/// A job of the pool.
type Job = Box<dyn FnOnce() + Send>;

/// The queue of the pool of [`side_by_side`], its threads started on first use. They are reused:
/// a thread started per read cost more than the parse itself (each new thread's allocator takes
/// fresh pages, which the kernel zeroes: two thirds of a registration's CPU time in `perf`).
/// They sleep on the queue when there is nothing to do: a rayon pool's idle threads spun on
/// `sched_yield` before sleeping, 35-40% of the server's CPU while it registered files.
fn pool() -> Option<&'static mpsc::Sender<Job>> {
    static POOL: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Job>();
        let receiver = Arc::new(Mutex::new(receiver));
        let mut started = 0;
        for i in 0..SIDE_BY_SIDE_THREADS {
            let receiver = Arc::clone(&receiver);
            let thread = std::thread::Builder::new().name(format!("zarrgate-parse-{i}")).spawn(move || {
                loop {
                    let job = receiver.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(job) = job else { return };
                    // A panic is the walk's to meet again, on its own thread, where it is
                    // caught ([`parse`]); the pool's thread lives on.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            });
            started += usize::from(thread.is_ok());
        }
        (started > 0).then_some(sender)
    })
    .as_ref()
}

/// Calls `read` on every item, on the pool's threads at once, when the walk reads ahead
/// (`ahead`: the file is not all in memory already) and there are several, so that the reads
/// they make of a remote file overlap instead of following one another: what they read stays
/// with the file, where the ordered walk finds it again in memory. Items left when the
/// parse's time is up are skipped. Returns when every item has been read (or skipped).
fn side_by_side<T: Send + Sync + 'static>(
    ahead: bool,
    items: Vec<T>,
    limits: &Limits,
    read: impl Fn(&T) + Send + Sync + 'static,
) {
    let Some(queue) = pool().filter(|_| ahead && items.len() > 1) else { return };
    let workers = items.len().min(SIDE_BY_SIDE_PER_PARSE);
    let shared = Arc::new((items, read, AtomicUsize::new(0), limits.clone()));
    let (done, finished) = mpsc::channel::<()>();
    for _ in 0..workers {
        let (shared, done) = (Arc::clone(&shared), done.clone());
        let job: Job = Box::new(move || {
            let (items, read, next, limits) = &*shared;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= items.len() || limits.check_time().is_err() {
                    break;
                }
                read(&items[i]);
            }
            drop(done);
        });
        // A job not queued is one worker fewer; its sender goes with it.
        let _ = queue.send(job);
    }
    drop(done);
    // Every worker's sender dropped, whether it ended or panicked: all are done.
    while finished.recv().is_ok() {}
}

/// `hdf5-reader`'s error about `what`, as ours.
fn invalid(what: &str, error: Hdf5Error) -> FormatError {
    match error {
        Hdf5Error::ResourceLimit(message) => FormatError::TooLarge(format!("{what}: {message}")),
        error => FormatError::Invalid(format!("{what}: {error}")),
    }
}
