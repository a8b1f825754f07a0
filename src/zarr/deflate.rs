//! The last deflate codec of a chunk encoded here (assembled and transcoded chunks), not by
//! zarrs: zarrs runs flate2's streaming encoder, whose level 0 still walks every byte through
//! miniz's compressor (2.3 ms for a 512 KiB chunk, as long as level 1), and which spends most of
//! level 1's time on bytes it cannot compress: of a 512 KiB chunk of noisy float32 values,
//! shuffled, the two low mantissa byte planes are random, and took 2.5 of its 2.9 ms to come
//! out 0.1% larger. So the data is cut into segments; a segment whose sampled bytes are
//! near-uniform ([`looks_random`]) is written as stored blocks (RFC 1951, 3.2.4: a copy), runs
//! of the others are deflated by miniz_oxide (the compressor flate2 runs) at the level asked
//! for, each run flushed to a byte boundary so that the next can follow. Level 0 stores
//! everything. The zlib (RFC 1950) or gzip (RFC 1952) frame around the stream is a header and a
//! checksum. Every inflater reads these streams (pigz writes them so): any level decodes to the
//! same bytes.

use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress_to_output, create_comp_flags_from_zip_params,
};

/// The frame a deflate codec writes around its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// zlib (`zlib`, `numcodecs.zlib`): a 2-byte header, Adler-32 at the end.
    Zlib,
    /// gzip (`gzip`, `numcodecs.gzip`): a 10-byte header, CRC-32 and length at the end.
    Gzip,
}

impl Frame {
    /// The frame of the codec named `name`, if it is a deflate codec.
    pub fn of(name: &str) -> Option<Self> {
        match name {
            "zlib" | "numcodecs.zlib" => Some(Self::Zlib),
            "gzip" | "numcodecs.gzip" => Some(Self::Gzip),
            _ => None,
        }
    }
}

/// The most bytes one stored block holds.
const STORED_BLOCK: usize = u16::MAX as usize;

/// `data` deflated at `level` (0 stored, 1 fastest, 9 smallest) in `frame`.
pub fn deflate(data: &[u8], level: u32, frame: Frame) -> Vec<u8> {
    let mut out = Vec::with_capacity(stored_len(data.len()) + 18);
    match frame {
        // CMF 0x78 (deflate, 32 KiB window), FLG 0x01 (no dictionary, check bits).
        Frame::Zlib => out.extend_from_slice(&[0x78, 0x01]),
        // Magic, deflate, no flags, no time, no extra flags, OS unknown.
        Frame::Gzip => out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]),
    }
    match level.min(9) {
        0 => stored(data, true, &mut out),
        level => mixed(data, level as u8, &mut out),
    }
    match frame {
        Frame::Zlib => {
            let mut adler = adler2::Adler32::new();
            adler.write_slice(data);
            out.extend_from_slice(&adler.checksum().to_be_bytes());
        }
        Frame::Gzip => {
            out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        }
    }
    out
}

/// The length of `n` bytes in stored blocks.
fn stored_len(n: usize) -> usize {
    n + 5 * n.div_ceil(STORED_BLOCK).max(1)
}

/// The bytes looked at apart: a segment is stored or deflated as a whole.
const SEGMENT: usize = 64 << 10;
/// Bytes of a segment sampled to tell whether it looks random.
const SAMPLES: usize = 4096;
/// The entropy (bits a byte, of 8) above which a segment's sampled bytes look random: 4096
/// uniform random bytes measure 7.955 on average; bytes deflate shrinks by even 5% measure
/// well under 7.6.
const RANDOM_BITS: f64 = 7.9;

/// `data` deflated at `level` (1 to 9) into `out`: runs of segments that look random stored,
/// the others deflated, each run ending on a byte boundary; the last block final.
fn mixed(data: &[u8], level: u8, out: &mut Vec<u8>) {
    let kinds: Vec<bool> = data.chunks(SEGMENT).map(looks_random).collect();
    if !kinds.contains(&true) {
        // Nothing to store: one deflate stream, as miniz_oxide ends it.
        out.extend_from_slice(&miniz_oxide::deflate::compress_to_vec(data, level));
        return;
    }
    let mut at = 0;
    for run in kinds.chunk_by(|a, b| a == b) {
        let end = (at + run.len() * SEGMENT).min(data.len());
        let part = &data[at..end];
        if run[0] || !deflated(part, level, out) {
            stored(part, false, out);
        }
        at = end;
    }
    stored(&[], true, out);
}

/// True when a sample of `segment`'s bytes is near-uniform: deflate would spend its longest
/// time on it and gain nothing.
fn looks_random(segment: &[u8]) -> bool {
    // An odd step: every byte of an element of 2, 4 or 8 bytes is sampled, not one of them.
    let step = (segment.len() / SAMPLES) | 1;
    let mut counts = [0u32; 256];
    let mut n = 0u32;
    for &b in segment.iter().step_by(step) {
        counts[usize::from(b)] += 1;
        n += 1;
    }
    // Too few bytes to tell (a short last segment): deflated.
    if n < 1024 {
        return false;
    }
    let n = f64::from(n);
    let bits: f64 = counts.iter().filter(|c| **c > 0).map(|&c| f64::from(c) / n).map(|p| -p * p.log2()).sum();
    bits > RANDOM_BITS
}

