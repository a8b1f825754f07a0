//! Where a netCDF3 header puts each variable's bytes, as Zarr arrays: a fixed-size variable is
//! one chunk (the whole array, its exact size); a record variable has one chunk a record,
//! `[1, rest...]`, record `i` at `begin + i * recsize`, as kerchunk's `NetCDF3ToZarr` lays them.

use serde_json::{Map, Value, json};

use super::header::{Attribute, Header, Variable};
use super::types::{NcType, Number};
use crate::formats::{Chunk, FormatError, Limits, Node, Parsed};

/// How one variable sits in the file.
struct Extent {
    /// It has the record dimension (first).
    record: bool,
    /// Its bytes: a record's for a record variable, else all of them (no padding).
    bytes: u64,
}

/// The hierarchy of a file of `file_len` bytes whose header is `header`.
pub fn build(header: &Header, file_len: u64, limits: &Limits) -> Result<Parsed, FormatError> {
    let record_dimension = record_dimension(header)?;
    let extents =
        header.variables.iter().map(|v| extent(v, header, record_dimension)).collect::<Result<Vec<_>, _>>()?;
    let records: Vec<&Extent> = extents.iter().filter(|e| e.record).collect();
    // One record variable alone is not padded (netCDF-c's NC_computeshapes).
    let recsize = match records.as_slice() {
        [only] => Some(only.bytes),
        _ => records.iter().try_fold(0u64, |sum, e| sum.checked_add(e.bytes.checked_add(3)? & !3)),
    }
    .ok_or_else(|| FormatError::Invalid("its record size overflows".into()))?;
    let numrecs = match header.numrecs {
        Some(numrecs) => numrecs,
        None => streaming_records(header, &extents, recsize, file_len),
    };
    let chunks = (extents.len() - records.len()) as u64;
    let chunks = (records.len() as u64).checked_mul(numrecs).and_then(|c| c.checked_add(chunks));
    if chunks.is_none_or(|chunks| chunks > limits.max_chunks) {
        return Err(FormatError::TooLarge(format!(
            "its {numrecs} records of {} variables make more chunks than limits.max_chunks ({})",
            records.len(),
            limits.max_chunks
        )));
    }
    let mut parsed = Parsed::default();
    let attributes = group_attributes(&header.attributes, &mut parsed.warnings);
    let root = json!({"zarr_format": 3, "node_type": "group", "attributes": attributes});
    parsed.nodes.insert(String::new(), Node { metadata: object(root).into(), chunks: Vec::new() });
    let file = File { header, file_len, numrecs, recsize, limits };
    for (variable, extent) in header.variables.iter().zip(&extents) {
        if parsed.nodes.contains_key(&variable.name) {
            return Err(FormatError::Invalid(format!("variable {:?} is there twice", variable.name)));
        }
        let node = file.array(variable, extent, &mut parsed.warnings)?;
        parsed.nodes.insert(variable.name.clone(), node);
    }
    Ok(parsed)
}

/// The record (unlimited) dimension's index: the one of length 0, if any.
fn record_dimension(header: &Header) -> Result<Option<usize>, FormatError> {
    for (index, dimension) in header.dimensions.iter().enumerate() {
        if header.dimensions[..index].iter().any(|d| d.name == dimension.name) {
            return Err(FormatError::Invalid(format!("dimension {:?} is there twice", dimension.name)));
        }
    }
    let mut unlimited = header.dimensions.iter().enumerate().filter(|(_, d)| d.length == 0);
    let record = unlimited.next().map(|(index, _)| index);
    if let Some((_, second)) = unlimited.next() {
        return Err(FormatError::Invalid(format!(
            "dimension {:?} is a second unlimited dimension (length 0): netCDF3 has one",
            second.name
        )));
    }
    Ok(record)
}

fn extent(variable: &Variable, header: &Header, record_dimension: Option<usize>) -> Result<Extent, FormatError> {
    let invalid = |what: String| FormatError::Invalid(format!("variable {:?}: {what}", variable.name));
    let mut elements = 1u64;
    for (position, id) in variable.dimension_ids.iter().enumerate() {
        let dimension = usize::try_from(*id).ok().and_then(|i| header.dimensions.get(i)).ok_or_else(|| {
            invalid(format!("its dimension id {id} names no dimension (the file has {})", header.dimensions.len()))
        })?;
        if Some(*id as usize) == record_dimension {
            if position != 0 {
                return Err(invalid(format!("the record dimension {:?} is not its first", dimension.name)));
            }
            continue;
        }
        elements = elements.checked_mul(dimension.length).ok_or_else(|| invalid("its size overflows".into()))?;
    }
    let record = variable.dimension_ids.first().is_some_and(|id| Some(*id as usize) == record_dimension);
    let bytes = elements.checked_mul(variable.nc_type.size()).ok_or_else(|| invalid("its size overflows".into()))?;
    Ok(Extent { record, bytes })
}

/// STREAMING numrecs: as many whole records as the file holds after the first record.
fn streaming_records(header: &Header, extents: &[Extent], recsize: u64, file_len: u64) -> u64 {
    let begin = header.variables.iter().zip(extents).filter(|(_, e)| e.record).map(|(v, _)| v.begin).min();
    match begin {
        Some(begin) if recsize > 0 => file_len.saturating_sub(begin) / recsize,
        _ => 0,
    }
}

/// What every variable's array needs to know of the file.
struct File<'a> {
    header: &'a Header,
    file_len: u64,
    numrecs: u64,
    recsize: u64,
    limits: &'a Limits,
}

