//! Which chunks an overview of a whole 2-D slice reads, and which element each pixel shows.
//! The slice is the first index of every leading dimension and all of the last two; the image
//! samples it (nearest neighbour) to at most [`super::MAX_SIDE`] pixels a side. When the slice
//! spans more than `max_chunks` chunks, an evenly strided subset of its chunk rows and columns
//! is read, and each pixel shows the same place in the nearest chunk read: a mosaic that keeps
//! the slice's extent, read in bounded time.

/// The plan of one overview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The slice's rows and columns.
    pub plane: [u64; 2],
    /// The image's height and width, in pixels.
    pub size: [usize; 2],
    /// The grid coordinates of the chunks read, in order.
    pub chunks: Vec<Vec<u64>>,
    /// The chunks the slice spans.
    pub spanned: u64,
    /// For each pixel (row-major): which of [`Plan::chunks`] it reads, and the element's index
    /// within that chunk (C order).
    pub pixels: Vec<(u32, u64)>,
}

/// The chunk rows (or columns) read out of `n`, at most `k`: evenly strided, each at the middle
/// of its stride.
fn strided(n: u64, k: u64) -> Vec<u64> {
    (0..k).map(|i| ((2 * u128::from(i) + 1) * u128::from(n) / (2 * u128::from(k))) as u64).collect()
}

/// How many chunk rows and columns to read out of `nr` x `nc`, at most `max` together.
fn budget(nr: u64, nc: u64, max: u64) -> (u64, u64) {
    if nr.saturating_mul(nc) <= max {
        return (nr, nc);
    }
    let ideal = ((max as f64) * (nr as f64) / (nc as f64)).sqrt().floor() as u64;
    let kr = ideal.clamp(1, nr).min(max);
    let kc = (max / kr).clamp(1, nc);
    (kr, kc)
}

