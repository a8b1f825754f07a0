//! The netCDF classic header (CDF-1, CDF-2 64-bit offset, CDF-5 64-bit data) read from the
//! bytes at the start of the file: numrecs, the dimensions, the global attributes, the
//! variables. Every count is checked against what is left of the file before anything is
//! allocated for it.

use super::types::NcType;
use crate::formats::{FormatError, Limits};

const NC_DIMENSION: u32 = 0x0A;
const NC_VARIABLE: u32 = 0x0B;
const NC_ATTRIBUTE: u32 = 0x0C;

/// What the header says.
#[derive(Debug)]
pub struct Header {
    /// Records in the file, or None for STREAMING (count them from the file's length).
    pub numrecs: Option<u64>,
    pub dimensions: Vec<Dimension>,
    pub attributes: Vec<Attribute>,
    pub variables: Vec<Variable>,
}

/// A dimension: length 0 is the record (unlimited) dimension.
#[derive(Debug)]
pub struct Dimension {
    pub name: String,
    pub length: u64,
}

/// An attribute: its type and its values' big-endian bytes (padding left out).
#[derive(Debug)]
pub struct Attribute {
    pub name: String,
    pub nc_type: NcType,
    pub values: Vec<u8>,
}

/// A variable as the header lists it.
#[derive(Debug)]
pub struct Variable {
    pub name: String,
    pub dimension_ids: Vec<u64>,
    pub attributes: Vec<Attribute>,
    pub nc_type: NcType,
    /// Where its data (or its first record) starts.
    pub begin: u64,
}

/// Why reading stopped: the bytes given end before the header does (read more), or the file
/// is wrong.
#[derive(Debug)]
pub enum Stop {
    Short,
    Bad(FormatError),
}

impl From<FormatError> for Stop {
    fn from(error: FormatError) -> Self {
        Self::Bad(error)
    }
}

/// `head`, the first bytes of a file of `file_len` bytes, read as a header; [`Stop::Short`]
/// when the header goes on past `head`.
pub fn read(head: &[u8], file_len: u64, limits: &Limits) -> Result<Header, Stop> {
    let mut cursor = Cursor { head, at: 0, file_len, cdf5: false };
    let magic = cursor.take(4, "the magic number")?;
    if &magic[..3] != b"CDF" || !matches!(magic[3], 1 | 2 | 5) {
        return Err(invalid("it does not start with CDF\\x01, CDF\\x02 or CDF\\x05: not a netCDF3 file".into()));
    }
    let version = magic[3];
    cursor.cdf5 = version == 5;
    let numrecs = cursor.non_neg("numrecs")?;
    let streaming = if cursor.cdf5 { numrecs == u64::MAX } else { numrecs == u64::from(u32::MAX) };
    let dimensions = read_dimensions(&mut cursor, limits)?;
    let attributes = read_attributes(&mut cursor, limits, "the global attributes")?;
    let variables = read_variables(&mut cursor, limits, version)?;
    Ok(Header { numrecs: (!streaming).then_some(numrecs), dimensions, attributes, variables })
}

fn invalid(message: String) -> Stop {
    Stop::Bad(FormatError::Invalid(message))
}

fn read_dimensions(cursor: &mut Cursor, limits: &Limits) -> Result<Vec<Dimension>, Stop> {
    let count = cursor.list(NC_DIMENSION, "dimensions", 2 * cursor.word())?;
    let mut dimensions = Vec::new();
    for index in 0..count {
        limits.check_time()?;
        let name = cursor.name(&format!("dimension {index}"))?;
        let length = cursor.non_neg(&format!("the length of dimension {name:?}"))?;
        dimensions.push(Dimension { name, length });
    }
    Ok(dimensions)
}

fn read_attributes(cursor: &mut Cursor, limits: &Limits, whose: &str) -> Result<Vec<Attribute>, Stop> {
    let count = cursor.list(NC_ATTRIBUTE, whose, 2 * cursor.word() + 4)?;
    if count > limits.max_attributes as u64 {
        return Err(Stop::Bad(FormatError::TooLarge(format!(
            "{whose} are {count}, more than limits.max_attributes ({})",
            limits.max_attributes
        ))));
    }
    let mut attributes = Vec::new();
    for index in 0..count {
        limits.check_time()?;
        let name = cursor.name(&format!("attribute {index} of {whose}"))?;
        let what = format!("attribute {name:?} of {whose}");
        let code = cursor.u32(&what)?;
        let nc_type = NcType::from_code(code.into(), cursor.cdf5)
            .ok_or_else(|| invalid(format!("{what} has the unknown type code {code}")))?;
        let count = cursor.non_neg(&what)?;
        let len = count.checked_mul(nc_type.size()).ok_or_else(|| invalid(format!("{what} has {count} values")))?;
        let values = cursor.padded(len, &what)?.to_vec();
        if attributes.iter().any(|a: &Attribute| a.name == name) {
            return Err(invalid(format!("{what} is there twice")));
        }
        attributes.push(Attribute { name, nc_type, values });
    }
    Ok(attributes)
}

