//! netCDF3 files (classic CDF-1, 64-bit offset CDF-2, 64-bit data CDF-5): the header read from
//! the first bytes, each variable one Zarr array of big-endian values referencing the file.

mod header;
mod layout;
#[cfg(test)]
mod tests;
mod types;

use super::{ByteRanges, FormatError, Limits, Parsed};
use header::Stop;

/// The first read: most headers are smaller; a longer one is read on, 4 times as far each time.
const FIRST_READ: u64 = 64 << 10;

/// Reads the structure of a netCDF3 file.
pub fn parse(file: &dyn ByteRanges, limits: &Limits) -> Result<Parsed, FormatError> {
    let file_len = file.len();
    let mut head = file.read(0, FIRST_READ.min(file_len))?.to_vec();
    loop {
        limits.check_time()?;
        match header::read(&head, file_len, limits) {
            Ok(header) => return layout::build(&header, file_len, limits),
            Err(Stop::Bad(error)) => return Err(error),
            Err(Stop::Short) => {
                let have = head.len() as u64;
                let want = have.saturating_mul(4).clamp(FIRST_READ, file_len);
                if want <= have {
                    return Err(FormatError::Invalid("its header is longer than the file (truncated?)".into()));
                }
                head.extend_from_slice(&file.read(have, want - have)?);
            }
        }
    }
}
