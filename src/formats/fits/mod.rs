//! FITS files: each header read from its blocks of cards, each image HDU with data one Zarr
//! array of the raw big-endian values referencing the file, tables left out with a warning.
//!
//! Arrays are named as kerchunk's `fits.process_file` names them (VirtualiZarr's `FITSParser`
//! calls it): the HDU's EXTNAME, else `PRIMARY` for the primary HDU, else its index. A name
//! taken already gets `_<EXTVER>` (or `_<index>`), so HST's SCI/ERR/DQ per chip all appear.
//! The primary header goes on the root group when the primary HDU has no data (the usual
//! multi-extension file, whose primary header describes the whole observation).
//!
//! The header is parsed here, not with the `fitsrs` crate: it reads through `std::io::Read`,
//! multiplies NAXISn without checking (a hostile header panics or wraps), and brings a WCS
//! library and async runtime helpers for what is 80-character text cards.

mod array;
mod card;
mod chunks;
mod hdu;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json, json};

use super::{ByteRanges, FormatError, Limits, Node, Parsed};
use card::Value;
use hdu::{Hdu, Kind};

/// Headers and data units are whole numbers of these.
const BLOCK: u64 = 2880;

/// Reads the structure of a FITS file.
pub fn parse(file: &dyn ByteRanges, limits: &Limits) -> Result<Parsed, FormatError> {
    let mut parsed = Parsed::default();
    let hdus = walk(file, limits, &mut parsed.warnings)?;
    let primary_attributes = match hdus.first() {
        Some(primary) if !has_data(primary) => array::attributes(&primary.header, limits, "the primary header")?,
        _ => Map::new(),
    };
    let root = json!({"zarr_format": 3, "node_type": "group", "attributes": primary_attributes});
    parsed.nodes.insert(String::new(), Node { metadata: object(root).into(), chunks: Vec::new() });
    let mut dimensions = Dimensions::default();
    for hdu in &hdus {
        limits.check_time()?;
        match &hdu.kind {
            Kind::Image if has_data(hdu) => {
                let name = name(hdu, &parsed.nodes);
                let names = dimensions.name(&name, &hdu.axes);
                let node = array::build(hdu, &names, file.len(), limits, &mut parsed.warnings)?;
                parsed.nodes.insert(name, node);
            }
            Kind::Image => {}
            Kind::RandomGroups => {
                parsed.warnings.push(format!("{}: random groups are left out (not an image)", hdu.label()))
            }
            Kind::CompressedImage => parsed.warnings.push(format!(
                "{}: a tile-compressed image (ZIMAGE in a BINTABLE) is left out: its tiles are table cells",
                hdu.label()
            )),
            Kind::Other(xtension) => parsed
                .warnings
                .push(format!("{}: a {xtension} extension is left out: only images are served", hdu.label())),
        }
    }
    Ok(parsed)
}

/// Every HDU of the file, in order: after each data unit (padded to a block) comes the next
/// header, until the file ends. Bytes after the last HDU that are not a FITS extension (zeros
/// some writers pad with, or anything else) end the walk; the latter with a warning.
fn walk(file: &dyn ByteRanges, limits: &Limits, warnings: &mut Vec<String>) -> Result<Vec<Hdu>, FormatError> {
    let file_len = file.len();
    let mut hdus = Vec::new();
    let mut start = 0u64;
    loop {
        limits.check_time()?;
        if hdus.len() >= limits.max_nodes {
            return Err(FormatError::TooLarge(format!(
                "it has more HDUs than limits.max_nodes ({}) allows",
                limits.max_nodes
            )));
        }
        let header = card::read(file, start, limits)?;
        let hdu = Hdu::new(hdus.len(), start, header, file_len)?;
        // Inside the file (Hdu::new checked the data's end): no overflow.
        let next = (hdu.data_start + hdu.data_len).div_ceil(BLOCK) * BLOCK;
        hdus.push(hdu);
        if next.saturating_add(BLOCK) > file_len {
            return Ok(hdus);
        }
        let head = file.read(next, 8)?;
        if &head[..] != b"XTENSION" {
            if head.iter().any(|b| !matches!(b, 0 | b' ')) {
                warnings.push(format!(
                    "the {} bytes after its last HDU (from byte {next}) are not a FITS extension and are ignored",
                    file_len - next
                ));
            }
            return Ok(hdus);
        }
        start = next;
    }
}

fn has_data(hdu: &Hdu) -> bool {
    !hdu.axes.is_empty() && hdu.axes.iter().all(|n| *n > 0)
}

/// The array's name: EXTNAME, else `PRIMARY` or the index (kerchunk's `hdu.name or str(ext)`,
/// astropy's names), made a valid Zarr node name and unique in the file.
fn name(hdu: &Hdu, taken: &BTreeMap<String, Node>) -> String {
    let plain = match (hdu.extname(), hdu.index) {
        (Some(name), _) => name.replace('/', "_"),
        (None, 0) => "PRIMARY".to_owned(),
        (None, index) => index.to_string(),
    };
    // Names a Zarr node cannot have (`zarr::path::NodePath`): the index instead.
    let reserved = matches!(plain.as_str(), "." | ".." | "zarr.json") || plain.starts_with("__");
    let plain = if reserved { hdu.index.to_string() } else { plain };
    if !taken.contains_key(&plain) {
        return plain;
    }
    if let Some(Value::Int(version)) = hdu.header.get("EXTVER") {
        let versioned = format!("{plain}_{version}");
        if !taken.contains_key(&versioned) {
            return versioned;
        }
    }
    // Taken too only when an EXTNAME spells it: a few more tries, at most one per HDU.
    let mut indexed = format!("{plain}_{}", hdu.index);
    while taken.contains_key(&indexed) {
        indexed.push('_');
    }
    indexed
}

/// Dimension names: `x`, `y`, `z` for NAXIS1, 2, 3 (kerchunk's `_ARRAY_DIMENSIONS`), `axis4`...
/// past them; one already used by another image with another length is prefixed with the
/// array's name (`SCI_x`), so that xarray opens the file as one dataset.
#[derive(Default)]
struct Dimensions {
    lengths: BTreeMap<String, u64>,
}

impl Dimensions {
    /// The names of `axes` (NAXIS1 first) for the array `array`, slowest axis first.
    fn name(&mut self, array: &str, axes: &[u64]) -> Vec<String> {
        let mut names = Vec::with_capacity(axes.len());
        for (n, length) in axes.iter().enumerate() {
            let plain = match n {
                0 => "x".to_owned(),
                1 => "y".to_owned(),
                2 => "z".to_owned(),
                _ => format!("axis{}", n + 1),
            };
            let name = match self.lengths.get(&plain) {
                Some(known) if known != length => format!("{array}_{plain}"),
                _ => plain,
            };
            self.lengths.entry(name.clone()).or_insert(*length);
            names.push(name);
        }
        names.reverse();
        names
    }
}

fn object(value: Json) -> Map<String, Json> {
    match value {
        Json::Object(map) => map,
        _ => Map::new(),
    }
}
