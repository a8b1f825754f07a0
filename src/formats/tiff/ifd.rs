//! TIFF's header and its chain of image file directories (IFDs), classic and BigTIFF, either
//! byte order: each IFD's entries are kept as read (tag, type, count, the value field) and a
//! tag's values are read only when asked for. Every count is checked against the file's length
//! before anything is allocated for it, and the chain is followed at most once per offset.

use std::collections::HashSet;

use crate::formats::{ByteRanges, FormatError, Limits};

/// A TIFF entry has a 16-bit tag, so an IFD listing more entries than there are tags is hostile.
const MAX_ENTRIES: u64 = 1 << 16;

/// The most bytes one tag's values (other than tile and strip offsets) may take: GeoKeys,
/// nodata and tables are far smaller.
const MAX_VALUE_BYTES: u64 = 16 << 20;

/// The byte order and offset size of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub big_endian: bool,
    pub bigtiff: bool,
    pub first_ifd: u64,
}

impl Header {
    /// The header at the start of `file`: `II*\0`, `MM\0*` (classic) or `II+\0`, `MM\0+` (BigTIFF).
    pub fn read(file: &dyn ByteRanges) -> Result<Self, FormatError> {
        if file.len() < 8 {
            return Err(FormatError::Invalid(format!("it is {} bytes long: too short for a TIFF header", file.len())));
        }
        let head = file.read(0, 8)?;
        let big_endian = match &head[..2] {
            b"II" => false,
            b"MM" => true,
            _ => return Err(FormatError::Invalid("it does not start with II or MM: not a TIFF file".into())),
        };
        let order = Order(big_endian);
        match order.u16(&head[2..4]) {
            42 => Ok(Self { big_endian, bigtiff: false, first_ifd: order.u32(&head[4..8]).into() }),
            43 => {
                if order.u16(&head[4..6]) != 8 || order.u16(&head[6..8]) != 0 {
                    return Err(FormatError::Invalid("its BigTIFF header does not say 8-byte offsets".into()));
                }
                let more = file.read(8, 8)?;
                Ok(Self { big_endian, bigtiff: true, first_ifd: order.u64(&more) })
            }
            other => Err(FormatError::Invalid(format!("its version is {other}, neither 42 (TIFF) nor 43 (BigTIFF)"))),
        }
    }

    fn order(self) -> Order {
        Order(self.big_endian)
    }

    /// Bytes of an IFD's entry count, of one entry, of the next-IFD offset.
    fn sizes(self) -> (u64, u64, u64) {
        if self.bigtiff { (8, 20, 8) } else { (2, 12, 4) }
    }
}

/// Reads numbers in a file's byte order.
#[derive(Debug, Clone, Copy)]
struct Order(bool);

impl Order {
    fn u16(self, b: &[u8]) -> u16 {
        let b = [b[0], b[1]];
        if self.0 { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let b = [b[0], b[1], b[2], b[3]];
        if self.0 { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) }
    }
    fn u64(self, b: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[..8]);
        if self.0 { u64::from_be_bytes(w) } else { u64::from_le_bytes(w) }
    }
}

/// One IFD entry as the file lists it.
#[derive(Debug, Clone)]
struct Entry {
    tag: u16,
    kind: u16,
    count: u64,
    /// The value field: the values themselves when they fit (4 bytes, 8 in BigTIFF), else
    /// their offset.
    field: [u8; 8],
}

/// One image file directory.
#[derive(Debug, Clone)]
pub struct Ifd {
    /// Where it starts in the file (to name it in messages).
    pub offset: u64,
    header: Header,
    entries: Vec<Entry>,
}

/// Every IFD of the chain, in file order: a loop (an offset reached twice) is a 422, and so is
/// a chain longer than `limits.max_nodes`, or IFDs taking more bytes than the file has (they
/// overlap: hostile IFDs one byte apart would otherwise hold the same bytes many times over).
pub fn read_chain(file: &dyn ByteRanges, header: Header, limits: &Limits) -> Result<Vec<Ifd>, FormatError> {
    let mut seen = HashSet::new();
    let mut ifds: Vec<Ifd> = Vec::new();
    let mut entries = 0u64;
    let mut next = header.first_ifd;
    while next != 0 {
        limits.check_time()?;
        if !seen.insert(next) {
            return Err(FormatError::Invalid(format!(
                "its IFD chain loops: the IFD at byte {next} is reached a second time"
            )));
        }
        if ifds.len() >= limits.max_nodes {
            return Err(FormatError::TooLarge(format!(
                "it has more than limits.max_nodes ({}) images (IFDs)",
                limits.max_nodes
            )));
        }
        let (ifd, after) = read_ifd(file, header, next)?;
        entries += ifd.entries.len() as u64;
        if entries.saturating_mul(header.sizes().1) > file.len() {
            return Err(FormatError::Invalid(format!(
                "its IFDs list more entries ({entries}) than its {} bytes hold: they overlap",
                file.len()
            )));
        }
        ifds.push(ifd);
        next = after;
    }
    if ifds.is_empty() {
        return Err(FormatError::Invalid("its header points at no IFD: it holds no image".into()));
    }
    Ok(ifds)
}

