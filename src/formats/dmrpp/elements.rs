//! The elements inside a DMR++ variable (`Dim`, `dmrpp:chunks`, `dmrpp:chunk`...) and the
//! XML attributes of any element, read into a [`Variable`].

use std::collections::HashMap;

use quick_xml::events::BytesStart;

use super::super::FormatError;
use super::frame::{Frame, TextOf};
use super::text::{self, short};
use super::variable::{RawChunk, Variable};

/// XML attributes one element may have (quick-xml's duplicate check is quadratic in them).
const MAX_XML_ATTRIBUTES: usize = 64;

pub(super) const BLOCKS: &str = "a chunk made of several byte ranges (dmrpp:block) cannot be served";

/// A child of a variable element.
pub(super) fn in_variable(
    variable: &mut Variable,
    name: &[u8],
    xml: &Xml,
    dimensions: &HashMap<String, u64>,
    at: u64,
) -> Result<Frame, FormatError> {
    let frame = match name {
        b"Dim" => {
            let dim = match xml.get("name") {
                Some(dim_name) => {
                    let size = resolve(dimensions, &variable.path, dim_name).ok_or_else(|| {
                        FormatError::Invalid(format!(
                            "{}: its Dim {:?} is not declared",
                            variable.path,
                            short(dim_name)
                        ))
                    })?;
                    let last = dim_name.rsplit('/').next().unwrap_or(dim_name).to_owned();
                    (Some(last), size)
                }
                None => (None, text::number_of(xml.get("size").unwrap_or(""), &format!("{} Dim size", variable.path))?),
            };
            if variable.dims.len() >= 64 {
                return Err(FormatError::Invalid(format!("{}: more than 64 dimensions (byte {at})", variable.path)));
            }
            variable.dims.push(dim);
            Frame::Skip
        }
        b"chunks" => {
            variable.compression = xml.get("compressionType").map(str::to_owned);
            if let Some(levels) = xml.get("deflateLevel") {
                variable.deflate_levels = text::numbers(levels, &format!("{} deflateLevel", variable.path))?;
            }
            variable.fill = xml.get("fillValue").map(str::to_owned);
            variable.big_endian = xml.get("byteOrder") == Some("BE");
            if xml.get("LBChunk") == Some("true") {
                variable.unsupported = Some(BLOCKS.into());
            }
            Frame::Chunks
        }
        b"chunk" => {
            variable.chunks.push(raw_chunk(xml, at)?);
            Frame::Chunk
        }
        b"FixedLengthStringArray" => {
            let what = format!("{} string_length", variable.path);
            let length = text::number_of(xml.get("string_length").unwrap_or(""), &what)?;
            if length == 0 {
                return Err(FormatError::Invalid(format!("{what}: a fixed-length string of 0 bytes")));
            }
            variable.string_length = Some(length);
            Frame::Skip
        }
        b"compact" => Frame::Text(TextOf::Compact, String::new()),
        b"missingdata" => Frame::Text(TextOf::MissingData, String::new()),
        b"vlsa" if variable.kind == "String" => {
            variable.strings = Some(Vec::new());
            Frame::Vlsa
        }
        b"vlsa" | b"specialstructuredata" => {
            variable.unsupported = Some("variable-length and structure data are not supported".into());
            Frame::Skip
        }
        _ => Frame::Skip,
    };
    Ok(frame)
}

/// A `Dim name=` as a size: a full name, else one relative to the variable's group or above.
fn resolve(dimensions: &HashMap<String, u64>, variable_path: &str, name: &str) -> Option<u64> {
    if name.starts_with('/') {
        return dimensions.get(name).copied();
    }
    let mut group = variable_path.rsplit_once('/').map_or("", |(g, _)| g);
    loop {
        let full = if group.is_empty() { format!("/{name}") } else { format!("/{group}/{name}") };
        if let Some(size) = dimensions.get(&full) {
            return Some(*size);
        }
        if group.is_empty() {
            return None;
        }
        group = group.rsplit_once('/').map_or("", |(g, _)| g);
    }
}

/// One `dmrpp:chunk`'s attributes.
pub(super) fn raw_chunk(xml: &Xml, at: u64) -> Result<RawChunk, FormatError> {
    let what = format!("dmrpp:chunk at byte {at}");
    let number = |key: &str| xml.get(key).map(|v| text::number_of(v, &what)).transpose();
    Ok(RawChunk {
        offset: number("offset")?,
        length: number("nBytes")?,
        position: xml.get("chunkPositionInArray").map(|p| text::position(p, &what)).transpose()?,
        href: xml.get("href").map(str::to_owned),
        filter_mask: number("fm")?.unwrap_or(0),
    })
}

/// A node's path below `parent`, from a `name` that must be a plain, non-empty name.
pub(super) fn child_path(parent: &str, name: Option<&str>, at: u64) -> Result<String, FormatError> {
    let name = name.unwrap_or_default();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.starts_with("__") {
        return Err(FormatError::Invalid(format!(
            "an element at byte {at} has the name {:?}, which cannot name a Zarr node",
            short(name)
        )));
    }
    Ok(if parent.is_empty() { name.to_owned() } else { format!("{parent}/{name}") })
}

/// An element's XML attributes by local name, values unescaped.
pub(super) struct Xml(Vec<(String, String)>);

impl Xml {
    pub fn of(element: &BytesStart, at: u64) -> Result<Self, FormatError> {
        xml_attributes(element, at).map(Self)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn xml_attributes(element: &BytesStart, at: u64) -> Result<Vec<(String, String)>, FormatError> {
    let mut out = Vec::new();
    for attribute in element.attributes().with_checks(false) {
        let attribute = attribute.map_err(|e| {
            FormatError::Invalid(format!("the DMR++ document has a malformed XML attribute near byte {at}: {e}"))
        })?;
        if out.len() == MAX_XML_ATTRIBUTES {
            return Err(FormatError::TooLarge(format!(
                "an element at byte {at} has more than {MAX_XML_ATTRIBUTES} XML attributes"
            )));
        }
        let key = text::decode(attribute.key.local_name().as_ref());
        out.push((key, text::unescape(&attribute.value)?));
    }
    Ok(out)
}
