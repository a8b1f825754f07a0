//! (stub: being written)

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Reads the structure of a dmrpp file.
pub fn parse(_file: &dyn ByteRanges, _limits: &Limits) -> Result<Parsed, FormatError> {
    Err(FormatError::Invalid("the dmrpp parser is not built yet".into()))
}
