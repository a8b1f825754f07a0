//! DMR++ sidecars (OPeNDAP Hyrax's `<file>.dmrpp`): the XML that describes an HDF5/netCDF4
//! file's groups, variables, attributes and chunk byte ranges, read with quick-xml's streaming
//! reader into the hierarchy the file itself would give (`hdf5.rs`'s output for that file):
//! the chunks point into the file beside the sidecar (its URL less `.dmrpp`), or a chunk's own
//! absolute `href`.

mod attributes;
mod elements;
mod inline;
mod text;
mod variable;
mod walk;

#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use super::{ByteRanges, FormatError, Limits, Parsed};

/// Reads the structure a DMR++ document describes.
pub fn parse(file: &dyn ByteRanges, limits: &Limits) -> Result<Parsed, FormatError> {
    let document = file.read(0, file.len())?;
    let mut walk = walk::Walk::new(limits);
    walk.run(&document)?;
    let groups = std::mem::take(&mut walk.groups);
    let mut parsed = walk.parsed;
    name_phony_dimensions(&mut parsed, &groups);
    Ok(parsed)
}

/// Names anonymous dimensions (`Dim size=`, plain HDF5 without scales) as h5netcdf's
/// `phony_dims="access"` does: a counter over the file, groups in the order they open; in each
/// group, its arrays by name, each size as many times as the array that uses it most.
fn name_phony_dimensions(parsed: &mut Parsed, groups: &[String]) {
    let mut counter = 0u64;
    for group in groups {
        let prefix = if group.is_empty() { String::new() } else { format!("{group}/") };
        let members: Vec<String> = parsed
            .nodes
            .iter()
            .filter(|(path, node)| {
                path.strip_prefix(&prefix).is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
                    && names_of(node).is_some_and(|names| names.iter().any(Value::is_null))
            })
            .map(|(path, _)| path.clone())
            .collect();
        let mut phony: Vec<(u64, Vec<String>)> = Vec::new();
        for path in &members {
            let shape = shape_of(&parsed.nodes[path]);
            let mut counts: Vec<(u64, usize)> = Vec::new();
            for size in &shape {
                match counts.iter_mut().find(|(s, _)| s == size) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((*size, 1)),
                }
            }
            for (size, needed) in counts {
                let index = match phony.iter().position(|(s, _)| *s == size) {
                    Some(index) => index,
                    None => {
                        phony.push((size, Vec::new()));
                        phony.len() - 1
                    }
                };
                while phony[index].1.len() < needed {
                    phony[index].1.push(format!("phony_dim_{counter}"));
                    counter += 1;
                }
            }
        }
        for path in &members {
            let Some(node) = parsed.nodes.get_mut(path) else { continue };
            let shape = shape_of(node);
            let mut used: Vec<(u64, usize)> = Vec::new();
            let names: Vec<Value> = shape
                .iter()
                .map(|size| {
                    let k = match used.iter_mut().find(|(s, _)| s == size) {
                        Some((_, k)) => {
                            *k += 1;
                            *k - 1
                        }
                        None => {
                            used.push((*size, 1));
                            0
                        }
                    };
                    let name = phony.iter().find(|(s, _)| s == size).and_then(|(_, names)| names.get(k));
                    json!(name.cloned().unwrap_or_default())
                })
                .collect();
            let old = names_of(node).cloned().unwrap_or_default();
            let merged: Vec<Value> =
                old.into_iter().zip(names).map(|(old, phony)| if old.is_null() { phony } else { old }).collect();
            node.metadata.insert("dimension_names".into(), Value::Array(merged));
        }
    }
}

fn names_of(node: &super::Node) -> Option<&Vec<Value>> {
    node.metadata.get("dimension_names").and_then(Value::as_array)
}

fn shape_of(node: &super::Node) -> Vec<u64> {
    node.metadata
        .get("shape")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |s| s.iter().filter_map(Value::as_u64).collect())
}
