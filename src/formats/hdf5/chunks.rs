//! Where a dataset's chunks are: its layout (compact, contiguous, chunked) and, for chunked
//! ones, every chunk index type HDF5 writes (v1 B-tree; single chunk, implicit, fixed array,
//! extensible array and v2 B-tree with `libver="latest"`), read without reading chunk data.

use hdf5_reader::chunk_index::{self, ChunkEntry};
use hdf5_reader::messages::layout::{ChunkIndexing, DataLayout};
use hdf5_reader::{Hdf5File, btree_v1, extensible_array, fixed_array};

use super::invalid;
use crate::formats::{Chunk, FormatError, Limits};

/// HDF5's undefined address: storage never allocated.
const UNDEFINED: u64 = u64::MAX;

/// A dataset's chunk grid and chunks.
#[derive(Debug)]
pub(super) struct Chunking {
    pub chunk_shape: Vec<u64>,
    pub chunks: Vec<(Vec<u64>, Chunk)>,
}

/// What a dataset is: its shape, element size, whether it is filtered, and its name for messages.
pub(super) struct Shape<'a> {
    pub name: &'a str,
    pub dims: &'a [u64],
    pub max_dims: Option<&'a [u64]>,
    pub element_size: usize,
    pub filtered: bool,
}

/// Reads the chunk index of a dataset of `dims` (at most `max_dims`) laid out as `layout`, and
/// drops what it finds: the walk reads the indexes side by side with it first, so that their
/// bytes are fetched at once, then each again, in order, from memory. What goes wrong is left
/// for the walk to meet and report. Layouts whose index is not read from the file (contiguous,
/// compact, single chunk, implicit) read nothing.
pub(super) fn read_index(hdf5: &Hdf5File, layout: &DataLayout, dims: &[u64], max_dims: Option<&[u64]>) {
    let DataLayout::Chunked { address, dims: chunk_dims, chunk_indexing, .. } = layout else { return };
    let read_from_file = !matches!(chunk_indexing, Some(ChunkIndexing::SingleChunk { .. } | ChunkIndexing::Implicit));
    if *address == UNDEFINED || !read_from_file || dims.len() + 1 < chunk_dims.len() || chunk_dims.len() < dims.len() {
        return;
    }
    // The element size matters only to implicit indexes, which are not read.
    let shape = Shape { name: "", dims, max_dims, element_size: 1, filtered: false };
    let _ = entries(hdf5, *address, chunk_dims, chunk_indexing.as_ref(), &shape);
}

/// The chunks of a dataset laid out as `layout`: Ok(Err(why)) when they cannot be served.
pub(super) fn chunking(
    hdf5: &Hdf5File,
    layout: &DataLayout,
    shape: &Shape<'_>,
    limits: &Limits,
    chunk_count: &mut u64,
) -> Result<Result<Chunking, String>, FormatError> {
    let elements = element_count(shape)?;
    let bytes = elements.checked_mul(shape.element_size as u64).ok_or_else(|| too_many(shape))?;
    let whole: Vec<u64> = shape.dims.iter().map(|d| (*d).max(1)).collect();
    let origin = vec![0u64; shape.dims.len()];
    match layout {
        DataLayout::Compact { data } => {
            let chunks = match data.get(..bytes as usize) {
                _ if elements == 0 => Vec::new(),
                Some(data) => vec![(origin, Chunk::Inline(data.to_vec()))],
                None => return Err(at(shape, format!("its compact data holds {} of {bytes} bytes", data.len()))),
            };
            Ok(Ok(Chunking { chunk_shape: whole, chunks }))
        }
        DataLayout::Contiguous { address, .. } => {
            let chunks = match *address {
                _ if *address == UNDEFINED || elements == 0 => Vec::new(),
                address => vec![(
                    origin.clone(),
                    Chunk::Range { offset: inside(hdf5, shape, &origin, address, bytes)?, length: bytes },
                )],
            };
            count(chunk_count, chunks.len() as u64, limits)?;
            Ok(Ok(Chunking { chunk_shape: whole, chunks }))
        }
        DataLayout::Chunked { address, dims, chunk_indexing, .. } => {
            chunked(hdf5, *address, dims, chunk_indexing.as_ref(), shape, limits, chunk_count)
        }
    }
}

