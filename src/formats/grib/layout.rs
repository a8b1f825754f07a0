//! Messages laid out as VirtualiZarr's `GribberishParser` lays them out (gribberish's stable
//! layout), so that a file gives the same hierarchy here as there:
//!
//! - a group per level type (`isobar`, `hag`, `sfc`... gribberish's coordinate names), and in it
//!   a group per kind of product (`instant`, `avg6h`, `acc1h`, `ens`...);
//! - in each, one array per variable (gribberish's short name: `tmp`, `ugrd`...) of shape
//!   (time, [level], [number], [percentile], [threshold], y, x), a dimension other than time and
//!   number only where the variable has more than one value along it;
//! - one message one chunk, decoded by the `gribberish` codec; a message the file lacks reads
//!   as the fill value, NaN, as do the points a message's bitmap masks;
//! - coordinates held inline: times (CF seconds since 1970), levels, members, 1-d latitude and
//!   longitude for a regular grid (for a projected one, 1-d `x` and `y`, and 2-d latitude and
//!   longitude decoded from the first message), and `spatial_ref` with the CF grid mapping.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use gribberish::message_metadata::MessageMetadata;
use gribberish::templates::product::tables::ProbabilityType;
use serde_json::{Map, Value, json};

use super::meta::{DECODED, Described, packing_name};
use crate::formats::{Chunk, FormatError, Limits, Node, Parsed, cf, group_node as group, object};

/// The kind of product a message is: its statistical process (with its period), derived
/// ensemble product, probability, percentile, anomaly and wave period band; `instant` for a
/// plain field.
fn kind(meta: &MessageMetadata) -> String {
    let mut tokens = Vec::new();
    if let Some(stat) = &meta.statistical_process {
        let mut token = stat.abbv();
        if let Some(end) = meta.forecast_end_date {
            let hours = end.signed_duration_since(meta.forecast_date).num_hours();
            if hours > 0 {
                token = format!("{token}{hours}h");
            }
        }
        tokens.push(token);
    }
    if let Some(derived) = &meta.derived_forecast_type {
        tokens.push(derived.abbv());
    }
    if let Some(probability) = &meta.probability_type {
        let mut token = probability.abbv();
        if matches!(probability, ProbabilityType::BetweenLimits | ProbabilityType::BetweenLimitsInclusive)
            && let (Some(lower), Some(upper)) = (meta.probability_lower_limit, meta.probability_upper_limit)
        {
            token = format!("{token}_{lower:.0}_{upper:.0}");
        }
        tokens.push(token);
    } else if meta.percentile_value.is_some() {
        tokens.push("pctl".into());
    }
    if meta.is_anomaly {
        tokens.push("anom".into());
    }
    if let Some((lower, upper)) = meta.wave_period_range {
        let show = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.0}"));
        tokens.push(format!("per{}-{}s", show(lower), show(upper)));
    }
    tokens.retain(|t| !t.is_empty());
    if tokens.is_empty() { "instant".into() } else { tokens.join("_") }
}

/// The generating process and whether the message is an ensemble member: what tells apart two
/// messages of one variable, level type and kind that would otherwise collide.
fn process(meta: &MessageMetadata) -> String {
    let member = if meta.perturbation_number.is_some() { "ens" } else { "det" };
    format!("{}_{member}", meta.generating_process.abbv())
}

/// The limit a probability varies along (between-limits products have none: their limits are
/// in their kind).
fn threshold(meta: &MessageMetadata) -> Option<f64> {
    match &meta.probability_type {
        None | Some(ProbabilityType::BetweenLimits | ProbabilityType::BetweenLimitsInclusive) => None,
        Some(ProbabilityType::AboveUpperLimit | ProbabilityType::BelowUpperLimit) => {
            meta.probability_upper_limit.or(meta.probability_lower_limit)
        }
        Some(_) => meta.probability_lower_limit.or(meta.probability_upper_limit),
    }
}

