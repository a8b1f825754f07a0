//! GeoTIFF: the GeoKeys (by the names the GeoTIFF specification and tifffile give them), the
//! model tags, the affine transform GDAL derives from them, the CRS's EPSG code, and
//! GDAL_NODATA.

use serde_json::{Map, Value, json};

use super::ifd::Ifd;
use super::tags;
use crate::formats::cf::float_json;
use crate::formats::{ByteRanges, FormatError};

/// What an image says of where it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Georef {
    /// The GeoKeys and model tags, as attributes.
    pub attributes: Map<String, Value>,
    /// `[a, b, c, d, e, f]` (rasterio's order): `x = a * column + b * row + c`,
    /// `y = d * column + e * row + f`, of a pixel's top left corner.
    pub transform: Option<[f64; 6]>,
    /// The EPSG code of the CRS, when it is one (not user-defined).
    pub epsg: Option<u64>,
}

impl Georef {
    /// Whether there is anything to say (an IFD with no GeoTIFF tags says nothing).
    pub fn is_empty(&self) -> bool {
        self.attributes.is_empty() && self.transform.is_none()
    }

    /// The georeference of an overview of `width` x `height` of an image of `full_width` x
    /// `full_height` this one describes: the same CRS, pixels larger by the ratio.
    pub fn scaled(&self, full: (u64, u64), overview: (u64, u64)) -> Self {
        let (sx, sy) = (full.0 as f64 / overview.0 as f64, full.1 as f64 / overview.1 as f64);
        let transform = self.transform.map(|[a, b, c, d, e, f]| [a * sx, b * sy, c, d * sx, e * sy, f]);
        Self { attributes: self.attributes.clone(), transform, epsg: self.epsg }
    }
}

/// The GeoKey names of the GeoTIFF 1.0 specification, as tifffile spells them.
const KEY_NAMES: &[(u64, &str)] = &[
    (1024, "GTModelTypeGeoKey"),
    (1025, "GTRasterTypeGeoKey"),
    (1026, "GTCitationGeoKey"),
    (2048, "GeographicTypeGeoKey"),
    (2049, "GeogCitationGeoKey"),
    (2050, "GeogGeodeticDatumGeoKey"),
    (2051, "GeogPrimeMeridianGeoKey"),
    (2052, "GeogLinearUnitsGeoKey"),
    (2053, "GeogLinearUnitSizeGeoKey"),
    (2054, "GeogAngularUnitsGeoKey"),
    (2055, "GeogAngularUnitSizeGeoKey"),
    (2056, "GeogEllipsoidGeoKey"),
    (2057, "GeogSemiMajorAxisGeoKey"),
    (2058, "GeogSemiMinorAxisGeoKey"),
    (2059, "GeogInvFlatteningGeoKey"),
    (2060, "GeogAzimuthUnitsGeoKey"),
    (2061, "GeogPrimeMeridianLongGeoKey"),
    (2062, "GeogTOWGS84GeoKey"),
    (3072, "ProjectedCSTypeGeoKey"),
    (3073, "PCSCitationGeoKey"),
    (3074, "ProjectionGeoKey"),
    (3075, "ProjCoordTransGeoKey"),
    (3076, "ProjLinearUnitsGeoKey"),
    (3077, "ProjLinearUnitSizeGeoKey"),
    (3078, "ProjStdParallel1GeoKey"),
    (3079, "ProjStdParallel2GeoKey"),
    (3080, "ProjNatOriginLongGeoKey"),
    (3081, "ProjNatOriginLatGeoKey"),
    (3082, "ProjFalseEastingGeoKey"),
    (3083, "ProjFalseNorthingGeoKey"),
    (3084, "ProjFalseOriginLongGeoKey"),
    (3085, "ProjFalseOriginLatGeoKey"),
    (3086, "ProjFalseOriginEastingGeoKey"),
    (3087, "ProjFalseOriginNorthingGeoKey"),
    (3088, "ProjCenterLongGeoKey"),
    (3089, "ProjCenterLatGeoKey"),
    (3090, "ProjCenterEastingGeoKey"),
    (3091, "ProjCenterNorthingGeoKey"),
    (3092, "ProjScaleAtNatOriginGeoKey"),
    (3093, "ProjScaleAtCenterGeoKey"),
    (3094, "ProjAzimuthAngleGeoKey"),
    (3095, "ProjStraightVertPoleLongGeoKey"),
    (3096, "ProjRectifiedGridAngleGeoKey"),
    (4096, "VerticalCSTypeGeoKey"),
    (4097, "VerticalCitationGeoKey"),
    (4098, "VerticalDatumGeoKey"),
    (4099, "VerticalUnitsGeoKey"),
];

/// The most GeoKeys an image may have (each one attribute).
const MAX_KEYS: u64 = 1024;

/// GeoTIFF's "user-defined" code: no EPSG code names the CRS.
const USER_DEFINED: u64 = 32767;