fn read_variables(cursor: &mut Cursor, limits: &Limits, version: u8) -> Result<Vec<Variable>, Stop> {
    let offset_bytes = if version == 1 { 4 } else { 8 };
    let least = 4 * cursor.word() + 8 + offset_bytes;
    let count = cursor.list(NC_VARIABLE, "variables", least)?;
    if count >= limits.max_nodes as u64 {
        return Err(Stop::Bad(FormatError::TooLarge(format!(
            "it has {count} variables, more than limits.max_nodes ({}) allows",
            limits.max_nodes
        ))));
    }
    let mut variables = Vec::new();
    for index in 0..count {
        limits.check_time()?;
        let name = cursor.name(&format!("variable {index}"))?;
        let what = format!("variable {name:?}");
        let rank = cursor.non_neg(&what)?;
        cursor.fits(rank, cursor.word(), &format!("the dimensions of {what}"))?;
        let mut dimension_ids = Vec::new();
        for _ in 0..rank {
            dimension_ids.push(cursor.non_neg(&what)?);
        }
        let attributes = read_attributes(cursor, limits, &format!("the attributes of {what}"))?;
        let code = cursor.u32(&what)?;
        let nc_type = NcType::from_code(code.into(), cursor.cdf5)
            .ok_or_else(|| invalid(format!("{what} has the unknown type code {code}")))?;
        let _vsize = cursor.non_neg(&what)?;
        let begin = if offset_bytes == 4 { cursor.u32(&what)?.into() } else { cursor.u64(&what)? };
        variables.push(Variable { name, dimension_ids, attributes, nc_type, begin });
    }
    Ok(variables)
}

/// A reading position in the first bytes of the file.
struct Cursor<'a> {
    head: &'a [u8],
    at: usize,
    file_len: u64,
    cdf5: bool,
}

impl<'a> Cursor<'a> {
    /// Bytes of a NON_NEG count: 8 in CDF-5, else 4.
    fn word(&self) -> u64 {
        if self.cdf5 { 8 } else { 4 }
    }

    fn take(&mut self, len: u64, what: &str) -> Result<&'a [u8], Stop> {
        let end = (self.at as u64).saturating_add(len);
        if end > self.file_len {
            return Err(invalid(format!(
                "its header ends inside {what} at byte {}, past the end of the {}-byte file (truncated?)",
                self.at, self.file_len
            )));
        }
        if end > self.head.len() as u64 {
            return Err(Stop::Short);
        }
        let bytes = &self.head[self.at..end as usize];
        self.at = end as usize;
        Ok(bytes)
    }

    fn u32(&mut self, what: &str) -> Result<u32, Stop> {
        let bytes = self.take(4, what)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, Stop> {
        Ok((u64::from(self.u32(what)?) << 32) | u64::from(self.u32(what)?))
    }

    fn non_neg(&mut self, what: &str) -> Result<u64, Stop> {
        if self.cdf5 { self.u64(what) } else { self.u32(what).map(u64::from) }
    }

    /// Checks that `count` items of at least `least` bytes each fit in the rest of the file.
    fn fits(&self, count: u64, least: u64, what: &str) -> Result<(), Stop> {
        let left = self.file_len.saturating_sub(self.at as u64);
        if count.checked_mul(least).is_none_or(|need| need > left) {
            return Err(invalid(format!(
                "{what} at byte {} are said to be {count}, more than the {left} bytes left in the file hold",
                self.at
            )));
        }
        Ok(())
    }

    /// The count of a list (ABSENT, or its tag and count), checked to fit in the file.
    fn list(&mut self, tag: u32, what: &str, least: u64) -> Result<u64, Stop> {
        let at = self.at;
        let found = self.u32(what)?;
        let count = self.non_neg(what)?;
        if found != tag && !(found == 0 && count == 0) {
            return Err(invalid(format!("{what} at byte {at} start with tag {found:#x}, not {tag:#x} or ABSENT")));
        }
        self.fits(count, least, what)?;
        Ok(count)
    }

    /// `len` bytes and their padding to 4 bytes.
    fn padded(&mut self, len: u64, what: &str) -> Result<&'a [u8], Stop> {
        self.fits(len, 1, what)?;
        let bytes = self.take(len, what)?;
        self.take(len.wrapping_neg() % 4, what)?;
        Ok(bytes)
    }

    /// A name: UTF-8, not empty, no `/`, padded with zeros.
    fn name(&mut self, what: &str) -> Result<String, Stop> {
        let at = self.at;
        let len = self.non_neg(&format!("the name of {what}"))?;
        self.fits(len, 1, &format!("the name bytes of {what}"))?;
        let bytes = self.take(len, &format!("the name of {what}"))?;
        let padding = self.take(len.wrapping_neg() % 4, &format!("the name of {what}"))?;
        let name =
            std::str::from_utf8(bytes).map_err(|_| invalid(format!("the name of {what} at byte {at} is not UTF-8")))?;
        if padding.iter().any(|b| *b != 0) {
            return Err(invalid(format!("the name of {what} ({name:?}) at byte {at} is not padded with zeros")));
        }
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(invalid(format!("the name of {what} at byte {at} is {name:?}, not a netCDF name")));
        }
        Ok(name.to_owned())
    }
}
