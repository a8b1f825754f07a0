//! GRIB2 files (every weather model's output: GFS, HRRR, ECMWF open data): one message one
//! chunk, decoded by the `gribberish` codec (gribberish's zarr-python codec, and its zarrs codec
//! that zarrgate links for `?codecs=portable`), laid out as VirtualiZarr's `GribberishParser`
//! lays them out (`layout.rs`).
//!
//! gribberish (the crate behind that parser, pure Rust) names each message's variable, level and
//! times from its tables; zarrgate finds the messages and reads their headers itself (`scan.rs`),
//! never their data: section 0 gives each message's length, so the next one is found without
//! reading this one's data. A sidecar index (NOAA's `.idx`, ECMWF's `.index`), when the file has
//! one, gives every message's offset at once: their headers are then read side by side.

mod layout;
mod meta;
mod scan;
#[cfg(test)]
mod tests;

pub use meta::DECODED_PACKINGS;

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Reads the structure of a GRIB2 file; `index` is the text of its sidecar index, if it has one.
pub fn parse(file: &dyn ByteRanges, limits: &Limits, index: Option<&str>) -> Result<Parsed, FormatError> {
    let mut warnings = Vec::new();
    let messages = match index.map(|text| offsets(text, file.len())) {
        Some(Ok(offsets)) => match scan::at_offsets(file, &offsets, limits, &mut warnings) {
            Ok(messages) => messages,
            Err(FormatError::Invalid(why)) => {
                warnings.clear();
                warnings.push(format!("its index does not match it ({why}): the file was read from its start"));
                scan::scan(file, limits, &mut warnings)?
            }
            Err(e) => return Err(e),
        },
        Some(Err(why)) => {
            warnings.push(format!("its index cannot be read ({why}): the file was read from its start"));
            scan::scan(file, limits, &mut warnings)?
        }
        None => scan::scan(file, limits, &mut warnings)?,
    };
    let mut described = Vec::with_capacity(messages.len());
    for message in messages {
        limits.check_time()?;
        match meta::describe(message) {
            Ok(d) => described.push(d),
            Err(why) => warnings.push(why),
        }
    }
    let mut parsed = layout::build(described, limits, &mut warnings)?;
    parsed.warnings = warnings;
    Ok(parsed)
}

/// The messages an index lists: `(offset, length)`, in the file's order, once each (a NOAA
/// index lists a message's fields as `N.1`, `N.2`... at one offset).
fn offsets(text: &str, file_len: u64) -> Result<Vec<(u64, Option<u64>)>, String> {
    let entries = gribberish::index::parse_index(text, Some(file_len)).map_err(|e| e.to_string())?;
    let mut offsets: Vec<(u64, Option<u64>)> = entries.iter().map(|e| (e.offset, e.length)).collect();
    offsets.sort_by_key(|(offset, _)| *offset);
    offsets.dedup_by_key(|(offset, _)| *offset);
    if offsets.is_empty() {
        return Err("it lists no message".into());
    }
    Ok(offsets)
}

/// The sidecar indexes a GRIB file at `url` may have, in the order they are looked for: NOAA's
/// `<file>.idx`, and ECMWF open data's `<file without its extension>.index`.
pub fn index_candidates(url: &str) -> Vec<String> {
    let mut candidates = vec![format!("{url}.idx")];
    let name_start = url.rfind('/').map_or(0, |i| i + 1);
    let stem = match url[name_start..].rfind('.') {
        Some(dot) => &url[..name_start + dot],
        None => url,
    };
    candidates.push(format!("{stem}.index"));
    candidates
}
