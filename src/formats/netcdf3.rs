//! (stub: being written) 

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Reads the structure of a netcdf3 file.
pub fn parse(_file: &dyn ByteRanges, _limits: &Limits) -> Result<Parsed, FormatError> {
    Err(FormatError::Invalid("the netcdf3 parser is not built yet".into()))
}