fn key5(value: f64) -> String {
    format!("{value:.5}")
}

/// The time a message is at: the end of its period, else its forecast time.
fn valid(meta: &MessageMetadata) -> DateTime<Utc> {
    meta.forecast_end_date.unwrap_or(meta.forecast_date)
}

/// Lays out `described` messages of a file.
pub fn build(described: Vec<Described>, limits: &Limits, warnings: &mut Vec<String>) -> Result<Parsed, FormatError> {
    // One message per key (gribberish's identity of a field), the first kept.
    let mut seen = HashMap::new();
    let mut messages = Vec::with_capacity(described.len());
    for d in described {
        if let Some(first) = seen.get(&d.meta.key) {
            warnings.push(format!(
                "the message at byte {} repeats the field of the message at byte {first} ({}); it is left out",
                d.message.offset, d.meta.key
            ));
            continue;
        }
        seen.insert(d.meta.key.clone(), d.message.offset);
        messages.push(d);
    }
    // Group path (level type, kind) -> variable -> its messages.
    let mut processes: HashMap<(String, String, String), BTreeSet<String>> = HashMap::new();
    for d in &messages {
        let level = d.meta.first_fixed_surface_type.coordinate_name().to_string();
        processes.entry((d.meta.var.to_lowercase(), level, kind(&d.meta))).or_default().insert(process(&d.meta));
    }
    let mut groups: BTreeMap<Vec<String>, BTreeMap<String, Vec<&Described>>> = BTreeMap::new();
    for d in &messages {
        let var = d.meta.var.to_lowercase();
        let level = d.meta.first_fixed_surface_type.coordinate_name().to_string();
        let kind = kind(&d.meta);
        let mut path = Vec::new();
        if !level.is_empty() {
            path.push(level.clone());
        }
        let conflict = processes.get(&(var.clone(), level, kind.clone())).is_some_and(|p| p.len() > 1);
        path.push(if conflict { format!("{kind}_{}", process(&d.meta)) } else { kind });
        groups.entry(path).or_default().entry(var).or_default().push(d);
    }
    let mut parsed = Parsed::default();
    parsed.nodes.insert(String::new(), group(Map::new()));
    let mut inline_budget = limits.max_inline_bytes;
    for (path, variables) in groups {
        limits.check_time()?;
        if parsed.nodes.len() + variables.len() + 10 > limits.max_nodes {
            return Err(FormatError::TooLarge(format!(
                "it makes more than {} groups and arrays (limits.max_nodes)",
                limits.max_nodes
            )));
        }
        let prefix = path.join("/");
        if path.len() == 2 {
            parsed.nodes.entry(path[0].clone()).or_insert_with(|| group(Map::new()));
        }
        let nodes = build_group(&variables, &mut inline_budget, warnings)?;
        if nodes.iter().all(|(_, _, coordinate)| *coordinate) {
            continue;
        }
        let coordinates: Vec<&str> = nodes.iter().filter(|(_, _, c)| *c).map(|(name, _, _)| name.as_str()).collect();
        let mut attributes = Map::new();
        attributes.insert("coordinates".into(), json!(coordinates.join(" ")));
        parsed.nodes.insert(prefix.clone(), group(attributes));
        for (name, node, _) in nodes {
            parsed.nodes.insert(format!("{prefix}/{name}"), node);
        }
    }
    if parsed.nodes.len() == 1 {
        return Err(FormatError::Invalid("none of its GRIB2 messages can be virtualized (see the warnings)".into()));
    }
    Ok(parsed)
}

/// An array's metadata: one chunk of `chunk_shape`, codecs `codecs`.
fn array(
    shape: &[u64],
    chunk_shape: &[u64],
    data_type: &str,
    fill: Value,
    codecs: Value,
    attributes: Map<String, Value>,
    dimensions: &[String],
) -> Map<String, Value> {
    object(json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": codecs,
        "attributes": attributes,
        "dimension_names": dimensions,
    }))
}

