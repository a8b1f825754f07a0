//! TIFF, BigTIFF, GeoTIFF and Cloud-Optimized GeoTIFF: each image (IFD) one Zarr array, its
//! tiles or strips the chunks, GeoKeys and GDAL_NODATA its attributes.
//!
//! The layout follows virtual-tiff (arrays named by their IFD's index) and is made for xarray:
//! a file without overviews is one group of arrays (`0`, `1`...) with a `spatial_ref` grid
//! mapping and `x`, `y` coordinates beside them, which `xr.open_zarr` opens as one dataset. A file with reduced-resolution
//! images (NewSubfileType bit 0: a COG's overviews) becomes a multiscales group: level `0`
//! holds the full-resolution images, level `k` every image's `k`-th overview under its full
//! image's name, each level with its own `spatial_ref`. Levels are siblings because xarray's
//! DataTree requires a child group's dimensions to match its parent's: overviews below the
//! full image (or beside it in one group) could not be opened as a tree.
//!
//! The parser is its own small IFD reader rather than async-tiff's: async-tiff is async over
//! its own fetch trait (our parsers are sync over [`ByteRanges`]), and on hostile input it
//! panics (an unknown field type, an odd ASCII value, `HashMap::with_capacity` of a BigTIFF's
//! claimed entry count) and follows a looping IFD chain forever.

mod codecs;
mod coords;
mod geo;
#[cfg(test)]
mod hostile_tests;
mod ifd;
mod image;
mod tags;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::cf;
use super::{ByteRanges, FormatError, Limits, Node, Parsed, group_node as group, object};
use geo::Georef;
use image::Image;

/// One image to serve: where it goes and what it says.
struct Served {
    /// The array's name: its IFD's index, or its full-resolution image's for an overview.
    name: String,
    image: Image,
    georef: Georef,
    nodata: Option<f64>,
}

/// A full-resolution image and what its overviews inherit from it.
struct Main {
    name: String,
    size: Option<(u64, u64)>,
    georef: Georef,
    nodata: Option<f64>,
    overviews: usize,
}

/// Reads the structure of a TIFF file.
pub fn parse(file: &dyn ByteRanges, limits: &Limits) -> Result<Parsed, FormatError> {
    let header = ifd::Header::read(file)?;
    let ifds = ifd::read_chain(file, header, limits)?;
    let mut parsed = Parsed::default();
    let mut levels: BTreeMap<usize, Vec<Served>> = BTreeMap::new();
    let mut main: Option<Main> = None;
    let mut chunks = 0u64;
    for (index, ifd) in ifds.iter().enumerate() {
        limits.check_time()?;
        let what = format!("image {index} (the IFD at byte {})", ifd.offset);
        let subfile = ifd.one(file, tags::NEW_SUBFILE_TYPE)?.unwrap_or(0);
        if subfile & 4 != 0 {
            parsed.warnings.push(format!("{what} is a transparency mask (NewSubfileType 4) and is left out"));
            continue;
        }
        if ifd.has(tags::SUB_IFDS) {
            parsed.warnings.push(format!("{what}: its SubIFDs are not read"));
        }
        let outcome = image::read(file, ifd, header.big_endian, limits, limits.max_chunks.saturating_sub(chunks))?;
        let own_georef = geo::read(file, ifd)?;
        let own_nodata = geo::nodata(file, ifd)?;
        let overview = subfile & 1 != 0 && main.is_some();
        let served = match (&mut main, overview) {
            (Some(main), true) => {
                main.overviews += 1;
                outcome.map(|image| {
                    let georef = match main.size {
                        Some(full) if own_georef.is_empty() => main.georef.scaled(full, (image.width, image.height)),
                        _ => own_georef,
                    };
                    let level = main.overviews;
                    (level, Served { name: main.name.clone(), image, georef, nodata: own_nodata.or(main.nodata) })
                })
            }
            _ => {
                let size = outcome.as_ref().ok().map(|i| (i.width, i.height));
                main = Some(Main {
                    name: index.to_string(),
                    size,
                    georef: own_georef.clone(),
                    nodata: own_nodata,
                    overviews: 0,
                });
                outcome
                    .map(|image| (0, Served { name: index.to_string(), image, georef: own_georef, nodata: own_nodata }))
            }
        };
        match served {
            Ok((level, served)) => {
                chunks += served.image.chunks.len() as u64;
                levels.entry(level).or_default().push(served);
            }
            Err(why) => parsed.warnings.push(format!("{what} is left out: {why}")),
        }
    }
    if levels.is_empty() {
        let first: Vec<&str> = parsed.warnings.iter().take(3).map(String::as_str).collect();
        return Err(FormatError::Invalid(format!(
            "none of its {} images can be served: {}{}",
            ifds.len(),
            first.join("; "),
            if parsed.warnings.len() > 3 { "; ..." } else { "" }
        )));
    }
    let mut inline_budget = limits.max_inline_bytes;
    if levels.len() == 1 {
        let served = levels.into_values().next().unwrap_or_default();
        add_group(&mut parsed, "", Map::new(), served, &mut inline_budget);
    } else {
        let root = json!({"zarr_conventions": [multiscales_convention()], "multiscales": multiscales(&levels)});
        parsed.nodes.insert(String::new(), group(object(root)));
        for (level, served) in levels {
            add_group(&mut parsed, &level.to_string(), Map::new(), served, &mut inline_budget);
        }
    }
    Ok(parsed)
}

/// The declaration of zarr-conventions' multiscales (v1) in the root's `zarr_conventions`.
fn multiscales_convention() -> Value {
    json!({
        "schema_url": "https://raw.githubusercontent.com/zarr-conventions/multiscales/refs/tags/v1/schema.json",
        "spec_url": "https://github.com/zarr-conventions/multiscales/blob/v1/README.md",
        "uuid": "d35379db-88df-4056-af3a-620245f8e347",
        "name": "multiscales",
        "description": "Multiscale layout of zarr datasets",
    })
}