impl File<'_> {
    fn array(&self, variable: &Variable, extent: &Extent, warnings: &mut Vec<String>) -> Result<Node, FormatError> {
        let dimensions: Vec<&super::header::Dimension> =
            variable.dimension_ids.iter().map(|id| &self.header.dimensions[*id as usize]).collect();
        let mut shape: Vec<u64> = dimensions.iter().map(|d| d.length).collect();
        let mut chunk_shape = shape.clone();
        if extent.record {
            shape[0] = self.numrecs;
            chunk_shape[0] = 1;
        }
        let nc_type = variable.nc_type;
        let codec = if nc_type.size() == 1 {
            json!({"name": "bytes"})
        } else {
            json!({"name": "bytes", "configuration": {"endian": "big"}})
        };
        let metadata = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": shape,
            "data_type": nc_type.data_type(),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk_shape}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill_value(variable, warnings),
            "codecs": [codec],
            "attributes": variable_attributes(variable, warnings),
            "dimension_names": dimensions.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        });
        Ok(Node { metadata: object(metadata).into(), chunks: self.chunks(variable, extent)? })
    }

    fn chunks(&self, variable: &Variable, extent: &Extent) -> Result<Vec<(Vec<u64>, Chunk)>, FormatError> {
        let invalid = |what: String| FormatError::Invalid(format!("variable {:?}: {what}", variable.name));
        let (begin, rank) = (variable.begin, variable.dimension_ids.len());
        let (count, step) = if extent.record { (self.numrecs, self.recsize) } else { (1, 0) };
        if count == 0 {
            // netCDF-c leaves the file ending before where the first record would begin.
            return Ok(Vec::new());
        }
        if begin > self.file_len {
            return Err(invalid(format!("begin {begin} is past the end of the {}-byte file", self.file_len)));
        }
        let end = (count - 1).checked_mul(step).and_then(|last| last.checked_add(begin)?.checked_add(extent.bytes));
        if end.is_none_or(|end| end > self.file_len) {
            let what = if extent.record {
                format!("its {count} records of {} bytes", extent.bytes)
            } else {
                format!("its {} bytes", extent.bytes)
            };
            return Err(invalid(format!(
                "{what} from byte {begin} go past the end of the {}-byte file (truncated?)",
                self.file_len
            )));
        }
        let mut chunks = Vec::new();
        for record in 0..count {
            if record % 4096 == 0 {
                self.limits.check_time()?;
            }
            let mut index = vec![0; rank];
            if extent.record {
                index[0] = record;
            }
            chunks.push((index, Chunk::Range { offset: begin + record * step, length: extent.bytes }));
        }
        Ok(chunks)
    }
}

/// The Zarr fill value: the variable's `_FillValue`, else netCDF3's default fill for its type.
fn fill_value(variable: &Variable, warnings: &mut Vec<String>) -> Value {
    let nc_type = variable.nc_type;
    let default = || nc_type.fill_value(nc_type.default_fill()).unwrap_or(Value::Null);
    let Some(first) =
        find(&variable.attributes, "_FillValue").and_then(|a| a.nc_type.numbers(&a.values).first().copied())
    else {
        return default();
    };
    nc_type.fill_value(first).unwrap_or_else(|| {
        warnings.push(format!(
            "variable {:?}: its _FillValue does not fit its type; the default fill is used",
            variable.name
        ));
        default()
    })
}

fn variable_attributes(variable: &Variable, warnings: &mut Vec<String>) -> Map<String, Value> {
    let mut attributes = Map::new();
    for attribute in &variable.attributes {
        let value = if matches!(attribute.name.as_str(), "_FillValue" | "missing_value") {
            match fill_attribute(variable.nc_type, attribute) {
                Some(value) => value,
                None => {
                    warnings.push(format!(
                        "variable {:?}: its {} cannot be written for its type and is left out",
                        variable.name, attribute.name
                    ));
                    continue;
                }
            }
        } else {
            plain_attribute(attribute, &format!("variable {:?}", variable.name), warnings)
        };
        attributes.insert(attribute.name.clone(), value);
    }
    attributes
}

/// A `_FillValue`/`missing_value` as xarray's Zarr reader decodes it (a list when several).
fn fill_attribute(nc_type: NcType, attribute: &Attribute) -> Option<Value> {
    if attribute.nc_type == NcType::Char {
        return None;
    }
    let numbers: Vec<Number> = attribute.nc_type.numbers(&attribute.values);
    let mut values = numbers.into_iter().map(|n| nc_type.fill_attribute(n)).collect::<Option<Vec<Value>>>()?;
    match values.len() {
        0 => None,
        1 => values.pop(),
        _ => Some(Value::Array(values)),
    }
}

fn group_attributes(attributes: &[Attribute], warnings: &mut Vec<String>) -> Map<String, Value> {
    attributes.iter().map(|a| (a.name.clone(), plain_attribute(a, "the root group", warnings))).collect()
}

/// An attribute's value as xarray reads it; NaN and infinities, which JSON cannot hold, become
/// null with a warning.
fn plain_attribute(attribute: &Attribute, whose: &str, warnings: &mut Vec<String>) -> Value {
    let numbers =
        if attribute.nc_type == NcType::Char { Vec::new() } else { attribute.nc_type.numbers(&attribute.values) };
    if numbers.iter().any(|n| matches!(n, Number::Real(real) if !real.is_finite())) {
        warnings.push(format!("{whose}: attribute {:?} holds NaN or infinity, written as null", attribute.name));
    }
    attribute.nc_type.attribute_value(&attribute.values)
}

fn find<'a>(attributes: &'a [Attribute], name: &str) -> Option<&'a Attribute> {
    attributes.iter().find(|a| a.name == name)
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