/// A coordinate held inline: `values` (little-endian bytes of `data_type`) of one chunk.
fn inline(
    values: Vec<u8>,
    shape: &[u64],
    data_type: &str,
    attributes: Value,
    dimensions: &[String],
    budget: &mut u64,
) -> Result<Node, FormatError> {
    let bytes = values.len() as u64;
    if bytes > *budget {
        return Err(FormatError::TooLarge(format!(
            "its coordinates take more than the {} bytes allowed inline (files.max_inline_bytes)",
            bytes
        )));
    }
    *budget -= bytes;
    let fill = if data_type.starts_with("float") { json!("NaN") } else { json!(0) };
    let chunk_shape: Vec<u64> = shape.iter().map(|d| (*d).max(1)).collect();
    let metadata = array(
        shape,
        &chunk_shape,
        data_type,
        fill,
        json!([{"name": "bytes", "configuration": {"endian": "little"}}]),
        object(attributes),
        dimensions,
    );
    Ok(Node { metadata: metadata.into(), chunks: vec![(vec![0; shape.len()], Chunk::Inline(values))] })
}

fn f64s(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i64s(values: impl IntoIterator<Item = i64>) -> Vec<u8> {
    values.into_iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Levels some variables share: their values, the variables, and whether they are the second
/// surface's.
type LevelSet = (Vec<f64>, Vec<String>, bool);

/// Where a message lies along a dimension: the key of its value there.
type Place = Box<dyn Fn(&MessageMetadata) -> Option<String>>;

/// A dimension other than the grid's: its name, its values, and which value each variable's
/// message is at.
struct Axis {
    name: String,
    values: Vec<f64>,
    integer: bool,
    attributes: Value,
}

/// Names dimensions of one family (`time`, `time_1`...) by the sets of values variables have,
/// in the order of those sets' keys, as gribberish does; returns each variable's dimension.
fn name_sets(
    family: &str,
    sets: BTreeMap<String, (Vec<f64>, Vec<String>)>,
    first_plain: bool,
) -> Vec<(String, Vec<f64>, Vec<String>)> {
    let count = sets.len();
    sets.into_values()
        .enumerate()
        .map(|(i, (values, vars))| {
            let name = if count == 1 || (first_plain && i == 0) { family.to_string() } else { format!("{family}_{i}") };
            (name, values, vars)
        })
        .collect()
}

/// The arrays of one group: `(name, node, is coordinate)`.
fn build_group(
    variables: &BTreeMap<String, Vec<&Described>>,
    budget: &mut u64,
    warnings: &mut Vec<String>,
) -> Result<Vec<(String, Node, bool)>, FormatError> {
    let Some(first) = variables.values().next().and_then(|m| m.first()) else { return Ok(Vec::new()) };
    let grid = first.meta.grid_shape;
    // Variables on another grid than the group's first cannot share its coordinates.
    let mut kept: BTreeMap<&str, Vec<&Described>> = BTreeMap::new();
    for (var, messages) in variables {
        if let Some(other) = messages.iter().find(|d| d.meta.grid_shape != grid) {
            warnings.push(format!(
                "variable {var}: the message at byte {} is on a grid of {:?}, not the {:?} of its group; the variable is \
                 left out",
                other.message.offset, other.meta.grid_shape, grid
            ));
            continue;
        }
        kept.insert(var, messages.clone());
    }
    // Each variable's dimensions, in order, and for each the value of every message.
    let mut dims: BTreeMap<String, Vec<(usize, Place)>> = BTreeMap::new();
    let mut axes: Vec<Axis> = Vec::new();
    // Times.
    let mut sets: BTreeMap<String, (Vec<f64>, Vec<String>)> = BTreeMap::new();
    for (var, messages) in &kept {
        let times: BTreeSet<i64> = messages.iter().map(|d| valid(&d.meta).timestamp()).collect();
        let key = times.iter().map(i64::to_string).collect::<Vec<_>>().join("_");
        let entry = sets.entry(key).or_insert_with(|| (times.iter().map(|t| *t as f64).collect(), Vec::new()));
        entry.1.push(var.to_string());
    }
    for (name, values, vars) in name_sets("time", sets, true) {
        let axis = axes.len();
        axes.push(Axis {
            name,
            values,
            integer: true,
            attributes: json!({"standard_name": "time", "long_name": "time", "unit": "seconds since 1970-01-01 00:00:00",
                "axis": "T", "units": "seconds since 1970-01-01 00:00:00", "calendar": "proleptic_gregorian"}),
        });
        for var in vars {
            let at: Place = Box::new(|m| Some(valid(m).timestamp().to_string()));
            dims.entry(var).or_default().push((axis, at));
        }
    }
    // Levels: the first surface's values, or the second's where only it varies.
    // Level type -> set of levels -> (levels, variables on them, whether the second surface's).
    let mut by_name: BTreeMap<String, BTreeMap<String, LevelSet>> = BTreeMap::new();
    let mut level_attributes: HashMap<String, Value> = HashMap::new();
    for (var, messages) in &kept {
        let first: BTreeSet<String> =
            messages.iter().filter_map(|d| d.meta.first_fixed_surface_value).map(key5).collect();
        let second: BTreeSet<String> =
            messages.iter().filter_map(|d| d.meta.second_fixed_surface_value).map(key5).collect();
        let (values, use_second) = if first.len() < 2 && second.len() >= 2 { (second, true) } else { (first, false) };
        if values.len() < 2 {
            continue;
        }
        let surface = &messages[0].meta.first_fixed_surface_type;
        let name = surface.coordinate_name().to_string();
        let mut numbers: Vec<f64> = values.iter().filter_map(|v| v.parse().ok()).collect();
        numbers.sort_by(f64::total_cmp);
        let key = format!("{name}_{}", numbers.iter().map(|v| key5(*v)).collect::<Vec<_>>().join("_"));
        by_name
            .entry(name.clone())
            .or_default()
            .entry(key)
            .or_insert_with(|| (numbers, Vec::new(), use_second))
            .1
            .push(var.to_string());
        let mut attributes = json!({"standard_name": surface.to_string(), "long_name": surface.to_string()});
        if surface.is_vertical_level() {
            attributes["axis"] = json!("Z");
        }
        level_attributes.entry(name).or_insert(attributes);
    }
    for (name, sets) in by_name {
        let count = sets.len();
        for (i, (_, (values, vars, use_second))) in sets.into_iter().enumerate() {
            let axis = axes.len();
            let dim = if count == 1 { name.clone() } else { format!("{name}_{i}") };
            axes.push(Axis { name: dim, values, integer: false, attributes: level_attributes[&name].clone() });
            for var in vars {
                let at: Place = if use_second {
                    Box::new(|m| m.second_fixed_surface_value.map(key5))
                } else {
                    Box::new(|m| m.first_fixed_surface_value.map(key5))
                };
                dims.entry(var).or_default().push((axis, at));
            }
        }
    }
    // Ensemble members (any), percentiles and thresholds (more than one).
    type Of = fn(&MessageMetadata) -> Option<f64>;
    let families: [(&str, Of, usize, bool, Value); 3] = [
        (
            "number",
            |m| m.perturbation_number.map(f64::from),
            1,
            true,
            json!({"standard_name": "realization", "long_name": "ensemble member", "axis": "E"}),
        ),
        (
            "percentile",
            |m| m.percentile_value.map(f64::from),
            2,
            true,
            json!({"standard_name": "percentile", "long_name": "percentile", "unit": "%"}),
        ),
        (
            "threshold",
            threshold,
            2,
            false,
            json!({"standard_name": "probability_threshold", "long_name": "probability threshold"}),
        ),
    ];
    for (family, of, least, integer, attributes) in families {
        let mut sets: BTreeMap<String, (Vec<f64>, Vec<String>)> = BTreeMap::new();
        for (var, messages) in &kept {
            let values: BTreeSet<String> = messages.iter().filter_map(|d| of(&d.meta)).map(key5).collect();
            if values.len() < least {
                continue;
            }
            let mut numbers: Vec<f64> = values.iter().filter_map(|v| v.parse().ok()).collect();
            numbers.sort_by(f64::total_cmp);
            let key =
                numbers.iter().map(|v| if integer { format!("{v}") } else { key5(*v) }).collect::<Vec<_>>().join("_");
            sets.entry(key).or_insert_with(|| (numbers, Vec::new())).1.push(var.to_string());
        }
        for (name, values, vars) in name_sets(family, sets, true) {
            let axis = axes.len();
            axes.push(Axis { name, values, integer, attributes: attributes.clone() });
            for var in vars {
                let at: Place = Box::new(move |m| of(m).map(key5));
                dims.entry(var).or_default().push((axis, at));
            }
        }
    }
    let mut out = Vec::new();
    for axis in &axes {
        let shape = [axis.values.len() as u64];
        let dimensions = [axis.name.clone()];
        let node = if axis.integer {
            inline(
                i64s(axis.values.iter().map(|v| *v as i64)),
                &shape,
                "int64",
                axis.attributes.clone(),
                &dimensions,
                budget,
            )?
        } else {
            inline(f64s(&axis.values), &shape, "float64", axis.attributes.clone(), &dimensions, budget)?
        };
        out.push((axis.name.clone(), node, true));
    }
    // The grid's coordinates.
    let (ny, nx) = (grid.0 as u64, grid.1 as u64);
    let meta = &first.meta;
    let regular = meta.is_regular_grid;
    let spatial: [String; 2] = if regular { ["latitude".into(), "longitude".into()] } else { ["y".into(), "x".into()] };
    if (ny + nx) * 8 > *budget {
        return Err(FormatError::TooLarge(format!(
            "its grid's coordinates ({ny} x {nx}) take more than the bytes left inline (files.max_inline_bytes)"
        )));
    }
    let latitude = json!({"standard_name": "latitude", "long_name": "latitude", "unit": "degrees_north"});
    let longitude = json!({"standard_name": "longitude", "long_name": "longitude", "unit": "degrees_east"});
    if regular {
        let (lat, lon) = meta.latlng();
        let mut lat_attributes = latitude;
        lat_attributes["axis"] = json!("Y");
        let mut lon_attributes = longitude;
        lon_attributes["axis"] = json!("X");
        out.push((
            "latitude".into(),
            inline(f64s(&lat), &[ny], "float64", lat_attributes, &spatial[..1], budget)?,
            true,
        ));
        out.push((
            "longitude".into(),
            inline(f64s(&lon), &[nx], "float64", lon_attributes, &spatial[1..], budget)?,
            true,
        ));
    } else {
        let projected = |name: &str| {
            json!({"axis": name.to_uppercase(), "standard_name": format!("projection_{name}_coordinate"),
                "long_name": format!("{name} coordinate of projection"), "unit": "m"})
        };
        let (x, y) = meta.xy();
        out.push(("y".into(), inline(f64s(&y), &[ny], "float64", projected("y"), &spatial[..1], budget)?, true));
        out.push(("x".into(), inline(f64s(&x), &[nx], "float64", projected("x"), &spatial[1..], budget)?, true));
        // 2-d latitude and longitude: the gribberish codec computes them from a message.
        for (name, attributes) in [("latitude", latitude), ("longitude", longitude)] {
            let metadata = array(
                &[ny, nx],
                &[ny, nx],
                "float64",
                json!("NaN"),
                json!([{"name": "gribberish", "configuration": {"var": name}}]),
                object(attributes),
                &spatial,
            );
            let chunk = Chunk::Range { offset: first.message.offset, length: first.message.length };
            out.push((name.into(), Node { metadata: metadata.into(), chunks: vec![(vec![0, 0], chunk)] }, true));
        }
    }
    let mapping = grid_mapping(&meta.projector.proj_name(), &meta.projector.proj_params());
    if let Some(mut attributes) = mapping.clone() {
        attributes.insert("proj4".into(), json!(meta.proj));
        out.push((
            "spatial_ref".into(),
            inline(0i32.to_le_bytes().to_vec(), &[], "int32", Value::Object(attributes), &[], budget)?,
            true,
        ));
    }
    // The variables.
    for (var, messages) in &kept {
        let var_dims = dims.remove(*var).unwrap_or_default();
        let mut shape: Vec<u64> = var_dims.iter().map(|(axis, _)| axes[*axis].values.len() as u64).collect();
        let mut names: Vec<String> = var_dims.iter().map(|(axis, _)| axes[*axis].name.clone()).collect();
        let mut chunk_shape = vec![1; shape.len()];
        shape.extend([ny, nx]);
        chunk_shape.extend([ny, nx]);
        names.extend(spatial.iter().cloned());
        let index: Vec<HashMap<String, u64>> = var_dims
            .iter()
            .map(|(axis, _)| {
                let axis = &axes[*axis];
                let key = |v: &f64| {
                    if axis.integer && axis.name.starts_with("time") { (*v as i64).to_string() } else { key5(*v) }
                };
                axis.values.iter().enumerate().map(|(i, v)| (key(v), i as u64)).collect()
            })
            .collect();
        let mut chunks: BTreeMap<Vec<u64>, Chunk> = BTreeMap::new();
        let mut packings = BTreeSet::new();
        for d in messages {
            let mut at = Vec::with_capacity(shape.len());
            for ((_, of), index) in var_dims.iter().zip(&index) {
                match of(&d.meta).and_then(|v| index.get(&v)) {
                    Some(i) => at.push(*i),
                    None => break,
                }
            }
            if at.len() != var_dims.len() {
                warnings.push(format!(
                    "variable {var}: the message at byte {} has no place in its array; it is left out",
                    d.message.offset
                ));
                continue;
            }
            at.extend([0, 0]);
            if chunks.contains_key(&at) {
                warnings.push(format!(
                    "variable {var}: the message at byte {} is at the place of another one; it is left out",
                    d.message.offset
                ));
                continue;
            }
            packings.insert(d.message.packing);
            chunks.insert(at, Chunk::Range { offset: d.message.offset, length: d.message.length });
        }
        let m = &messages[0].meta;
        let mut attributes = Map::new();
        for (key, value) in [
            ("standard_name", json!(m.name)),
            ("long_name", json!(m.name)),
            ("discipline", json!(m.discipline_value)),
            ("parameterCategory", json!(m.category_value)),
            ("parameterNumber", json!(m.parameter_value)),
            ("unit", json!(m.units)),
            ("coordinates", json!("latitude longitude")),
            ("reference_date", json!(m.reference_date.to_rfc3339())),
            ("forecast_date", json!(m.forecast_date.to_rfc3339())),
            ("forecast_end_date", json!(m.forecast_end_date.map_or(String::new(), |d| d.to_rfc3339()))),
            ("fixed_surface_type", json!(m.first_fixed_surface_type.to_string())),
            ("fixed_surface_value", json!(m.first_fixed_surface_value.map_or(String::new(), |v| v.to_string()))),
            ("first_fixed_surface_type_coordinate", json!(m.first_fixed_surface_type.coordinate_name())),
            ("generating_process", json!(m.generating_process.to_string())),
            ("statistical_process", json!(m.statistical_process.as_ref().map_or(String::new(), |s| s.to_string()))),
            ("probability_type", json!(m.probability_type.as_ref().map_or(String::new(), |p| p.to_string()))),
            ("probability_limit", json!(threshold(m).map_or(String::new(), |t| t.to_string()))),
            ("crs", json!(m.proj)),
        ] {
            attributes.insert(key.into(), value);
        }
        let mut params = Map::new();
        params.insert("proj".into(), json!(m.projector.proj_name()));
        let mut sorted: Vec<_> = m.projector.proj_params().into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (k, v) in sorted {
            params.insert(k, cf::float_json(v));
        }
        attributes.insert("proj_params".into(), Value::Object(params));
        if mapping.is_some() {
            attributes.insert("grid_mapping".into(), json!("spatial_ref"));
        }
        // eccodes' name of the packing, when every message shares one: with `?codecs=portable`
        // an array whose packing zarrgate does not decode is served as it is.
        if packings.len() == 1 {
            let packing = *packings.first().unwrap_or(&0);
            attributes.insert("GRIB_packingType".into(), json!(packing_name(packing)));
        }
        if let Some(undecoded) = packings.iter().find(|p| !DECODED.contains(p)) {
            attributes.insert("GRIB_packingType".into(), json!(packing_name(*undecoded)));
        }
        let metadata = array(
            &shape,
            &chunk_shape,
            "float64",
            json!("NaN"),
            json!([{"name": "gribberish", "configuration": {"var": var}}]),
            attributes,
            &names,
        );
        out.push((var.to_string(), Node { metadata: metadata.into(), chunks: chunks.into_iter().collect() }, false));
    }
    Ok(out)
}

/// The CF grid mapping of a projection (so that pyproj, rioxarray and cartopy find the CRS), as
/// gribberish writes it; none for a projection CF has no name for.
fn grid_mapping(projection: &str, params: &HashMap<String, f64>) -> Option<Map<String, Value>> {
    let mut attributes = Map::new();
    let mut set = |key: &str, value: Value| {
        attributes.insert(key.into(), value);
    };
    let get = |key: &str| params.get(key).copied();
    match projection {
        "latlon" => set("grid_mapping_name", json!("latitude_longitude")),
        "lcc" => {
            set("grid_mapping_name", json!("lambert_conformal_conic"));
            if let (Some(a), Some(b)) = (get("lat_1"), get("lat_2")) {
                set("standard_parallel", json!([a, b]));
            }
            if let Some(v) = get("lon_0") {
                set("longitude_of_central_meridian", json!(v));
            }
            if let Some(v) = get("lat_0") {
                set("latitude_of_projection_origin", json!(v));
            }
            set("false_easting", json!(0.0));
            set("false_northing", json!(0.0));
        }
        "stere" => {
            set("grid_mapping_name", json!("polar_stereographic"));
            if let Some(v) = get("lon_0") {
                set("straight_vertical_longitude_from_pole", json!(v));
            }
            if let Some(v) = get("lat_ts") {
                set("standard_parallel", json!(v));
            }
            if let Some(v) = get("lat_0") {
                set("latitude_of_projection_origin", json!(v));
            }
            set("false_easting", json!(0.0));
            set("false_northing", json!(0.0));
        }
        "merc" => {
            set("grid_mapping_name", json!("mercator"));
            if let Some(v) = get("lat_ts") {
                set("standard_parallel", json!(v));
            }
            set("longitude_of_projection_origin", json!(0.0));
            set("false_easting", json!(0.0));
            set("false_northing", json!(0.0));
        }
        _ => return None,
    }
    match (get("a"), get("b")) {
        (Some(a), Some(b)) if (a - b).abs() < 1e-3 => set("earth_radius", json!(a)),
        (Some(a), Some(b)) => {
            set("semi_major_axis", json!(a));
            set("semi_minor_axis", json!(b));
        }
        _ => {}
    }
    Some(attributes)
}