/// A chunked dataset's chunks through its index.
fn chunked(
    hdf5: &Hdf5File,
    address: u64,
    dims: &[u32],
    indexing: Option<&ChunkIndexing>,
    shape: &Shape<'_>,
    limits: &Limits,
    chunk_count: &mut u64,
) -> Result<Result<Chunking, String>, FormatError> {
    let rank = shape.dims.len();
    // Layout versions 1-4 may end the chunk dimensions with the element size.
    let dims = if dims.len() == rank + 1 { &dims[..rank] } else { dims };
    if dims.len() != rank || dims.contains(&0) {
        return Err(at(shape, format!("its chunk dimensions {dims:?} do not fit its shape {:?}", shape.dims)));
    }
    let chunk_shape: Vec<u64> = dims.iter().map(|d| u64::from(*d)).collect();
    let chunk_bytes = chunk_shape.iter().try_fold(shape.element_size as u64, |n, d| n.checked_mul(*d));
    let chunk_bytes = chunk_bytes.ok_or_else(|| too_many(shape))?;
    let entries = if address == UNDEFINED || shape.dims.contains(&0) {
        Vec::new()
    } else {
        entries(hdf5, address, dims, indexing, shape)
            .map_err(|e| invalid(&format!("the chunk index of {}", shape.name), e))?
    };
    let mut chunks = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        if i % 4096 == 0 {
            limits.check_time()?;
        }
        if entry.filter_mask != 0 {
            return Ok(Err(format!(
                "has a chunk stored with a filter skipped (mask {:#x}), which Zarr cannot express",
                entry.filter_mask
            )));
        }
        let Some(index) = grid_index(&entry, &chunk_shape, shape)? else { continue };
        let length = match entry.size {
            0 if !shape.filtered => chunk_bytes,
            0 => return Err(at(shape, format!("its chunk {index:?} has no bytes"))),
            size => size,
        };
        let offset = inside(hdf5, shape, &index, entry.address, length)?;
        count(chunk_count, 1, limits)?;
        chunks.push((index, Chunk::Range { offset, length }));
    }
    chunks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = chunks.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(at(shape, format!("its chunk index lists the chunk {:?} twice", pair[0].0)));
    }
    Ok(Ok(Chunking { chunk_shape, chunks }))
}

/// The chunk index's entries, by index type.
fn entries(
    hdf5: &Hdf5File,
    address: u64,
    dims: &[u32],
    indexing: Option<&ChunkIndexing>,
    shape: &Shape<'_>,
) -> hdf5_reader::error::Result<Vec<ChunkEntry>> {
    let storage = hdf5.storage();
    let (offset_size, length_size) = (hdf5.superblock().offset_size, hdf5.superblock().length_size);
    let rank = shape.dims.len();
    match indexing {
        None => {
            let leaves = btree_v1::collect_btree_v1_leaves_storage(
                storage,
                address,
                offset_size,
                length_size,
                Some(rank as u32),
                dims,
                None,
            )?;
            leaves.into_iter().map(|(key, address)| v1_entry(key, address, rank)).collect()
        }
        Some(ChunkIndexing::SingleChunk { filtered_size, filters }) => {
            Ok(vec![chunk_index::single_chunk_entry(address, *filtered_size, *filters, rank)])
        }
        Some(ChunkIndexing::Implicit) => chunk_index::collect_implicit_chunk_entries(
            address,
            shape.dims,
            dims,
            shape.element_size,
            None,
            storage.len(),
        ),
        Some(ChunkIndexing::FixedArray { .. }) => fixed_array::collect_fixed_array_chunk_entries_storage(
            storage,
            address,
            offset_size,
            length_size,
            shape.dims,
            dims,
            None,
        ),
        Some(ChunkIndexing::ExtensibleArray { .. }) => {
            extensible_array::collect_extensible_array_chunk_entries_storage(
                storage,
                address,
                offset_size,
                length_size,
                shape.dims,
                shape.max_dims,
                dims,
                None,
            )
        }
        Some(ChunkIndexing::BTreeV2) => chunk_index::collect_v2_chunk_entries_storage(
            storage,
            address,
            offset_size,
            length_size,
            rank as u32,
            dims,
            None,
        ),
    }
}

