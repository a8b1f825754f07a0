//! How an image's contiguous data unit is cut into chunks of about 1 to 8 MiB, each one byte
//! range: the fastest axes whole, one axis cut into runs of rows, the slower ones one index a
//! chunk (`[1, k, ny, nx]`). A regular grid's last chunk along the cut axis is full-sized, so
//! where the rows do not divide evenly the last chunk's range reaches past the data: allowed
//! only into the bytes the file has after the data (its padding), else the rows are cut at a
//! divisor of the axis instead.

use crate::formats::{Chunk, FormatError, Limits};

/// Chunks are aimed at this size...
const TARGET: u64 = 4 << 20;
/// ...and come out between a quarter of it and twice it, unless the axis lengths allow no such
/// cut (a prime number of rows in a file with no padding after the data).
const MAX: u64 = 2 * TARGET;

/// Where an image's data lies, as the grid sees it.
pub struct Layout<'a> {
    /// The array's shape, slowest axis first.
    pub shape: &'a [u64],
    pub item: u64,
    pub data_start: u64,
    /// Bytes after the data that belong to the file (the block padding, the next HDUs).
    pub slack: u64,
}

/// The chunk shape for `layout` (no axis may be 0).
pub fn chunk_shape(layout: &Layout, limits: &Limits) -> Result<Vec<u64>, FormatError> {
    let shape = layout.shape;
    // The first axis (from the fastest) that cannot be taken whole.
    let mut inner = layout.item;
    let mut cut = None;
    for (axis, length) in shape.iter().enumerate().rev() {
        match inner.checked_mul(*length) {
            Some(bytes) if bytes <= TARGET => inner = bytes,
            _ => {
                cut = Some(axis);
                break;
            }
        }
    }
    let Some(axis) = cut else { return Ok(shape.to_vec()) };
    let rows = rows(shape[axis], inner, layout.slack, limits)?;
    let mut chunk = vec![1; axis];
    chunk.push(rows);
    chunk.extend_from_slice(&shape[axis + 1..]);
    Ok(chunk)
}

/// How many rows of `row` bytes (at most [`TARGET`]) make a chunk along an axis of `length`.
fn rows(length: u64, row: u64, slack: u64, limits: &Limits) -> Result<u64, FormatError> {
    let target = TARGET / row;
    let fits = |k: u64| {
        let short = (k - length % k) % k;
        short.checked_mul(row).is_some_and(|bytes| bytes <= slack)
    };
    // Between a quarter of the target and twice it, nearest the target first: a divisor of the
    // axis (a grid that ends with the data, as files joined along it want), else any that fits.
    // At most 2 x MAX tries each (one-byte rows): milliseconds.
    let (low, high) = ((target / 4).max(1), (MAX / row).min(length));
    let near = || (low..=target.min(high)).rev().chain(target + 1..=high);
    if let Some(k) = near().find(|k| length.is_multiple_of(*k)).or_else(|| near().find(|k| fits(*k))) {
        return Ok(k);
    }
    // No size near the target fits the file: the largest divisor below it, when that is not
    // tiny, else the smallest above it (a divisor is L / d for a divisor d of L).
    let mut below = 1;
    for k in (1..=target.min(length)).rev() {
        if k % 65_536 == 0 {
            limits.check_time()?;
        }
        if length.is_multiple_of(k) {
            below = k;
            break;
        }
    }
    if below * 64 >= target {
        return Ok(below);
    }
    for d in (1..=length / target.max(1)).rev() {
        if d % 65_536 == 0 {
            limits.check_time()?;
        }
        if length.is_multiple_of(d) && length / d >= target {
            return Ok(length / d);
        }
    }
    Ok(length)
}

/// Every chunk's byte range, in grid order: chunk `[i0, .., j, 0, ..]` starts at the element
/// `(i0, .., j * k, 0, ..)`, and is `k` rows long, the last one included.
pub fn ranges(layout: &Layout, chunk: &[u64], limits: &Limits) -> Result<Vec<(Vec<u64>, Chunk)>, FormatError> {
    let shape = layout.shape;
    let grid: Vec<u64> = shape.iter().zip(chunk).map(|(n, c)| n.div_ceil(*c)).collect();
    let count = grid.iter().try_fold(1u64, |product, n| product.checked_mul(*n));
    if count.is_none_or(|count| count > limits.max_chunks) {
        return Err(FormatError::TooLarge(format!(
            "its image of shape {shape:?} in chunks of {chunk:?} makes more chunks than limits.max_chunks ({})",
            limits.max_chunks
        )));
    }
    let count = count.unwrap_or_default();
    let bytes = chunk.iter().product::<u64>() * layout.item;
    // The bytes of one step along each axis.
    let mut strides = vec![layout.item; shape.len()];
    for axis in (0..shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * shape[axis + 1];
    }
    let mut chunks = Vec::with_capacity(count as usize);
    let mut index = vec![0u64; shape.len()];
    for _ in 0..count {
        if chunks.len() % 4096 == 0 {
            limits.check_time()?;
        }
        let offset: u64 = index.iter().zip(chunk).zip(&strides).map(|((i, c), s)| i * c * s).sum();
        chunks.push((index.clone(), Chunk::Range { offset: layout.data_start + offset, length: bytes }));
        for axis in (0..index.len()).rev() {
            index[axis] += 1;
            if index[axis] < grid[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    Ok(chunks)
}
