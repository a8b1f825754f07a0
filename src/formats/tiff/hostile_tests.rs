//! Hostile TIFF files: each a 422 saying what is wrong, never a panic, never a hang, and no
//! allocation a claimed count asks for before the file shows it holds those bytes.

use bytes::Bytes;

use super::parse;
use super::tests::{V, Writer, invalid, tiled, utm};
use crate::formats::{Chunk, FormatError, Limits};

#[test]
fn a_looping_ifd_chain_is_refused() {
    let mut w = Writer::new(false, false);
    tiled(&mut w, vec![]);
    let first = u64::from(u32::from_le_bytes([w.bytes[4], w.bytes[5], w.bytes[6], w.bytes[7]]));
    let next_at = w.next_at;
    w.patch(next_at, first);
    assert!(invalid(w.finish()).contains("IFD chain loops"));
    // BigTIFF, two IFDs pointing at each other
    let mut w = Writer::new(true, true);
    tiled(&mut w, vec![]);
    let first = u64::from_be_bytes(w.bytes[8..16].try_into().unwrap());
    tiled(&mut w, vec![]);
    let next_at = w.next_at;
    w.patch(next_at, first);
    assert!(invalid(w.finish()).contains("reached a second time"));
}

#[test]
fn truncated_and_foreign_files_are_refused() {
    assert!(invalid(Bytes::from_static(b"II*\0")).contains("too short"));
    assert!(invalid(Bytes::from_static(b"GIF89a\0\0\0\0")).contains("not a TIFF"));
    assert!(invalid(Bytes::from_static(b"II\x2a\0\xff\xff\0\0")).contains("past the end"));
    assert!(invalid(Bytes::from_static(b"II\x2b\0\x08\0\0\0")).contains("only 8 bytes"));
    assert!(invalid(Bytes::from_static(b"II*\0\0\0\0\0")).contains("no image"));
    let mut w = Writer::new(false, false);
    tiled(&mut w, vec![]);
    let file = w.finish();
    for cut in [9, 20, 60, file.len() - 4] {
        let message = invalid(file.slice(..cut));
        assert!(message.contains("past the end") || message.contains("file"), "{cut}: {message}");
    }
}

#[test]
fn counts_and_offsets_past_the_end_are_refused_before_anything_is_allocated() {
    // a BigTIFF IFD claiming 2^60 entries
    let mut w = Writer::new(false, true);
    tiled(&mut w, vec![]);
    let first = u64::from_le_bytes(w.bytes[8..16].try_into().unwrap()) as usize;
    w.bytes[first..first + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(invalid(w.finish()).contains("claims 1152921504606846976 entries"));
    // tile offsets claiming 2^40 values
    let mut w = Writer::new(false, true);
    tiled(&mut w, vec![(324, V::Long8(vec![0; 6]))]);
    let file = w.finish().to_vec();
    let mut hostile = file.clone();
    let at = (0..file.len() - 10).rev().find(|i| file[*i..*i + 4] == [0x44, 0x01, 16, 0]).unwrap();
    hostile[at + 4..at + 12].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let message = invalid(Bytes::from(hostile));
    assert!(message.contains("offsets"), "{message}");
    // a tile past the end of the file
    let mut w = Writer::new(false, false);
    tiled(&mut w, vec![(325, V::Long(vec![10, 11, 12, 13, 14, 1 << 30]))]);
    assert!(invalid(w.finish()).contains("tile or strip 5"));
}

#[test]
fn absurd_sizes_are_refused_without_allocating_for_them() {
    // 2^32 - 1 square pixels in 1 x 1 tiles: 2^64 chunks
    let mut w = Writer::new(false, false);
    tiled(
        &mut w,
        vec![
            (256, V::Long(vec![u32::MAX])),
            (257, V::Long(vec![u32::MAX])),
            (322, V::Short(vec![1])),
            (323, V::Short(vec![1])),
        ],
    );
    let file = w.finish();
    assert!(matches!(parse(&file, &Limits::default()), Err(FormatError::TooLarge(m)) if m.contains("max_chunks")));
    let mut w = Writer::new(false, false);
    tiled(&mut w, vec![(256, V::Long(vec![0]))]);
    assert!(invalid(w.finish()).contains("not a picture"));
    let mut w = Writer::new(false, false);
    tiled(&mut w, vec![(277, V::Long(vec![u32::MAX]))]);
    assert!(invalid(w.finish()).contains("samples per pixel"));
}

#[test]
fn arbitrary_bytes_after_a_tiff_header_never_panic() {
    let mut w = Writer::new(false, false);
    let mut extra = utm();
    extra.push((42113, V::Ascii("nan")));
    tiled(&mut w, extra);
    let file = w.finish().to_vec();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let mut copy = file.clone();
        for _ in 0..4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = 8 + (state as usize) % (copy.len() - 8);
            copy[at] = (state >> 32) as u8;
        }
        let file = Bytes::from(copy);
        if let Ok(parsed) = parse(&file, &Limits::default()) {
            for node in parsed.nodes.values() {
                for (_, chunk) in &node.chunks {
                    if let Chunk::Range { offset, length } = chunk {
                        assert!(offset + length <= file.len() as u64);
                    }
                }
            }
        }
    }
}

#[test]
fn overlapping_ifds_are_refused_before_they_fill_memory() {
    // IFDs one byte apart, each listing the other's bytes as 4000 entries, chained through
    // their own next-IFD fields: without a bound, each would hold the same bytes again.
    let mut file = vec![0u8; 48_200];
    file[..8].copy_from_slice(b"II*\0\x08\0\0\0");
    for at in (8..20_000).step_by(2) {
        file[at..at + 2].copy_from_slice(&4000u16.to_le_bytes());
    }
    let next = 8 + 2 + 4000 * 12;
    file[next..next + 4].copy_from_slice(&10u32.to_le_bytes());
    let message = invalid(Bytes::from(file));
    assert!(message.contains("overlap") || message.contains("loops"), "{message}");
}

#[test]
fn huge_tiles_of_many_samples_are_refused_or_left_out_without_overflow() {
    let mut w = Writer::new(false, true);
    tiled(
        &mut w,
        vec![
            (259, V::Short(vec![1])),
            (277, V::Long(vec![60_000])),
            (322, V::Long(vec![1 << 24])),
            (323, V::Long(vec![1 << 24])),
            (324, V::Long8(vec![16])),
            (325, V::Long8(vec![8])),
            (258, V::Short(vec![64])),
        ],
    );
    let file = w.finish();
    let outcome = parse(&file, &Limits::default());
    assert!(
        matches!(&outcome, Err(FormatError::Invalid(m)) if m.contains("short of") || m.contains("images")),
        "{outcome:?}"
    );
}
