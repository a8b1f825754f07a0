//! (stub: being written)

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Reads the structure of a hdf5 file.
pub fn parse(_file: &dyn ByteRanges, _limits: &Limits) -> Result<Parsed, FormatError> {
    Err(FormatError::Invalid("the hdf5 parser is not built yet".into()))
}
