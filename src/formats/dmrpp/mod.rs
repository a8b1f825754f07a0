//! DMR++ sidecars (OPeNDAP Hyrax's `<file>.dmrpp`): the XML that describes an HDF5/netCDF4
//! file's groups, variables, attributes and chunk byte ranges, read with quick-xml's streaming
//! reader into the hierarchy the file itself would give (`hdf5.rs`'s output for that file):
//! the chunks point into the file beside the sidecar (its URL less `.dmrpp`), or a chunk's own
//! absolute `href`.

mod attributes;
mod elements;
mod frame;
mod inline;
mod phony;
mod text;
mod variable;
mod walk;

#[cfg(test)]
mod tests;

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Reads the structure a DMR++ document describes.
pub fn parse(file: &dyn ByteRanges, limits: &Limits) -> Result<Parsed, FormatError> {
    let document = file.read(0, file.len())?;
    let mut walk = walk::Walk::new(limits);
    walk.run(&document)?;
    let groups = std::mem::take(&mut walk.groups);
    let mut parsed = walk.parsed;
    phony::name_dimensions(&mut parsed, &groups);
    Ok(parsed)
}
