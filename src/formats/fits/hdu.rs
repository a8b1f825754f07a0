//! What an HDU's structural keywords say: its kind (primary, IMAGE, table...), data type,
//! axes, and where its data unit lies. Every value is checked (NAXIS 0 to 999, sizes that do
//! not overflow, data inside the file) before anything is built from it.

use super::card::{Header, Value};
use crate::formats::FormatError;

/// What an HDU holds, as far as serving it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The primary HDU's image (or none when NAXIS = 0), or an IMAGE extension's.
    Image,
    /// Random groups (the primary HDU with NAXIS1 = 0 and GROUPS = T): left out.
    RandomGroups,
    /// A tile-compressed image (a BINTABLE with ZIMAGE = T): left out.
    CompressedImage,
    /// Any other extension (`BINTABLE`, `TABLE`, ...), by its XTENSION: left out.
    Other(String),
}

/// One HDU of the file.
#[derive(Debug)]
pub struct Hdu {
    /// Its place in the file, 0 for the primary HDU.
    pub index: usize,
    pub header: Header,
    pub kind: Kind,
    /// BITPIX: 8, 16, 32, 64, -32 or -64.
    pub bitpix: i64,
    /// NAXIS1, NAXIS2, ... (NAXIS1 varies fastest).
    pub axes: Vec<u64>,
    /// Where its data unit starts, and its length (padding to a block excluded).
    pub data_start: u64,
    pub data_len: u64,
}

impl Hdu {
    /// The HDU whose `header` starts at byte `start` of a `file_len`-byte file.
    pub fn new(index: usize, start: u64, header: Header, file_len: u64) -> Result<Self, FormatError> {
        let at = |what: String| FormatError::Invalid(format!("HDU {index} (the header at byte {start}): {what}"));
        let kind = kind(index, &header).map_err(at)?;
        let bitpix = integer(&header, "BITPIX").map_err(at)?;
        let bitpix = match bitpix {
            8 | 16 | 32 | 64 | -32 | -64 => bitpix as i64,
            _ => return Err(at(format!("BITPIX = {bitpix}: FITS has 8, 16, 32, 64, -32 and -64"))),
        };
        let naxis = integer(&header, "NAXIS").map_err(at)?;
        if !(0..=999).contains(&naxis) {
            return Err(at(format!("NAXIS = {naxis}: FITS allows 0 to 999 axes")));
        }
        let mut axes = Vec::with_capacity(naxis as usize);
        for n in 1..=naxis {
            let length = integer(&header, &format!("NAXIS{n}")).map_err(at)?;
            axes.push(u64::try_from(length).map_err(|_| at(format!("NAXIS{n} = {length} is negative")))?);
        }
        let data_len = data_len(&header, &kind, bitpix, &axes).map_err(at)?;
        let data_start = start + header.len;
        if data_start.checked_add(data_len).is_none_or(|end| end > file_len) {
            return Err(at(format!(
                "its {data_len} bytes of data from byte {data_start} go past the end of the {file_len}-byte file (truncated?)"
            )));
        }
        Ok(Self { index, header, kind, bitpix, axes, data_start, data_len })
    }

    /// Its EXTNAME, when it has a non-blank one.
    pub fn extname(&self) -> Option<&str> {
        match self.header.get("EXTNAME") {
            Some(Value::Text(name)) if !name.trim().is_empty() => Some(name.trim()),
            _ => None,
        }
    }

    /// How warnings name it: `HDU 2 (EVENTS)`.
    pub fn label(&self) -> String {
        match self.extname() {
            Some(name) => format!("HDU {} ({name:?})", self.index),
            None => format!("HDU {}", self.index),
        }
    }
}

fn kind(index: usize, header: &Header) -> Result<Kind, String> {
    let Some((first, value)) = header.cards.first() else {
        return Err("its header is empty".into());
    };
    let logical = |keyword: &str| matches!(header.get(keyword), Some(Value::Logical(true)));
    match (index, first.as_str(), value) {
        (0, "SIMPLE", _) if header.get("NAXIS1") == Some(&Value::Int(0)) && logical("GROUPS") => Ok(Kind::RandomGroups),
        (0, "SIMPLE", _) => Ok(Kind::Image),
        (0, _, _) => Err(format!("it starts with {first}, not SIMPLE: not a FITS file")),
        (_, "XTENSION", Value::Text(xtension)) => Ok(match xtension.as_str() {
            "IMAGE" => Kind::Image,
            "BINTABLE" if logical("ZIMAGE") => Kind::CompressedImage,
            other => Kind::Other(other.to_owned()),
        }),
        _ => Err(format!("it starts with {first}, not XTENSION = '...': not a FITS extension")),
    }
}

/// The data unit's length: |BITPIX|/8 x GCOUNT x (PCOUNT + NAXIS1 x ... x NAXISn), as the
/// standard's section 4.4.1 gives it for every kind (random groups leave NAXIS1 out).
fn data_len(header: &Header, kind: &Kind, bitpix: i64, axes: &[u64]) -> Result<u64, String> {
    let counted = match kind {
        Kind::RandomGroups => axes.get(1..).unwrap_or_default(),
        _ => axes,
    };
    let overflow = || format!("its data size ({axes:?} axes of {bitpix} bits) overflows");
    let elements = match counted {
        [] if axes.is_empty() => 0,
        _ => counted.iter().try_fold(1u64, |product, n| product.checked_mul(*n)).ok_or_else(overflow)?,
    };
    let (pcount, gcount) = match kind {
        Kind::Image if header.get("XTENSION").is_none() => (0, 1),
        _ => (optional(header, "PCOUNT", 0)?, optional(header, "GCOUNT", 1)?),
    };
    elements
        .checked_add(pcount)
        .and_then(|n| n.checked_mul(gcount))
        .and_then(|n| n.checked_mul(bitpix.unsigned_abs() / 8))
        .ok_or_else(overflow)
}

fn integer(header: &Header, keyword: &str) -> Result<i128, String> {
    match header.get(keyword) {
        Some(Value::Int(value)) => Ok(*value),
        Some(other) => Err(format!("{keyword} = {other:?} is not an integer")),
        None => Err(format!("it has no {keyword} card")),
    }
}

fn optional(header: &Header, keyword: &str, default: u64) -> Result<u64, String> {
    match header.get(keyword) {
        None => Ok(default),
        Some(_) => {
            let value = integer(header, keyword)?;
            u64::try_from(value).map_err(|_| format!("{keyword} = {value} is negative"))
        }
    }
}
