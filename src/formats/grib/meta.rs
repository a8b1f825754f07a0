//! What each message is (variable, level, times, grid), read by gribberish from its header:
//! gribberish's parameter tables name the variables, so that the hierarchy is the one
//! VirtualiZarr's `GribberishParser` gives for the same file.

use std::panic::{AssertUnwindSafe, catch_unwind};

use gribberish::message::Message as Grib;
use gribberish::message_metadata::MessageMetadata;

use super::scan::Message;

/// The most points one grid may have (a 0.1-degree global grid has 6.5 million).
pub const MAX_POINTS: u64 = 1 << 28;

/// One message's metadata, with where it lies.
pub struct Described {
    pub message: Message,
    pub meta: MessageMetadata,
}

/// The data representation templates whose messages zarrgate decodes (simple, complex and
/// complex with spatial differencing packing, PNG, CCSDS): gribberish's pure-Rust decoders.
pub const DECODED: &[u16] = &[0, 2, 3, 41, 42];

/// The same, by [`packing_name`]: what the `GRIB_packingType` attribute of an array says.
pub const DECODED_PACKINGS: &[&str] =
    &["grid_simple", "grid_complex", "grid_complex_spatial_differencing", "grid_png", "grid_ccsds"];

/// eccodes' `packingType` of a data representation template (the name users know).
pub fn packing_name(template: u16) -> String {
    match template {
        0 => "grid_simple".into(),
        2 => "grid_complex".into(),
        3 => "grid_complex_spatial_differencing".into(),
        4 => "grid_ieee".into(),
        40 => "grid_jpeg".into(),
        41 => "grid_png".into(),
        42 => "grid_ccsds".into(),
        50 => "spectral_simple".into(),
        51 => "spectral_complex".into(),
        200 => "grid_run_length".into(),
        n => format!("template 5.{n}"),
    }
}

/// The metadata of `message`, or why it is left out.
pub fn describe(message: Message) -> Result<Described, String> {
    let at = format!("the message at byte {}", message.offset);
    // Templates gribberish has no decoder for at all: no client with its codec reads them.
    if !matches!(message.packing, 0 | 2 | 3 | 40 | 41 | 42) {
        return Err(format!(
            "{at} is packed as {} (data representation template 5.{}), which gribberish does not decode; it is left out",
            packing_name(message.packing),
            message.packing
        ));
    }
    let header = &message.header;
    // gribberish indexes into sections it trusts; a panic on a hostile header is that
    // message refused, not the process lost.
    let meta = catch_unwind(AssertUnwindSafe(|| {
        let grib =
            Grib::from_data(header, 0).ok_or_else(|| "gribberish does not read it as a GRIB message".to_string())?;
        let (ny, nx) = grib.grid_dimensions().map_err(|e| e.to_string())?;
        let points = (ny as u64).checked_mul(nx as u64).filter(|p| *p > 0 && *p <= MAX_POINTS);
        if points.is_none() {
            return Err(format!("its grid of {ny} x {nx} points is empty or larger than {MAX_POINTS} points"));
        }
        MessageMetadata::try_from(&grib).map_err(|e| e.to_string())
    }))
    .unwrap_or_else(|_| Err("gribberish failed on its header (a panic)".into()))
    .map_err(|e| format!("{at} cannot be read ({e}); it is left out"))?;
    let (ny, nx) = meta.grid_shape;
    if (ny as u64) * (nx as u64) != message.points {
        return Err(format!(
            "{at} has a grid of {ny} x {nx} but {} points, which zarrgate cannot lay out (a reduced or thinned grid); it \
             is left out",
            message.points
        ));
    }
    if meta.name.eq_ignore_ascii_case("missing") {
        return Err(format!("{at} is a parameter gribberish's tables do not know; it is left out"));
    }
    Ok(Described { message, meta })
}
