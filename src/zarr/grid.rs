//! A regular chunk grid and its cut into tiles: each tile is one manifest block.

/// The largest number of chunks in one tile (one stored manifest block).
pub const MAX_TILE_CHUNKS: u64 = 65_536;

/// The default number of chunks in one tile (`block_chunks`). A cold chunk read fetches and
/// decodes one block: bench/block_size.py measured a median of 0.38 ms for blocks of 1,024
/// chunks, 0.45 ms for 4,096, 0.75 ms for 16,384 and 2.3 ms for 65,536 (10 million references,
/// local PostgreSQL), for the same registration time and cache footprint.
pub const DEFAULT_TILE_CHUNKS: u64 = 1_024;

/// Where a chunk's reference lives: which tile (block), which slot inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkLocation {
    /// Row-major index of the tile in the tile grid.
    pub tile: u64,
    /// Row-major index of the chunk inside its tile.
    pub slot: u32,
}

/// Bits of a packed location given to the slot: tiles hold at most 2^24 chunks.
const SLOT_BITS: u32 = 24;

impl ChunkLocation {
    /// The location in one `u64` (tile in the high 40 bits, slot in the low 24), ordered as the
    /// location itself; `None` beyond 2^40 tiles or 2^24 slots.
    pub fn pack(self) -> Option<u64> {
        (self.tile < 1 << (64 - SLOT_BITS) && self.slot < 1 << SLOT_BITS)
            .then(|| self.tile << SLOT_BITS | u64::from(self.slot))
    }

    /// The location [`ChunkLocation::pack`] packed.
    pub fn unpack(packed: u64) -> Self {
        Self { tile: packed >> SLOT_BITS, slot: (packed & ((1 << SLOT_BITS) - 1)) as u32 }
    }
}

/// Why a chunk grid cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GridError {
    /// `chunk_shape` and `shape` differ in length.
    #[error("chunk_shape has {chunk} dimensions but shape has {shape}")]
    Dimensionality { shape: usize, chunk: usize },
    /// A chunk extent of zero.
    #[error("chunk_shape {0:?} has a zero extent")]
    ZeroChunk(Vec<u64>),
    /// A stored tile shape that does not fit the array.
    #[error("tile shape {0:?} does not fit the array (wrong dimensionality, a zero, or too many chunks)")]
    Tile(Vec<u64>),
    /// The grid has more chunks than can be addressed.
    #[error("the chunk grid {0:?} has more than 2^64 chunks")]
    TooManyChunks(Vec<u64>),
}

/// The regular chunk grid of an array, with its tiling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkGrid {
    shape: Vec<u64>,
    chunk_shape: Vec<u64>,
    grid: Vec<u64>,
    tile: Vec<u64>,
    tiles_per_dim: Vec<u64>,
}

impl ChunkGrid {
    /// Builds the grid of an array of `shape` cut in chunks of `chunk_shape`.
    pub fn new(shape: &[u64], chunk_shape: &[u64]) -> Result<Self, GridError> {
        Self::with_max_tile(shape, chunk_shape, MAX_TILE_CHUNKS)
    }

    /// As [`ChunkGrid::new`], with the default tiles of at most `max_tile` chunks.
    pub fn with_max_tile(shape: &[u64], chunk_shape: &[u64], max_tile: u64) -> Result<Self, GridError> {
        let grid = grid_shape(shape, chunk_shape)?;
        Self::with_tile(shape, chunk_shape, default_tile(&grid, max_tile.max(1)))
    }

    /// The grid of an array of `shape` cut in chunks of `chunk_shape`, with tiles of `tile`
    /// chunks (a shape stored with the array: tiles never change once chosen).
    pub fn with_tile(shape: &[u64], chunk_shape: &[u64], tile: Vec<u64>) -> Result<Self, GridError> {
        let grid = grid_shape(shape, chunk_shape)?;
        let slots = tile.iter().try_fold(1u64, |acc, t| acc.checked_mul(*t));
        if tile.len() != grid.len() || tile.contains(&0) || slots.is_none_or(|n| n > u64::from(u32::MAX)) {
            return Err(GridError::Tile(tile));
        }
        let tiles_per_dim = grid.iter().zip(&tile).map(|(g, t)| g.div_ceil(*t)).collect();
        Ok(Self { shape: shape.to_vec(), chunk_shape: chunk_shape.to_vec(), grid, tile, tiles_per_dim })
    }