/// The IFD at `offset` and the offset of the next (0 at the end of the chain).
fn read_ifd(file: &dyn ByteRanges, header: Header, offset: u64) -> Result<(Ifd, u64), FormatError> {
    let (count_size, entry_size, next_size) = header.sizes();
    let order = header.order();
    let past_end =
        || FormatError::Invalid(format!("its IFD at byte {offset} goes past the end of the {}-byte file", file.len()));
    if offset.checked_add(count_size).is_none_or(|end| end > file.len()) {
        return Err(past_end());
    }
    let head = file.read(offset, count_size)?;
    let count = if header.bigtiff { order.u64(&head) } else { order.u16(&head).into() };
    if count > MAX_ENTRIES {
        return Err(FormatError::Invalid(format!("its IFD at byte {offset} claims {count} entries")));
    }
    let body = count * entry_size + next_size;
    if (offset + count_size).checked_add(body).is_none_or(|end| end > file.len()) {
        return Err(past_end());
    }
    let bytes = file.read(offset + count_size, body)?;
    let field_at = if header.bigtiff { 12 } else { 8 };
    let entries = bytes[..(count * entry_size) as usize]
        .chunks_exact(entry_size as usize)
        .map(|e| {
            let mut field = [0u8; 8];
            field[..e.len() - field_at].copy_from_slice(&e[field_at..]);
            Entry {
                tag: order.u16(&e[0..2]),
                kind: order.u16(&e[2..4]),
                count: if header.bigtiff { order.u64(&e[4..12]) } else { order.u32(&e[4..8]).into() },
                field,
            }
        })
        .collect();
    let tail = &bytes[(count * entry_size) as usize..];
    let next = if header.bigtiff { order.u64(tail) } else { order.u32(tail).into() };
    Ok((Ifd { offset, header, entries }, next))
}

/// The size in bytes of one value of a TIFF field type, or None for a type TIFF does not define
/// (such an entry is skipped, as the specification says).
fn type_size(kind: u16) -> Option<u64> {
    Some(match kind {
        1 | 2 | 6 | 7 => 1,
        3 | 8 => 2,
        4 | 9 | 11 | 13 => 4,
        5 | 10 | 12 | 16 | 17 | 18 => 8,
        _ => return None,
    })
}

impl Ifd {
    /// Whether the IFD has `tag`.
    pub fn has(&self, tag: u16) -> bool {
        self.entry(tag).is_some()
    }

    fn entry(&self, tag: u16) -> Option<&Entry> {
        self.entries.iter().find(|e| e.tag == tag && type_size(e.kind).is_some())
    }

    /// How many values `tag` has (0 when absent).
    pub fn count(&self, tag: u16) -> u64 {
        self.entry(tag).map_or(0, |e| e.count)
    }

    /// The raw bytes of `tag`'s values, at most `max_count` values (a larger count is a 422).
    fn raw(&self, file: &dyn ByteRanges, entry: &Entry, max_count: u64) -> Result<(u64, Vec<u8>), FormatError> {
        let size = type_size(entry.kind).unwrap_or(1);
        if entry.count > max_count {
            return Err(FormatError::Invalid(format!(
                "tag {} of the IFD at byte {} claims {} values, more than it can have ({max_count})",
                entry.tag, self.offset, entry.count
            )));
        }
        let inline = if self.header.bigtiff { 8 } else { 4 };
        let len = entry.count.checked_mul(size).ok_or_else(|| {
            FormatError::Invalid(format!("tag {} of the IFD at byte {}: its size overflows", entry.tag, self.offset))
        })?;
        if len <= inline {
            return Ok((size, entry.field[..len as usize].to_vec()));
        }
        let at = if self.header.bigtiff {
            self.header.order().u64(&entry.field)
        } else {
            self.header.order().u32(&entry.field).into()
        };
        if at.checked_add(len).is_none_or(|end| end > file.len()) {
            return Err(FormatError::Invalid(format!(
                "tag {} of the IFD at byte {}: its {len} bytes at byte {at} go past the end of the {}-byte file",
                entry.tag,
                self.offset,
                file.len()
            )));
        }
        Ok((size, file.read(at, len)?.to_vec()))
    }

