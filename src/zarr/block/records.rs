//! The records of a block, bit-packed: each field of a record is stored as its distance from the
//! block's smallest value of that field, in as many bits as the block's largest distance needs.
//! A block of one file's chunks stores ~50 bits a record instead of 128; a block whose every chunk
//! is the one chunk of its own file (the same offset in each, sources in slot order) a few bits
//! more than its lengths need.
//!
//! Fields, in this order from the low bits of a record: kind (missing, inline, assembled,
//! virtual), source (virtual records: the source index, or its distance from the record's index
//! when that is narrower), offset (virtual records: from the block's smallest virtual offset;
//! inline and assembled ones: in the inline bytes), length. Fields that do not apply are 0.

use super::{ASSEMBLED, BlockError, INLINE, MISSING, Record};

const KIND_MISSING: u64 = 0;
const KIND_INLINE: u64 = 1;
const KIND_ASSEMBLED: u64 = 2;
const KIND_VIRTUAL: u64 = 3;

/// Bytes after the last record, so that any field is read with one unaligned 16-byte load.
const PAD: usize = 16;
/// Bytes of the stored header: widths (4), source mode (1), kind base (1), source base (8),
/// offset base (8), length base (4).
const HEADER: usize = 26;

/// Bit-packed records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Packed {
    /// The records, then [`PAD`] zero bytes.
    bits: Box<[u8]>,
    len: u32,
    widths: Widths,
    /// Sources stored as their distance from the record's index.
    relative: bool,
    kind_base: u8,
    source_base: i64,
    offset_base: u64,
    length_base: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Widths {
    kind: u8,
    source: u8,
    offset: u8,
    length: u8,
}

impl Widths {
    fn record(self) -> u64 {
        u64::from(self.kind) + u64::from(self.source) + u64::from(self.offset) + u64::from(self.length)
    }
}

fn width(range: u64) -> u8 {
    (64 - range.leading_zeros()) as u8
}

fn kind_of(r: &Record) -> u64 {
    match r.source {
        MISSING => KIND_MISSING,
        INLINE => KIND_INLINE,
        ASSEMBLED => KIND_ASSEMBLED,
        _ => KIND_VIRTUAL,
    }
}