/// The root's `multiscales` attribute (zarr-conventions' multiscales, which GeoZarr uses):
/// each level's group, and how much coarser its pixels are than level 0's.
fn multiscales(levels: &BTreeMap<usize, Vec<Served>>) -> Value {
    let full = levels.get(&0).and_then(|l| l.first()).map(|s| (s.name.clone(), s.image.width, s.image.height));
    let layout: Vec<Value> = levels
        .iter()
        .map(|(level, served)| {
            let scale = served.iter().find_map(|s| {
                let (name, width, height) = full.as_ref()?;
                (s.name == *name).then(|| {
                    vec![
                        cf::float_json(*height as f64 / s.image.height as f64),
                        cf::float_json(*width as f64 / s.image.width as f64),
                    ]
                })
            });
            let mut entry = json!({"asset": level.to_string()});
            if *level == 0 {
                entry["transform"] = json!({"scale": [1.0, 1.0]});
            } else {
                entry["derived_from"] = json!("0");
                if let Some(scale) = scale {
                    entry["transform"] = json!({"scale": scale});
                }
            }
            entry
        })
        .collect();
    json!({"layout": layout})
}

/// A group at `path` holding `served`, with a `spatial_ref` grid mapping for each distinct
/// georeference among them and `x`, `y` coordinates when they share one.
fn add_group(parsed: &mut Parsed, path: &str, attributes: Map<String, Value>, served: Vec<Served>, inline: &mut u64) {
    let join = |name: &str| if path.is_empty() { name.to_owned() } else { format!("{path}/{name}") };
    parsed.nodes.insert(path.to_owned(), group(attributes));
    for (name, node) in coords::coordinates(&served, inline) {
        parsed.nodes.insert(join(name), node);
    }
    let mut mappings: Vec<(Option<u64>, Option<[f64; 6]>, String)> = Vec::new();
    for served in served {
        let Served { name, image, georef, nodata } = served;
        let mut attributes = georef.attributes.clone();
        if let Some(transform) = georef.transform {
            attributes
                .insert("transform".into(), json!(transform.iter().map(|v| cf::float_json(*v)).collect::<Vec<_>>()));
        }
        if georef.epsg.is_some() || georef.transform.is_some() {
            let key = (georef.epsg, georef.transform);
            let mapping = match mappings.iter().find(|(e, t, _)| (*e, *t) == key) {
                Some((_, _, mapping)) => mapping.clone(),
                None => {
                    let mapping =
                        if mappings.is_empty() { "spatial_ref".to_owned() } else { format!("spatial_ref_{name}") };
                    parsed.nodes.insert(join(&mapping), grid_mapping(&georef));
                    mappings.push((key.0, key.1, mapping.clone()));
                    mapping
                }
            };
            attributes.insert("grid_mapping".into(), json!(mapping));
            attributes.insert("coordinates".into(), json!(mapping));
        }
        let mut fill_value = cf::fill_value(0.0, image.data_type);
        if let Some(nodata) = nodata {
            match cf::fill_attribute(nodata, image.data_type).filter(|_| fits(nodata, image.data_type)) {
                Some(attribute) => {
                    attributes.insert("_FillValue".into(), attribute);
                    fill_value = cf::fill_value(nodata, image.data_type);
                }
                None => parsed.warnings.push(format!(
                    "array {:?}: its GDAL_NODATA {nodata} does not fit its {} values and is left out",
                    join(&name),
                    image.data_type
                )),
            }
        }
        let metadata = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": image.shape,
            "data_type": image.data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": image.chunk_shape}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill_value,
            "codecs": image.codecs,
            "attributes": attributes,
            "dimension_names": image.dimension_names,
        });
        parsed.nodes.insert(join(&name), Node { metadata: object(metadata).into(), chunks: image.chunks });
    }
}

/// Whether `value` is one of `data_type`'s values (GDAL writes nodata as text, which may not be).
fn fits(value: f64, data_type: &str) -> bool {
    let (low, high) = match data_type {
        "float16" | "float32" | "float64" => return true,
        "int8" => (i8::MIN as f64, i8::MAX as f64),
        "int16" => (i16::MIN as f64, i16::MAX as f64),
        "int32" => (i32::MIN as f64, i32::MAX as f64),
        "int64" => (i64::MIN as f64, i64::MAX as f64),
        "uint8" => (0.0, u8::MAX as f64),
        "uint16" => (0.0, u16::MAX as f64),
        "uint32" => (0.0, u32::MAX as f64),
        _ => (0.0, u64::MAX as f64),
    };
    value.fract() == 0.0 && (low..=high).contains(&value)
}

/// A `spatial_ref` variable as rioxarray writes and reads it: a 0-d integer whose attributes
/// carry the CRS (`spatial_ref`, an EPSG code rasterio's `CRS.from_user_input` reads; zarrgate
/// has no projection database to write WKT) and GDAL's `GeoTransform`.
fn grid_mapping(georef: &Georef) -> Node {
    let mut attributes = Map::new();
    if let Some(epsg) = georef.epsg {
        attributes.insert("spatial_ref".into(), json!(format!("EPSG:{epsg}")));
    }
    if let Some([a, b, c, d, e, f]) = georef.transform {
        attributes.insert("GeoTransform".into(), json!(format!("{c} {a} {b} {f} {d} {e}")));
    }
    let metadata = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": [],
        "data_type": "int64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": attributes,
        "dimension_names": [],
    });
    Node { metadata: object(metadata).into(), chunks: Vec::new() }
}