/// `part` deflated at `level` into `out` as non-final blocks ending on a byte boundary (a sync
/// flush); false (and `out` as it was) if the compressor failed, which it does not.
fn deflated(part: &[u8], level: u8, out: &mut Vec<u8>) -> bool {
    let before = out.len();
    // Raw deflate (negative window bits): no zlib header of its own.
    let mut compressor = CompressorOxide::new(create_comp_flags_from_zip_params(i32::from(level), -15, 0));
    let mut rest = part;
    loop {
        let (status, used) = compress_to_output(&mut compressor, rest, TDEFLFlush::Sync, |bytes| {
            out.extend_from_slice(bytes);
            true
        });
        if !matches!(status, TDEFLStatus::Okay | TDEFLStatus::Done) || used > rest.len() {
            out.truncate(before);
            return false;
        }
        rest = &rest[used..];
        if rest.is_empty() {
            return true;
        }
    }
}

/// `data` as stored blocks into `out`: each a header byte (final or not, type 00), its length
/// and that length's complement (little-endian), then the bytes. Empty data is one empty block.
fn stored(data: &[u8], last: bool, out: &mut Vec<u8>) {
    let mut blocks = data.chunks(STORED_BLOCK).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[u8::from(last), 0, 0, 0xff, 0xff]);
        return;
    }
    while let Some(block) = blocks.next() {
        let len = block.len() as u16;
        out.push(u8::from(last && blocks.peek().is_none()));
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn inflated(frame: Frame, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match frame {
            Frame::Zlib => flate2::read::ZlibDecoder::new(bytes).read_to_end(&mut out),
            Frame::Gzip => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out),
        }
        .expect("a valid stream");
        out
    }

    #[test]
    fn every_level_and_frame_inflates_to_the_data() {
        // Empty, one byte, a block exactly, a block and one byte, several blocks.
        for n in [0, 1, STORED_BLOCK, STORED_BLOCK + 1, 3 * STORED_BLOCK + 77] {
            let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8 ^ (i / 7) as u8).collect();
            for frame in [Frame::Zlib, Frame::Gzip] {
                for level in [0, 1, 6, 9] {
                    let bytes = deflate(&data, level, frame);
                    assert_eq!(inflated(frame, &bytes), data, "{n} bytes, level {level}, {frame:?}");
                    if level == 0 {
                        let frame_len = if frame == Frame::Zlib { 6 } else { 18 };
                        assert_eq!(bytes.len(), stored_len(n) + frame_len, "{n} bytes stored");
                    }
                }
            }
        }
    }

    /// A byte generator: xorshift, so that its bytes are random to deflate.
    fn noise(n: usize, mut state: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn random_segments_are_stored_and_the_rest_deflated() {
        // Shuffled float32 values as the two low planes random, the high ones compressible:
        // runs of both kinds, and a short compressible tail.
        let planes = 3 * SEGMENT / 2;
        let mut data = noise(2 * planes, 7);
        data.extend((0..planes).map(|i| (i / 300 % 7) as u8));
        data.extend(std::iter::repeat_n(0x43, planes + 1234));
        assert!(data.chunks(SEGMENT).take(3).all(looks_random));
        assert!(!data.chunks(SEGMENT).skip(3).any(looks_random));
        for frame in [Frame::Zlib, Frame::Gzip] {
            for level in [1, 6] {
                let bytes = deflate(&data, level, frame);
                assert_eq!(inflated(frame, &bytes), data, "level {level}, {frame:?}");
                // The random half stored (its size and a little), the rest shrunk to almost nothing.
                assert!(bytes.len() < 2 * planes + 20_000, "{} bytes", bytes.len());
                assert!(bytes.len() > 2 * planes, "{} bytes", bytes.len());
            }
        }
        // Random throughout: stored throughout, at any level.
        let random = noise(5 * SEGMENT + 10, 3);
        let bytes = deflate(&random, 1, Frame::Zlib);
        assert_eq!(inflated(Frame::Zlib, &bytes), random);
        // (its last 10 bytes too few to tell, deflated: a few bytes more)
        assert!(bytes.len() <= stored_len(random.len()) + 6 + 32, "{} bytes", bytes.len());
    }

    #[test]
    fn elements_with_random_low_bytes_are_not_taken_for_random() {
        // Little-endian float32-like elements, not shuffled: two random bytes, two nearly
        // constant. A sample of one byte of each element would see only noise.
        let low = noise(2 * SEGMENT, 11);
        let data: Vec<u8> = low.chunks(2).flat_map(|l| [l[0], l[1], 0x8c, 0x43]).collect();
        assert!(!data.chunks(SEGMENT).any(looks_random));
        let bytes = deflate(&data, 1, Frame::Gzip);
        assert_eq!(inflated(Frame::Gzip, &bytes), data);
        assert!(bytes.len() < data.len() * 3 / 4, "{} of {} bytes", bytes.len(), data.len());
    }

    #[test]
    fn a_corrupted_checksum_is_refused_by_an_inflater() {
        let data = vec![7u8; 1000];
        for frame in [Frame::Zlib, Frame::Gzip] {
            let mut bytes = deflate(&data, 0, frame);
            let at = bytes.len() - 5;
            bytes[at] ^= 1;
            let mut out = Vec::new();
            let read = match frame {
                Frame::Zlib => flate2::read::ZlibDecoder::new(&bytes[..]).read_to_end(&mut out),
                Frame::Gzip => flate2::read::GzDecoder::new(&bytes[..]).read_to_end(&mut out),
            };
            assert!(read.is_err(), "{frame:?}: a wrong checksum must not inflate");
        }
    }
}
