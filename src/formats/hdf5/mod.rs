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

use std::sync::Arc;
use std::sync::mpsc;

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
    std::thread::scope(|scope| {
        let walker = scope.spawn(move || open_and_walk(storage, limits));
        let mut read_error = None;
        for (offset, len, answer) in incoming {
            let result = serve(file, limits, offset, len, &mut read_error);
            let _ = answer.send(result);
        }
        let outcome = walker.join();
        if let Some(error) = read_error {
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
    read_error: &mut Option<FormatError>,
) -> Result<StorageBuffer, ()> {
    if read_error.is_some() {
        return Err(());
    }
    let read = limits.check_time().and_then(|()| file.read(offset, len as u64));
    match read {
        Ok(bytes) => StorageBuffer::from_shared_owner(Arc::new(bytes), 0, len).map_err(|_| ()),
        Err(error) => {
            *read_error = Some(error);
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
