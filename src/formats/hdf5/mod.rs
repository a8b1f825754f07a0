//! HDF5 and netCDF4 files: groups, datasets and their chunk indexes read with `hdf5-reader`
//! (metadata only), turned into Zarr v3 nodes as xarray's h5netcdf engine shows the file.
//!
//! `hdf5-reader` reads through its own `Storage` trait, whose `Arc<dyn Storage>` must be
//! `'static`, while a parser is handed a borrowed `&dyn ByteRanges`. So the walk runs on a scoped
//! thread whose storage sends each read to this thread, which serves it from the borrowed reader.
//! Our reader's own error (an upstream failure, the driver's budget, the deadline) is kept here
//! and reported as such; any other failure of `hdf5-reader` becomes [`FormatError::Invalid`]. A
//! panic in the walk (there should be none) is caught by the thread's join and reported too.

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

use std::sync::{Arc, Mutex, PoisonError, mpsc};

use hdf5_reader::error::Error as Hdf5Error;
use hdf5_reader::{Hdf5File, OpenOptions, Storage, StorageBuffer};

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Largest object header (all its chunks) read: real ones are a few KiB.
const MAX_OBJECT_HEADER_BYTES: usize = 4 << 20;

/// One read the walk asks for: offset, length, and where to answer.
type ReadRequest = (u64, usize, mpsc::SyncSender<Result<StorageBuffer, ()>>);

/// Reads the structure of an HDF5 (or netCDF4) file.
pub fn parse(file: &dyn ByteRanges, limits: &Limits) -> Result<Parsed, FormatError> {
    let (requests, incoming) = mpsc::channel::<ReadRequest>();
    let storage = Arc::new(ChannelStorage { len: file.len(), requests });
    let read_error = Mutex::new(None);
    std::thread::scope(|scope| {
        let walker = scope.spawn(move || open_and_walk(storage, limits));
        // Each read is served on a thread of its own, so that the walk's threads (it reads the
        // chunk indexes side by side) wait on the object store together. They are as many as
        // the reads waiting, at most one per walking thread.
        for (offset, len, answer) in incoming {
            let read_error = &read_error;
            scope.spawn(move || {
                let result = serve(file, limits, offset, len, read_error);
                let _ = answer.send(result);
            });
        }
        let outcome = walker.join();
        if let Some(error) = read_error.lock().unwrap_or_else(PoisonError::into_inner).take() {
            return Err(error);
        }
        match outcome {
            Ok(result) => result,
            Err(_) => Err(FormatError::Invalid("the HDF5 reader failed on it (a panic)".into())),
        }
    })
}

/// One read for the walk, from our reader. The first error of ours is kept (and every later
/// read refused), so that it, not what `hdf5-reader` makes of it, is reported.
fn serve(
    file: &dyn ByteRanges,
    limits: &Limits,
    offset: u64,
    len: usize,
    read_error: &Mutex<Option<FormatError>>,
) -> Result<StorageBuffer, ()> {
    let failed = || read_error.lock().unwrap_or_else(PoisonError::into_inner).is_some();
    if failed() {
        return Err(());
    }
    let read = limits.check_time().and_then(|()| file.read(offset, len as u64));
    match read {
        Ok(bytes) => StorageBuffer::from_shared_owner(Arc::new(bytes), 0, len).map_err(|_| ()),
        Err(error) => {
            read_error.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
            Err(())
        }
    }
}

/// Opens the file on the channel storage and walks it.
fn open_and_walk(storage: Arc<ChannelStorage>, limits: &Limits) -> Result<Parsed, FormatError> {
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
    walk::walk(&hdf5, limits)
}

/// Structures read side by side by [`side_by_side`].
const SIDE_BY_SIDE: usize = 8;

/// Calls `read` on every item on up to [`SIDE_BY_SIDE`] threads at once (items in order, each
/// once), so that the reads they make of a remote file overlap instead of following one
/// another: what they read stays with the file, where the ordered walk finds it again in
/// memory. Stops taking items once the parse's time is up.
fn side_by_side<T: Sync>(items: &[T], limits: &Limits, read: impl Fn(&T) + Sync) {
    if items.len() < 2 {
        return;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..SIDE_BY_SIDE.min(items.len()) {
            scope.spawn(|| {
                while let Some(item) = items.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    if limits.check_time().is_err() {
                        return;
                    }
                    read(item);
                }
            });
        }
    });
}

/// `hdf5-reader`'s error about `what`, as ours.
fn invalid(what: &str, error: Hdf5Error) -> FormatError {
    match error {
        Hdf5Error::ResourceLimit(message) => FormatError::TooLarge(format!("{what}: {message}")),
        error => FormatError::Invalid(format!("{what}: {error}")),
    }
}

/// `hdf5-reader`'s storage: each read is sent to the parsing thread and answered from there.
struct ChannelStorage {
    len: u64,
    requests: mpsc::Sender<ReadRequest>,
}

impl Storage for ChannelStorage {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_range(&self, offset: u64, len: usize) -> hdf5_reader::error::Result<StorageBuffer> {
        let refused = || Hdf5Error::Other(format!("reading {len} bytes at {offset} failed"));
        let (answer, answered) = mpsc::sync_channel(1);
        self.requests.send((offset, len, answer)).map_err(|_| refused())?;
        answered.recv().map_err(|_| refused())?.map_err(|()| refused())
    }
}