    /// `tag`'s values as unsigned integers (BYTE, SHORT, LONG, LONG8, IFD types), None when the
    /// tag is absent; at most `max_count` of them.
    pub fn unsigned(&self, file: &dyn ByteRanges, tag: u16, max_count: u64) -> Result<Option<Vec<u64>>, FormatError> {
        let Some(entry) = self.entry(tag) else { return Ok(None) };
        let max_count = max_count.min(file.len());
        let (size, raw) = self.raw(file, entry, max_count)?;
        let order = self.header.order();
        let values = match entry.kind {
            1 | 7 => raw.iter().map(|b| u64::from(*b)).collect(),
            3 => raw.chunks_exact(2).map(|b| order.u16(b).into()).collect(),
            4 | 13 => raw.chunks_exact(4).map(|b| order.u32(b).into()).collect(),
            16 | 18 => raw.chunks_exact(8).map(|b| order.u64(b)).collect(),
            kind => {
                return Err(FormatError::Invalid(format!(
                    "tag {tag} of the IFD at byte {} has type {kind} ({size}-byte values), not an unsigned integer",
                    self.offset
                )));
            }
        };
        Ok(Some(values))
    }

    /// `tag`'s single unsigned value (the first, if several: at most one per sample), None when
    /// absent.
    pub fn one(&self, file: &dyn ByteRanges, tag: u16) -> Result<Option<u64>, FormatError> {
        Ok(self.unsigned(file, tag, 1 << 16)?.and_then(|v| v.first().copied()))
    }

    /// `tag`'s values as numbers (any numeric type), None when absent.
    pub fn numbers(&self, file: &dyn ByteRanges, tag: u16) -> Result<Option<Vec<f64>>, FormatError> {
        let Some(entry) = self.entry(tag) else { return Ok(None) };
        let (_, raw) = self.raw(file, entry, MAX_VALUE_BYTES / 8)?;
        let order = self.header.order();
        let values = match entry.kind {
            1 | 7 => raw.iter().map(|b| f64::from(*b)).collect(),
            6 => raw.iter().map(|b| f64::from(*b as i8)).collect(),
            3 => raw.chunks_exact(2).map(|b| f64::from(order.u16(b))).collect(),
            8 => raw.chunks_exact(2).map(|b| f64::from(order.u16(b) as i16)).collect(),
            4 | 13 => raw.chunks_exact(4).map(|b| f64::from(order.u32(b))).collect(),
            9 => raw.chunks_exact(4).map(|b| f64::from(order.u32(b) as i32)).collect(),
            11 => raw.chunks_exact(4).map(|b| f64::from(f32::from_bits(order.u32(b)))).collect(),
            12 => raw.chunks_exact(8).map(|b| f64::from_bits(order.u64(b))).collect(),
            16 | 18 => raw.chunks_exact(8).map(|b| order.u64(b) as f64).collect(),
            17 => raw.chunks_exact(8).map(|b| order.u64(b) as i64 as f64).collect(),
            5 => raw.chunks_exact(8).map(|b| f64::from(order.u32(b)) / f64::from(order.u32(&b[4..]))).collect(),
            10 => raw
                .chunks_exact(8)
                .map(|b| f64::from(order.u32(b) as i32) / f64::from(order.u32(&b[4..]) as i32))
                .collect(),
            _ => Vec::new(), // ASCII: not numbers
        };
        Ok(Some(values))
    }

    /// `tag`'s value as text (ASCII, or BYTE/UNDEFINED holding text), up to its first NUL; None
    /// when absent.
    pub fn text(&self, file: &dyn ByteRanges, tag: u16) -> Result<Option<String>, FormatError> {
        let Some(entry) = self.entry(tag) else { return Ok(None) };
        if !matches!(entry.kind, 1 | 2 | 7) {
            return Ok(None);
        }
        let (_, raw) = self.raw(file, entry, MAX_VALUE_BYTES)?;
        let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
        Ok(Some(String::from_utf8_lossy(&raw[..end]).into_owned()))
    }
}