impl Packed {
    /// Packs `records` in the narrowest widths that hold them.
    pub fn pack(records: &[Record]) -> Self {
        let present = || records.iter().filter(|r| r.source != MISSING);
        let virtuals = || records.iter().enumerate().filter(|(_, r)| kind_of(r) == KIND_VIRTUAL);
        let offset_base = virtuals().map(|(_, r)| r.offset).min().unwrap_or(0);
        let length_base = present().map(|r| r.length).min().unwrap_or(0);
        let span = |values: &mut dyn Iterator<Item = i64>| {
            values.fold(None, |acc: Option<(i64, i64)>, v| Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v)))))
        };
        let plain = span(&mut virtuals().map(|(_, r)| i64::from(r.source))).unwrap_or((0, 0));
        let relative = span(&mut virtuals().map(|(i, r)| i64::from(r.source) - i as i64)).unwrap_or((0, 0));
        let narrower = |(lo, hi): (i64, i64)| width(hi.abs_diff(lo));
        let use_relative = narrower(relative) < narrower(plain);
        let (source_base, source_hi) = if use_relative { relative } else { plain };
        let kinds = span(&mut records.iter().map(|r| kind_of(r) as i64)).unwrap_or((0, 0));
        let widths = Widths {
            kind: width((kinds.1 - kinds.0) as u64),
            source: width(source_hi.abs_diff(source_base)),
            offset: width(
                records
                    .iter()
                    .map(|r| match kind_of(r) {
                        KIND_VIRTUAL => r.offset - offset_base,
                        KIND_MISSING => 0,
                        _ => r.offset,
                    })
                    .max()
                    .unwrap_or(0),
            ),
            length: width(present().map(|r| u64::from(r.length - length_base)).max().unwrap_or(0)),
        };
        let total_bits = widths.record() * records.len() as u64;
        let mut bits = vec![0u8; total_bits.div_ceil(8) as usize + PAD];
        let mut at = 0u64;
        for (i, r) in records.iter().enumerate() {
            let kind = kind_of(r);
            let (source, offset, length) = match kind {
                KIND_MISSING => (0, 0, 0),
                KIND_VIRTUAL => {
                    let s = if use_relative { i64::from(r.source) - i as i64 } else { i64::from(r.source) };
                    (s.abs_diff(source_base), r.offset - offset_base, u64::from(r.length - length_base))
                }
                _ => (0, r.offset, u64::from(r.length - length_base)),
            };
            for (value, w) in [
                (kind - kinds.0 as u64, widths.kind),
                (source, widths.source),
                (offset, widths.offset),
                (length, widths.length),
            ] {
                put(&mut bits, at, w, value);
                at += u64::from(w);
            }
        }
        Self {
            bits: bits.into(),
            len: records.len() as u32,
            widths,
            relative: use_relative,
            kind_base: kinds.0 as u8,
            source_base,
            offset_base,
            length_base,
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Record `i`.
    pub fn get(&self, i: usize) -> Option<Record> {
        let (kind, source, offset, length) = self.fields(i)?;
        Some(match kind {
            KIND_MISSING => super::MISSING_RECORD,
            KIND_INLINE => Record { offset, length, source: INLINE },
            KIND_ASSEMBLED => Record { offset, length, source: ASSEMBLED },
            _ => Record { offset, length, source: source as u32 },
        })
    }

    /// Record `i`'s kind, source index (virtual records), offset and length, unchecked.
    fn fields(&self, i: usize) -> Option<(u64, i64, u64, u32)> {
        if i >= self.len as usize {
            return None;
        }
        let w = self.widths;
        let mut at = w.record() * i as u64;
        let mut next = |width: u8| {
            let v = get(&self.bits, at, width);
            at += u64::from(width);
            v
        };
        let (kind, source, offset, length) = (next(w.kind), next(w.source), next(w.offset), next(w.length));
        let kind = kind + u64::from(self.kind_base);
        let length = self.length_base.wrapping_add(length as u32);
        if kind != KIND_VIRTUAL {
            return Some((kind, 0, offset, length));
        }
        let s = self.source_base.wrapping_add(source as i64);
        let s = if self.relative { s.wrapping_add(i as i64) } else { s };
        Some((kind, s, self.offset_base.wrapping_add(offset), length))
    }

    /// Checks that every record names one of `sources` sources or lies in `inline` bytes, and
    /// that its fields did not wrap (a block that was not written by [`Self::pack`]).
    pub fn check(&self, sources: usize, inline: u64) -> Result<(), BlockError> {
        for i in 0..self.len as usize {
            let (kind, source, offset, length) = self.fields(i).ok_or(BlockError("truncated"))?;
            let length_ok = length >= self.length_base || kind == KIND_MISSING;
            let ok = length_ok
                && match kind {
                    KIND_MISSING => true,
                    KIND_INLINE | KIND_ASSEMBLED => {
                        offset.checked_add(u64::from(length)).is_some_and(|end| end <= inline)
                    }
                    KIND_VIRTUAL => usize::try_from(source).is_ok_and(|s| s < sources) && offset >= self.offset_base,
                    _ => false,
                };
            if !ok {
                return Err(BlockError("record points outside the block"));
            }
        }
        Ok(())
    }

    /// Every record, in order.
    pub fn iter(&self) -> impl Iterator<Item = Record> + '_ {
        (0..self.len as usize).filter_map(|i| self.get(i))
    }

    /// Heap bytes held.
    pub fn weight(&self) -> usize {
        self.bits.len()
    }

    /// Appends the stored form: the header, then the packed bits (without the padding).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = self.widths;
        out.extend_from_slice(&[w.kind, w.source, w.offset, w.length, u8::from(self.relative), self.kind_base]);
        out.extend_from_slice(&self.source_base.to_le_bytes());
        out.extend_from_slice(&self.offset_base.to_le_bytes());
        out.extend_from_slice(&self.length_base.to_le_bytes());
        out.extend_from_slice(&self.bits[..self.bits.len().saturating_sub(PAD)]);
    }

    /// Reads `len` stored records from the front of `data`, returning them and what follows.
    /// Widths and sizes are checked; each record's values are checked by the caller.
    pub fn decode(data: &[u8], len: usize) -> Result<(Self, &[u8]), BlockError> {
        let header = data.get(..HEADER).ok_or(BlockError("truncated"))?;
        let widths = Widths { kind: header[0], source: header[1], offset: header[2], length: header[3] };
        if widths.kind > 2
            || widths.source > 33
            || widths.offset > 64
            || widths.length > 32
            || header[4] > 1
            || header[5] > 3
        {
            return Err(BlockError("record widths out of range"));
        }
        let le = |b: &[u8]| {
            let mut a = [0u8; 8];
            a[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(a)
        };
        let bytes = (widths.record() * len as u64).div_ceil(8);
        let bytes = usize::try_from(bytes).map_err(|_| BlockError("too many records"))?;
        let rest = &data[HEADER..];
        if rest.len() < bytes {
            return Err(BlockError("truncated"));
        }
        let mut bits = Vec::with_capacity(bytes + PAD);
        bits.extend_from_slice(&rest[..bytes]);
        bits.resize(bytes + PAD, 0);
        let packed = Self {
            bits: bits.into(),
            len: u32::try_from(len).map_err(|_| BlockError("too many records"))?,
            widths,
            relative: header[4] == 1,
            kind_base: header[5],
            source_base: le(&header[6..14]) as i64,
            offset_base: le(&header[14..22]),
            length_base: le(&header[22..26]) as u32,
        };
        Ok((packed, &rest[bytes..]))
    }
}

