//! Dimension names as h5netcdf gives them: netCDF4 dimension scales (`DIMENSION_LIST`
//! references, `_Netcdf4Coordinates` ids), a scale's own name, else `phony_dim_N` numbered as
//! h5netcdf's `phony_dims="access"` does (a counter over the whole file, groups in the order
//! they are opened, each group's sizes in the order its datasets show them).

use std::collections::HashMap;

use hdf5_reader::messages::dataspace::UNLIMITED;

/// One dataset of a group, as the dimension rules see it.
pub(super) struct Member {
    /// Its link name in the group (with `_nc4_non_coord_` if it has one).
    pub name: String,
    pub shape: Vec<u64>,
    pub max_dims: Option<Vec<u64>>,
    /// CLASS = DIMENSION_SCALE.
    pub is_scale: bool,
    /// `_Netcdf4Dimid`.
    pub dimid: Option<i64>,
    /// `_Netcdf4Coordinates`.
    pub coordinates: Option<Vec<i64>>,
    /// `DIMENSION_LIST`: per axis, the address of the last scale attached (None: none).
    pub dimension_list: Option<Vec<Option<u64>>>,
}

/// One dimension of a group.
#[derive(Debug, Clone)]
pub(super) struct Dimension {
    pub name: String,
    size: u64,
    unlimited: bool,
    phony: bool,
    dimid: Option<i64>,
}

/// The dimensions of one group (`all` with its ancestors' before it).
pub(super) struct GroupDimensions {
    pub own: Vec<Dimension>,
}

/// The dimensions a group defines: its scales, then the phony ones its unlabeled datasets need.
pub(super) fn group_dimensions(members: &[Member], phony_count: &mut u64) -> GroupDimensions {
    let mut own = Vec::new();
    let mut phony_sizes: Vec<(u64, u64)> = Vec::new();
    for member in members {
        if member.is_scale {
            let unlimited = member.max_dims.as_ref().and_then(|m| m.first()) == Some(&UNLIMITED);
            let size = member.shape.first().copied().unwrap_or(0);
            own.push(Dimension { name: member.name.clone(), size, unlimited, phony: false, dimid: member.dimid });
        } else if labels(member) == Labels::Unlabeled {
            // Counter |= Counter(shape): each size as often as the dataset that uses it most.
            let mut counts: Vec<(u64, u64)> = Vec::new();
            for size in &member.shape {
                match counts.iter_mut().find(|(s, _)| s == size) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((*size, 1)),
                }
            }
            for (size, n) in counts {
                match phony_sizes.iter_mut().find(|(s, _)| *s == size) {
                    Some((_, most)) => *most = (*most).max(n),
                    None => phony_sizes.push((size, n)),
                }
            }
        }
    }
    for (size, needed) in phony_sizes {
        let labeled = own.iter().filter(|d| !d.phony && !d.unlimited && d.size == size).count() as u64;
        for _ in labeled..needed {
            own.push(Dimension {
                name: format!("phony_dim_{phony_count}"),
                size,
                unlimited: false,
                phony: true,
                dimid: None,
            });
            *phony_count += 1;
        }
    }
    GroupDimensions { own }
}

#[derive(Debug, PartialEq)]
enum Labels {
    /// A scalar.
    None,
    /// No axis has a scale.
    Unlabeled,
    /// Every axis has one.
    Labeled,
    /// Some have, some not (h5netcdf refuses it).
    Mixed,
}

fn labels(member: &Member) -> Labels {
    if member.shape.is_empty() {
        return Labels::None;
    }
    match &member.dimension_list {
        None => Labels::Unlabeled,
        Some(list) if list.iter().all(Option::is_none) => Labels::Unlabeled,
        Some(list) if list.iter().all(Option::is_some) && list.len() == member.shape.len() => Labels::Labeled,
        Some(_) => Labels::Mixed,
    }
}

/// The dimension names of `member` in a group whose dimensions, innermost last, are `chain`;
/// `names` maps a dataset's address to its name. Err: why h5netcdf cannot name them.
pub(super) fn dimension_names(
    member: &Member,
    chain: &[&GroupDimensions],
    names: &HashMap<u64, String>,
) -> Result<Vec<String>, String> {
    let all = || chain.iter().rev().flat_map(|g| g.own.iter());
    if let (Some(ids), true) = (&member.coordinates, member.is_scale) {
        return ids
            .iter()
            .map(|id| {
                all()
                    .find(|d| d.dimid == Some(*id))
                    .map(|d| d.name.clone())
                    .ok_or_else(|| format!("names dimension id {id}, which no dimension has"))
            })
            .collect();
    }
    match labels(member) {
        Labels::Labeled => {
            let list = member.dimension_list.iter().flatten().flatten();
            return list
                .map(|address| {
                    names
                        .get(address)
                        .cloned()
                        .ok_or_else(|| "attaches a dimension scale that is not in the file".to_string())
                })
                .collect();
        }
        Labels::Mixed => return Err("has some dimensions with a dimension scale and some without".into()),
        _ => {}
    }
    if all().any(|d| d.name == member.name) {
        return Ok(vec![member.name.clone()]);
    }
    let own = chain.last().map_or(&[][..], |g| &g.own[..]);
    let mut used: HashMap<u64, usize> = HashMap::new();
    member
        .shape
        .iter()
        .map(|size| {
            let n = used.entry(*size).or_insert(0);
            let name = own.iter().filter(|d| d.size == *size).nth(*n).map(|d| d.name.clone());
            *n += 1;
            name.ok_or_else(|| format!("has an axis of length {size} that no dimension of its group fits"))
        })
        .collect()
}