/// The georeference of `ifd`.
pub fn read(file: &dyn ByteRanges, ifd: &Ifd) -> Result<Georef, FormatError> {
    let mut georef = Georef::default();
    let keys = geo_keys(file, ifd)?;
    let key = |id: u64| keys.iter().find(|(k, _)| *k == id).and_then(|(_, v)| v.as_u64());
    for (id, value) in &keys {
        let name =
            KEY_NAMES.iter().find(|(k, _)| k == id).map_or_else(|| format!("GeoKey{id}"), |(_, n)| n.to_string());
        georef.attributes.insert(name, value.clone());
    }
    let projected = key(3072).filter(|c| (1..USER_DEFINED).contains(c));
    let geographic = key(2048).filter(|c| (1..USER_DEFINED).contains(c));
    georef.epsg = match key(1024) {
        Some(2) => geographic,
        Some(1) => projected,
        _ => projected.or(geographic),
    };
    let scale = ifd.numbers(file, tags::MODEL_PIXEL_SCALE)?;
    let tiepoint = ifd.numbers(file, tags::MODEL_TIEPOINT)?;
    let matrix = ifd.numbers(file, tags::MODEL_TRANSFORMATION)?;
    for (name, values) in [("ModelPixelScale", &scale), ("ModelTiepoint", &tiepoint), ("ModelTransformation", &matrix)]
    {
        if let Some(values) = values {
            georef.attributes.insert(name.into(), Value::Array(values.iter().map(|v| float_json(*v)).collect()));
        }
    }
    georef.transform = match (matrix.as_deref(), scale.as_deref(), tiepoint.as_deref()) {
        (Some(m), _, _) if m.len() >= 16 => Some([m[0], m[1], m[3], m[4], m[5], m[7]]),
        (_, Some([sx, sy, ..]), Some([i, j, _, x, y, ..])) => Some([*sx, 0.0, x - i * sx, 0.0, -sy, y + j * sy]),
        _ => None,
    };
    // PixelIsPoint: the model coordinates are of pixels' centres; GDAL moves them to corners.
    if key(1025) == Some(2) {
        georef.transform =
            georef.transform.map(|[a, b, c, d, e, f]| [a, b, c - 0.5 * a - 0.5 * b, d, e, f - 0.5 * d - 0.5 * e]);
    }
    georef.transform = georef.transform.filter(|t| t.iter().all(|v| v.is_finite()));
    Ok(georef)
}

/// The GeoKeyDirectory's keys and values, in its order: a short as a number, doubles as a
/// number or a list, text without GeoTIFF's `|` terminator.
fn geo_keys(file: &dyn ByteRanges, ifd: &Ifd) -> Result<Vec<(u64, Value)>, FormatError> {
    // GeoTIFF defines about 50 keys: a directory of more than MAX_KEYS is hostile.
    let max_values = 4 + 4 * MAX_KEYS;
    let Some(directory) = ifd.unsigned(file, tags::GEO_KEY_DIRECTORY, max_values)? else { return Ok(Vec::new()) };
    let doubles = ifd.numbers(file, tags::GEO_DOUBLE_PARAMS)?.unwrap_or_default();
    let text = ifd.text(file, tags::GEO_ASCII_PARAMS)?.unwrap_or_default();
    let declared = directory.get(3).copied().unwrap_or(0) as usize;
    let mut keys = Vec::new();
    for entry in directory.get(4..).unwrap_or_default().chunks_exact(4).take(declared) {
        let &[id, location, count, value] = entry else { continue };
        let (start, count) = (value as usize, count as usize);
        let found = match location {
            0 => Some(json!(value)),
            tags::GEO_DOUBLE_PARAMS_U64 => match doubles.get(start..start.saturating_add(count)) {
                Some([one]) => Some(float_json(*one)),
                Some(many) => Some(Value::Array(many.iter().map(|v| float_json(*v)).collect())),
                None => None,
            },
            tags::GEO_ASCII_PARAMS_U64 => text
                .get(start..start.saturating_add(count).min(text.len()))
                .map(|s| json!(s.trim_end_matches(['|', '\0']))),
            _ => None,
        };
        // A key pointing outside its parameters is dropped, as GDAL drops it.
        if let Some(found) = found {
            keys.push((id, found));
        }
    }
    Ok(keys)
}

/// GDAL_NODATA as a number: its text as GDAL writes it (`-9999`, `nan`, `inf`, MSVC's `1.#INF`).
pub fn nodata(file: &dyn ByteRanges, ifd: &Ifd) -> Result<Option<f64>, FormatError> {
    let Some(text) = ifd.text(file, tags::GDAL_NODATA)? else { return Ok(None) };
    let text = text.trim();
    let value = match text {
        "1.#INF" => Some(f64::INFINITY),
        "-1.#INF" => Some(f64::NEG_INFINITY),
        "1.#QNAN" | "-1.#QNAN" | "1.#IND" | "-1.#IND" => Some(f64::NAN),
        _ => text.parse::<f64>().ok(),
    };
    Ok(value)
}
