//! Data a DMR++ document holds itself: `dmrpp:compact` (the base64 of an HDF5 compact
//! dataset's bytes) and `dmrpp:missingdata` (the base64 of zlib-compressed values Hyrax made
//! for a variable the file lacks; a single value is not compressed).

use std::io::Read;

use base64::Engine;

use super::super::FormatError;

/// The bytes of a `dmrpp:compact`, which must be the variable's `bytes`.
pub(super) fn compact(text: &str, bytes: u64, path: &str) -> Result<Vec<u8>, FormatError> {
    let data = base64(text, bytes, path, "dmrpp:compact")?;
    if data.len() as u64 != bytes {
        return Err(FormatError::Invalid(format!(
            "{path}: dmrpp:compact holds {} bytes where its shape needs {bytes}",
            data.len()
        )));
    }
    Ok(data)
}

/// The values of a `dmrpp:missingdata`: `bytes` of them once inflated (`single`: one value,
/// stored as is).
pub(super) fn missing_data(text: &str, bytes: u64, single: bool, path: &str) -> Result<Vec<u8>, FormatError> {
    if single {
        return compact(text, bytes, path);
    }
    // zlib does not expand data by more than a few bytes per 16 KiB block.
    let data = base64(text, bytes.saturating_add(bytes / 64).saturating_add(64), path, "dmrpp:missingdata")?;
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(data.as_slice())
        .take(bytes.saturating_add(1))
        .read_to_end(&mut inflated)
        .map_err(|e| FormatError::Invalid(format!("{path}: dmrpp:missingdata does not inflate: {e}")))?;
    if inflated.len() as u64 != bytes {
        return Err(FormatError::Invalid(format!(
            "{path}: dmrpp:missingdata inflates to {} bytes where its shape needs {bytes}",
            inflated.len()
        )));
    }
    Ok(inflated)
}

/// `text` decoded, refused before decoding when it would be longer than `most` bytes.
fn base64(text: &str, most: u64, path: &str, what: &str) -> Result<Vec<u8>, FormatError> {
    let clean: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if (clean.len() as u64 / 4).saturating_mul(3) > most.saturating_add(3) {
        return Err(FormatError::Invalid(format!(
            "{path}: {what} holds {} base64 characters, more than its shape needs",
            clean.len()
        )));
    }
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| FormatError::Invalid(format!("{path}: {what} is not base64: {e}")))
}