/// Plans the overview of an array of `shape` in chunks of `chunk` (no dimension zero), reading
/// at most `max_chunks` chunks, in an image of at most `max_side` pixels a side (a slice under
/// `min_side` a side is enlarged by a whole factor).
pub fn plan(shape: &[u64], chunk: &[u64], max_chunks: u64, max_side: u64, min_side: u64) -> Plan {
    let n = shape.len();
    // The slice's dimensions as (length, chunk length); a 1-D array is one row, a 0-D one pixel.
    let (rows, cols) = match n {
        0 => ((1, 1), (1, 1)),
        1 => ((1, 1), (shape[0], chunk[0])),
        _ => ((shape[n - 2], chunk[n - 2]), (shape[n - 1], chunk[n - 1])),
    };
    let grid = |(len, c): (u64, u64)| len.div_ceil(c.max(1)).max(1);
    let (nr, nc) = (grid(rows), grid(cols));
    let (kr, kc) = budget(nr, nc, max_chunks.max(1));
    let (picked_rows, picked_cols) = (strided(nr, kr), strided(nc, kc));
    let zoom = (min_side / rows.0.max(cols.0).max(1)).max(1);
    let h = (rows.0.saturating_mul(zoom)).clamp(1, max_side) as usize;
    let w = (cols.0.saturating_mul(zoom)).clamp(1, max_side) as usize;
    // Along one dimension: for an image position, the index among the picked chunks and the
    // element within that chunk.
    let along = |(len, c): (u64, u64), picked: &[u64], n_chunks: u64, pixel: usize, pixels: usize| {
        let c = c.max(1);
        let element = (pixel as u128 * u128::from(len) / pixels as u128) as u64;
        let k = picked.len() as u64;
        let at = ((u128::from(element / c) * u128::from(k) / u128::from(n_chunks)) as u64).min(k - 1);
        let start = picked[at as usize] * c;
        let within = (element % c).min(len.saturating_sub(1).saturating_sub(start));
        (at, within)
    };
    let ys: Vec<(u64, u64)> = (0..h).map(|y| along(rows, &picked_rows, nr, y, h)).collect();
    let xs: Vec<(u64, u64)> = (0..w).map(|x| along(cols, &picked_cols, nc, x, w)).collect();
    let mut pixels = Vec::with_capacity(h * w);
    for (ar, r) in &ys {
        for (ac, c) in &xs {
            pixels.push(((ar * kc + ac) as u32, r * cols.1 + c));
        }
    }
    let leading = vec![0u64; n.saturating_sub(2)];
    let mut chunks = Vec::with_capacity((kr * kc) as usize);
    for r in &picked_rows {
        for c in &picked_cols {
            let mut coords = leading.clone();
            match n {
                0 => {}
                1 => coords.push(*c),
                _ => coords.extend([*r, *c]),
            }
            chunks.push(coords);
        }
    }
    Plan { plane: [rows.0, cols.0], size: [h, w], chunks, spanned: nr.saturating_mul(nc), pixels }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_slice_within_the_budget_reads_every_chunk_of_it() {
        let p = plan(&[3, 180, 360], &[1, 90, 180], 64, 512, 256);
        assert_eq!(p.chunks, vec![vec![0, 0, 0], vec![0, 0, 1], vec![0, 1, 0], vec![0, 1, 1]]);
        assert_eq!((p.plane, p.size, p.spanned), ([180, 360], [180, 360], 4));
        // The bottom-right pixel is the last element of the last chunk.
        assert_eq!(*p.pixels.last().unwrap(), (3, 89 * 180 + 179));
        assert_eq!(p.pixels[0], (0, 0));
    }

    #[test]
    fn a_large_slice_reads_a_strided_subset() {
        let p = plan(&[1000, 1000], &[10, 10], 16, 512, 256);
        assert_eq!(p.chunks.len(), 16);
        assert_eq!(p.spanned, 10_000);
        assert_eq!(p.chunks[0], vec![12, 12]);
        assert_eq!(p.chunks[15], vec![87, 87]);
        let p = plan(&[10, 100_000], &[10, 10], 16, 512, 256);
        assert_eq!(p.chunks.len(), 16, "one chunk row, 16 columns");
        assert!(p.chunks.iter().all(|c| c[0] == 0));
    }

    #[test]
    fn one_and_zero_dimensions_are_one_row() {
        let p = plan(&[1000], &[100], 64, 512, 256);
        assert_eq!((p.plane, p.size, p.chunks.len()), ([1, 1000], [1, 512], 10));
        let p = plan(&[], &[], 64, 512, 256);
        assert_eq!((p.plane, p.chunks.clone(), p.pixels.len()), ([1, 1], vec![vec![]], 256 * 256));
    }

    proptest! {
        #[test]
        fn every_pixel_reads_an_element_of_a_chunk_read(
            shape in proptest::collection::vec(prop_oneof![1u64..5000, (1u64 << 62)..u64::MAX], 0..4),
            chunk_seed in proptest::collection::vec(1u64..3000, 4),
            max in 1u64..100,
        ) {
            let chunk: Vec<u64> = shape.iter().zip(&chunk_seed).map(|(s, c)| (*c).min(*s).max(1)).collect();
            prop_assume!(chunk.iter().try_fold(1u64, |n, c| n.checked_mul(*c)).is_some());
            let p = plan(&shape, &chunk, max, 64, 16);
            prop_assert!(p.chunks.len() as u64 <= max);
            prop_assert_eq!(p.pixels.len(), p.size[0] * p.size[1]);
            let elements: u64 = chunk.iter().product();
            for (at, e) in &p.pixels {
                prop_assert!((*at as usize) < p.chunks.len());
                prop_assert!(*e < elements);
            }
            for c in &p.chunks {
                for (d, i) in c.iter().enumerate() {
                    prop_assert!(u128::from(*i) * u128::from(chunk[d]) < u128::from(shape[d]), "chunk {c:?} inside the array");
                }
            }
        }
    }
}