    /// The shape of the tiles, in chunks.
    pub fn tile_shape(&self) -> &[u64] {
        &self.tile
    }

    /// True when `other`'s chunks have the same tiles and tile numbers as this grid's:
    /// same chunk and tile shapes and, beyond the first dimension, the same number of tiles.
    /// Growing along the first dimension keeps every tile.
    pub fn same_tiles(&self, other: &ChunkGrid) -> bool {
        self.chunk_shape == other.chunk_shape
            && self.tile == other.tile
            && self.tiles_per_dim.get(1..) == other.tiles_per_dim.get(1..)
    }

    /// The array shape.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The chunk shape.
    pub fn chunk_shape(&self) -> &[u64] {
        &self.chunk_shape
    }

    /// Number of chunks along each dimension.
    pub fn grid_shape(&self) -> &[u64] {
        &self.grid
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.grid.len()
    }

    /// Total number of chunks (1 for a 0-d array, 0 if any extent is 0).
    pub fn chunk_count(&self) -> u64 {
        self.grid.iter().product()
    }

    /// Number of slots in every tile.
    pub fn tile_len(&self) -> u32 {
        // tile_shape keeps the product <= max_tile <= u32::MAX.
        u32::try_from(self.tile.iter().product::<u64>()).unwrap_or(u32::MAX)
    }

    /// The tile and slot of the chunk at `coords`, `None` if outside the grid.
    pub fn locate(&self, coords: &[u64]) -> Option<ChunkLocation> {
        if coords.len() != self.grid.len() {
            return None;
        }
        let (mut tile, mut slot) = (0u64, 0u64);
        for (i, &c) in coords.iter().enumerate() {
            if c >= self.grid[i] {
                return None;
            }
            tile = tile * self.tiles_per_dim[i] + c / self.tile[i];
            slot = slot * self.tile[i] + c % self.tile[i];
        }
        Some(ChunkLocation { tile, slot: u32::try_from(slot).ok()? })
    }

    /// The grid coordinates of `slot` in `tile`, `None` if that slot lies beyond the grid edge.
    pub fn coords_of(&self, location: ChunkLocation) -> Option<Vec<u64>> {
        let ndim = self.grid.len();
        let mut coords = vec![0u64; ndim];
        let (mut tile, mut slot) = (location.tile, u64::from(location.slot));
        for i in (0..ndim).rev() {
            let c = (tile % self.tiles_per_dim[i]) * self.tile[i] + slot % self.tile[i];
            if c >= self.grid[i] {
                return None;
            }
            coords[i] = c;
            tile /= self.tiles_per_dim[i];
            slot /= self.tile[i];
        }
        (tile == 0 && slot == 0).then_some(coords)
    }
}

fn grid_shape(shape: &[u64], chunk_shape: &[u64]) -> Result<Vec<u64>, GridError> {
    if shape.len() != chunk_shape.len() {
        return Err(GridError::Dimensionality { shape: shape.len(), chunk: chunk_shape.len() });
    }
    if chunk_shape.contains(&0) {
        return Err(GridError::ZeroChunk(chunk_shape.to_vec()));
    }
    let grid: Vec<u64> = shape.iter().zip(chunk_shape).map(|(s, c)| s.div_ceil(*c)).collect();
    if grid.iter().try_fold(1u64, |acc, g| acc.checked_mul(*g)).is_none() {
        return Err(GridError::TooManyChunks(grid));
    }
    Ok(grid)
}