/// A v1 B-tree leaf as a chunk entry (its key ends with an offset into the element).
fn v1_entry(key: btree_v1::BTreeV1Key, address: u64, rank: usize) -> hdf5_reader::error::Result<ChunkEntry> {
    match key {
        btree_v1::BTreeV1Key::RawData { chunk_size, filter_mask, offsets } if offsets.len() >= rank => {
            Ok(ChunkEntry { address, size: u64::from(chunk_size), filter_mask, offsets: offsets[..rank].to_vec() })
        }
        _ => Err(hdf5_reader::error::Error::InvalidData("a chunk B-tree holds a key that is not a chunk's".into())),
    }
}

/// The chunk's grid index, or None for a chunk wholly outside the extent (HDF5 keeps chunks
/// allocated before a dataset shrank).
fn grid_index(entry: &ChunkEntry, chunk_shape: &[u64], shape: &Shape<'_>) -> Result<Option<Vec<u64>>, FormatError> {
    if entry.offsets.len() != chunk_shape.len() {
        return Err(at(shape, format!("a chunk has {} coordinates", entry.offsets.len())));
    }
    if entry.address == UNDEFINED || entry.offsets.iter().zip(shape.dims).any(|(o, d)| o >= d) {
        return Ok(None);
    }
    let misaligned = entry.offsets.iter().zip(chunk_shape).any(|(o, c)| o % c != 0);
    if misaligned {
        return Err(at(shape, format!("its chunk at {:?} is not on its chunk grid {chunk_shape:?}", entry.offsets)));
    }
    Ok(Some(entry.offsets.iter().zip(chunk_shape).map(|(o, c)| o / c).collect()))
}

/// The file offset of `length` bytes at HDF5 address `address`, which must lie in the file.
fn inside(hdf5: &Hdf5File, shape: &Shape<'_>, index: &[u64], address: u64, length: u64) -> Result<u64, FormatError> {
    let end = address.checked_add(length).filter(|end| *end <= hdf5.storage().len());
    if end.is_none() {
        return Err(at(
            shape,
            format!("its chunk {index:?} ({length} bytes at {address}) is past the end of the file (truncated?)"),
        ));
    }
    address
        .checked_add(hdf5.superblock().base_address)
        .ok_or_else(|| at(shape, format!("its chunk {index:?} is past any file")))
}

/// The number of elements, or TooLarge when it overflows.
fn element_count(shape: &Shape<'_>) -> Result<u64, FormatError> {
    shape.dims.iter().try_fold(1u64, |n, d| n.checked_mul(*d)).ok_or_else(|| too_many(shape))
}

/// Counts `n` more chunks against the file's limit.
fn count(chunk_count: &mut u64, n: u64, limits: &Limits) -> Result<(), FormatError> {
    *chunk_count = chunk_count.saturating_add(n);
    if *chunk_count > limits.max_chunks {
        return Err(FormatError::TooLarge(format!(
            "it has more than {} chunks (limits.max_chunks)",
            limits.max_chunks
        )));
    }
    Ok(())
}

fn too_many(shape: &Shape<'_>) -> FormatError {
    at(shape, format!("its shape {:?} overflows", shape.dims))
}

fn at(shape: &Shape<'_>, what: String) -> FormatError {
    FormatError::Invalid(format!("dataset {}: {what}", shape.name))
}
