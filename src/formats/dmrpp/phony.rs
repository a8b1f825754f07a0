//! Names for anonymous dimensions (`Dim size=`: plain HDF5 without dimension scales), given as
//! h5netcdf's `phony_dims="access"` gives them: `phony_dim_N`, N counted over the file, groups
//! in the order they open; in each group, its arrays by name, each size as many times as the
//! array that uses it most; an array's k-th axis of a size takes that size's k-th name.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::super::{Node, Parsed};

/// Replaces the nulls of `dimension_names` with phony names. `groups`: in the order they open.
pub(super) fn name_dimensions(parsed: &mut Parsed, groups: &[String]) {
    let mut by_group: HashMap<String, Vec<String>> = HashMap::new();
    for (path, node) in &parsed.nodes {
        if names_of(node).is_some_and(|names| names.iter().any(Value::is_null)) {
            let group = path.rsplit_once('/').map_or("", |(group, _)| group);
            by_group.entry(group.to_owned()).or_default().push(path.clone());
        }
    }
    let mut counter = 0u64;
    for group in groups {
        let Some(members) = by_group.remove(group) else { continue };
        // Each size's names, created as the group's arrays first need them.
        let mut phony: HashMap<u64, Vec<String>> = HashMap::new();
        for path in &members {
            let Some(node) = parsed.nodes.get(path) else { continue };
            for (size, needed) in occurrences(&shape_of(node)) {
                let names = phony.entry(size).or_default();
                while names.len() < needed {
                    names.push(format!("phony_dim_{counter}"));
                    counter += 1;
                }
            }
        }
        for path in &members {
            let Some(node) = parsed.nodes.get_mut(path) else { continue };
            let mut used: HashMap<u64, usize> = HashMap::new();
            let names: Vec<Value> = shape_of(node)
                .into_iter()
                .zip(names_of(node).cloned().unwrap_or_default())
                .map(|(size, old)| {
                    let k = used.entry(size).or_default();
                    *k += 1;
                    if !old.is_null() {
                        return old;
                    }
                    json!(phony.get(&size).and_then(|names| names.get(*k - 1)).cloned().unwrap_or_default())
                })
                .collect();
            std::sync::Arc::make_mut(&mut node.metadata).insert("dimension_names".into(), Value::Array(names));
        }
    }
}

/// Each size of `shape` with how many axes have it, in the order they first appear.
fn occurrences(shape: &[u64]) -> Vec<(u64, usize)> {
    let mut counts: Vec<(u64, usize)> = Vec::new();
    for size in shape {
        match counts.iter_mut().find(|(s, _)| s == size) {
            Some((_, n)) => *n += 1,
            None => counts.push((*size, 1)),
        }
    }
    counts
}

fn names_of(node: &Node) -> Option<&Vec<Value>> {
    node.metadata.get("dimension_names").and_then(Value::as_array)
}

fn shape_of(node: &Node) -> Vec<u64> {
    node.metadata
        .get("shape")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |s| s.iter().filter_map(Value::as_u64).collect())
}