/// Writes the low `width` bits of `value` at bit `at` (the bits there are 0).
fn put(bits: &mut [u8], at: u64, width: u8, value: u64) {
    if width == 0 {
        return;
    }
    let start = (at / 8) as usize;
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&bits[start..start + 16]);
    let word = u128::from_le_bytes(raw) | u128::from(value & mask(width)) << (at % 8);
    bits[start..start + 16].copy_from_slice(&word.to_le_bytes());
}

/// The `width` bits at bit `at`.
fn get(bits: &[u8], at: u64, width: u8) -> u64 {
    if width == 0 {
        return 0;
    }
    let start = (at / 8) as usize;
    let Some(bytes) = bits.get(start..start + 16) else { return 0 };
    let mut raw = [0u8; 16];
    raw.copy_from_slice(bytes);
    let word = u128::from_le_bytes(raw);
    (word >> (at % 8)) as u64 & mask(width)
}

fn mask(width: u8) -> u64 {
    if width >= 64 { u64::MAX } else { (1u64 << width) - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record() -> impl Strategy<Value = Record> {
        prop_oneof![
            Just(super::super::MISSING_RECORD),
            (any::<u64>(), any::<u32>(), 0u32..1000).prop_map(|(offset, length, source)| Record {
                offset,
                length,
                source
            }),
            (0u64..1 << 20, any::<u32>()).prop_map(|(offset, length)| Record { offset, length, source: INLINE }),
            (0u64..1 << 20, 0u32..100).prop_map(|(offset, length)| Record { offset, length, source: ASSEMBLED }),
        ]
    }

    proptest! {
        #[test]
        fn packed_records_read_back_exactly(records in proptest::collection::vec(record(), 0..60)) {
            let packed = Packed::pack(&records);
            let back: Vec<Record> = packed.iter().collect();
            prop_assert_eq!(&back, &records);
            let mut stored = Vec::new();
            packed.encode(&mut stored);
            stored.push(7);
            let (decoded, rest) = Packed::decode(&stored, records.len()).unwrap();
            prop_assert_eq!(rest, &[7u8][..]);
            prop_assert_eq!(decoded, packed);
        }
    }

    #[test]
    fn one_chunk_per_file_costs_its_lengths_bits() {
        // Sources in slot order, every chunk at the same offset, lengths within 2^17.
        let records: Vec<Record> =
            (0..1024u32).map(|i| Record { offset: 4096, length: 100_000 + (i * 7919) % 100_000, source: i }).collect();
        let packed = Packed::pack(&records);
        assert_eq!(packed.widths, Widths { kind: 0, source: 0, offset: 0, length: 17 });
        assert!(packed.weight() <= 1024 * 17 / 8 + PAD);
        assert_eq!(packed.get(1000), Some(records[1000]));
    }

    #[test]
    fn chunks_of_a_few_files_take_their_offsets_and_lengths() {
        let records: Vec<Record> =
            (0..1024u32).map(|i| Record { offset: u64::from(i) * 1_000_000, length: 999_000, source: i % 8 }).collect();
        let packed = Packed::pack(&records);
        assert_eq!(packed.widths, Widths { kind: 0, source: 3, offset: 30, length: 0 });
        assert_eq!(packed.iter().collect::<Vec<_>>(), records);
    }

    #[test]
    fn check_refuses_records_outside_the_block() {
        let packed = Packed::pack(&[
            Record { offset: 0, length: 4, source: INLINE },
            Record { offset: 9, length: 1, source: 2 },
            super::super::MISSING_RECORD,
        ]);
        assert!(packed.check(3, 4).is_ok());
        assert!(packed.check(2, 4).is_err(), "source 2 of 2");
        assert!(packed.check(3, 3).is_err(), "inline bytes 0..4 of 3");
    }

    #[test]
    fn rejects_widths_out_of_range() {
        let mut stored = Vec::new();
        Packed::pack(&[Record { offset: 1, length: 2, source: 3 }]).encode(&mut stored);
        stored[2] = 65;
        assert!(Packed::decode(&stored, 1).is_err());
        assert!(Packed::decode(&stored[..10], 1).is_err());
    }
}