/// The tiles of a new array: beyond the first dimension, the grid's extents halved (largest
/// first) until they hold at most `max_tile` chunks, so that reading along any axis touches few
/// blocks; along the first dimension, whatever room is left, whatever the array's current
/// length: appending along it (new time steps) never reshapes or renumbers a tile.
pub fn default_tile(grid: &[u64], max_tile: u64) -> Vec<u64> {
    let Some((_, rest)) = grid.split_first() else { return Vec::new() };
    let mut rest: Vec<u64> = rest.iter().map(|g| (*g).max(1)).collect();
    while rest.iter().try_fold(1u64, |acc, t| acc.checked_mul(*t)).is_none_or(|n| n > max_tile) {
        let Some(largest) = (0..rest.len()).max_by_key(|&i| rest[i]) else { break };
        rest[largest] = rest[largest].div_ceil(2);
    }
    let first = (max_tile / rest.iter().product::<u64>().max(1)).max(1);
    std::iter::once(first).chain(rest).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_grid_is_one_tile() {
        let g = ChunkGrid::new(&[10, 73, 144], &[5, 73, 72]).unwrap();
        assert_eq!(g.grid_shape(), &[2, 1, 2]);
        assert_eq!(g.chunk_count(), 4);
        assert_eq!(g.locate(&[1, 0, 1]), Some(ChunkLocation { tile: 0, slot: 3 }));
        assert_eq!(g.locate(&[2, 0, 0]), None);
        assert_eq!(g.locate(&[0, 0]), None);
    }

    #[test]
    fn zero_d_and_empty_arrays() {
        let g = ChunkGrid::new(&[], &[]).unwrap();
        assert_eq!(g.chunk_count(), 1);
        assert_eq!(g.locate(&[]), Some(ChunkLocation { tile: 0, slot: 0 }));
        assert_eq!(g.coords_of(ChunkLocation { tile: 0, slot: 0 }), Some(vec![]));
        let e = ChunkGrid::new(&[0, 5], &[2, 5]).unwrap();
        assert_eq!(e.chunk_count(), 0);
        assert_eq!(e.locate(&[0, 0]), None);
    }

    #[test]
    fn appending_along_the_first_dimension_keeps_every_tile() {
        let small = ChunkGrid::new(&[3, 73, 144], &[1, 73, 72]).unwrap();
        assert_eq!(small.tile_shape(), &[32_768, 1, 2]);
        let grown = ChunkGrid::with_tile(&[50_000, 73, 144], &[1, 73, 72], small.tile_shape().to_vec()).unwrap();
        assert!(small.same_tiles(&grown));
        for coords in [[0, 0, 1], [2, 0, 0]] {
            assert_eq!(small.locate(&coords), grown.locate(&coords));
        }
        let wider = ChunkGrid::with_tile(&[3, 73, 288], &[1, 73, 72], small.tile_shape().to_vec()).unwrap();
        assert!(!small.same_tiles(&wider), "more tiles across: renumbered");
        assert!(ChunkGrid::with_tile(&[3], &[1], vec![0]).is_err());
        assert!(ChunkGrid::with_tile(&[3], &[1], vec![1, 1]).is_err());
    }

    #[test]
    fn big_grid_is_tiled_within_limit() {
        let g = ChunkGrid::new(&[100_000, 10, 10], &[1, 1, 1]).unwrap();
        assert!(u64::from(g.tile_len()) <= MAX_TILE_CHUNKS);
        assert!(g.tile_len() > 16_000, "tiles should be large, got {}", g.tile_len());
        assert!(ChunkGrid::new(&[u64::MAX, u64::MAX], &[1, 1]).is_err());
        assert!(ChunkGrid::new(&[4], &[0]).is_err());
    }

    proptest! {
        #[test]
        fn locate_and_coords_of_are_inverse(
            dims in proptest::collection::vec((1u64..200, 1u64..20), 1..4),
            max_tile in 1u64..300,
            pick in proptest::collection::vec(any::<prop::sample::Index>(), 4),
        ) {
            let shape: Vec<u64> = dims.iter().map(|d| d.0).collect();
            let chunks: Vec<u64> = dims.iter().map(|d| d.1).collect();
            let g = ChunkGrid::with_max_tile(&shape, &chunks, max_tile).unwrap();
            prop_assert!(u64::from(g.tile_len()) <= max_tile);
            let coords: Vec<u64> = g.grid_shape().iter().zip(&pick).map(|(n, p)| p.index(*n as usize) as u64).collect();
            let loc = g.locate(&coords).unwrap();
            prop_assert!(loc.slot < g.tile_len());
            prop_assert_eq!(ChunkLocation::unpack(loc.pack().unwrap()), loc);
            prop_assert_eq!(g.coords_of(loc), Some(coords));
        }
    }
}
