//! The walk: every group (depth-first, children in the order h5py lists them) and dataset,
//! turned into Zarr nodes. First the whole tree is listed (so dimension-scale references to
//! any dataset resolve), then each group's dimensions are worked out and its nodes built.

use std::collections::HashMap;

use hdf5_reader::error::Result as Hdf5Result;
use hdf5_reader::group::Group;
use hdf5_reader::messages::HdfMessage;
use hdf5_reader::messages::layout::DataLayout;
use hdf5_reader::{Attribute, Dataset, Hdf5File};
use serde_json::json;

use super::dims::{self, GroupDimensions, Member};
use super::node::{self, ListedDataset, object};
use super::{attrs, chunks, invalid, links};
use crate::formats::{FormatError, Limits, Node, Parsed};

/// h5netcdf's mark of a dimension scale that is no variable.
const NOT_A_VARIABLE: &str = "This is a netCDF dimension but not a netCDF variable";

/// netCDF4's prefix of a variable named as a dimension it does not hold.
const NON_COORD: &str = "_nc4_non_coord_";

/// One group, listed.
pub(super) struct Listed {
    /// Its path (`""` the root).
    pub path: String,
    pub attributes: Vec<Attribute>,
    pub datasets: Vec<ListedDataset>,
    /// Indices of its child groups in the listing.
    pub children: Vec<usize>,
}

/// Every group and dataset of the file as nodes; structures read side by side first where the
/// walk reads `ahead` ([`super::side_by_side`]).
pub(super) fn walk(hdf5: &Hdf5File, limits: &Limits, ahead: bool) -> Result<Parsed, FormatError> {
    let root = hdf5.root_group().map_err(|e| invalid("the root group", e))?;
    let mut listing = Vec::new();
    let mut tally = Tally { ahead, ..Tally::default() };
    list(hdf5, &root, String::new(), &mut Vec::new(), limits, &mut listing, &mut tally)?;
    // Every chunk index read side by side first (their nodes lie far apart, between chunks),
    // where the walk reads ahead: a file in memory has nothing to wait for.
    let layouts: Vec<(DataLayout, Vec<u64>, Option<Vec<u64>>)> = listing
        .iter()
        .filter(|_| tally.ahead)
        .flat_map(|g| g.datasets.iter())
        .filter_map(|listed| {
            listed.header.messages.iter().find_map(|m| match m {
                HdfMessage::DataLayout(layout) => Some((
                    layout.layout.clone(),
                    listed.dataset.shape().to_vec(),
                    listed.dataset.max_dims().map(<[u64]>::to_vec),
                )),
                _ => None,
            })
        })
        .collect();
    let file = hdf5.clone();
    super::side_by_side(tally.ahead, layouts, limits, move |(layout, shape, max_dims)| {
        chunks::read_index(&file, layout, shape, max_dims.as_deref());
    });
    let mut parsed = Parsed { warnings: tally.warnings, ..Parsed::default() };
    let names: HashMap<u64, String> =
        listing.iter().flat_map(|g| g.datasets.iter()).map(|d| (d.dataset.address(), d.name.clone())).collect();
    let mut builder = node::Builder::new(hdf5, limits);
    let mut phony_count = 0;
    let mut chain = Vec::new();
    build(&listing, 0, &names, &mut chain, &mut phony_count, &mut builder, &mut parsed)?;
    Ok(parsed)
}

/// What the listing counts (nodes so far, and warnings), and whether it reads structures ahead.
#[derive(Default)]
struct Tally {
    nodes: usize,
    warnings: Vec<String>,
    ahead: bool,
}

/// Lists `group` and (depth first) the groups below it.
fn list(
    hdf5: &Hdf5File,
    group: &Group,
    path: String,
    ancestors: &mut Vec<u64>,
    limits: &Limits,
    listing: &mut Vec<Listed>,
    tally: &mut Tally,
) -> Result<usize, FormatError> {
    limits.check_time()?;
    let shown = if path.is_empty() { "the root group".to_string() } else { format!("group {path}") };
    if ancestors.len() >= limits.max_depth {
        return Err(FormatError::TooLarge(format!(
            "{shown} is nested deeper than limits.max_depth ({})",
            limits.max_depth
        )));
    }
    let attributes = group.attributes().map_err(|e| invalid(&shown, e))?;
    // The members' headers read side by side first: a file's headers are often far apart
    // (netCDF-C writes part of each variable's after its chunks).
    if tally.ahead
        && let Ok(links) = links::hard_links(hdf5, group.address())
    {
        let file = hdf5.clone();
        super::side_by_side(tally.ahead, links, limits, move |(_, address)| {
            let _ = file.get_or_parse_header(*address);
        });
    }
    let (mut groups, mut datasets) =
        members(hdf5, group, &path, &mut tally.warnings).map_err(|e| invalid(&shown, e))?;
    tally.nodes = tally.nodes.saturating_add(1 + datasets.len());
    if tally.nodes + groups.len() > limits.max_nodes {
        return Err(FormatError::TooLarge(format!(
            "{shown}: the file has more than limits.max_nodes ({}) groups and datasets",
            limits.max_nodes
        )));
    }
    if !lists_in_creation_order(hdf5, group) {
        groups.sort_by(|a, b| a.name().cmp(b.name()));
        datasets.sort_by(|a, b| a.name().cmp(b.name()));
    }
    let mut listed_datasets = Vec::with_capacity(datasets.len());
    for dataset in datasets {
        let header = hdf5
            .get_or_parse_header(dataset.address())
            .map_err(|e| invalid(&format!("dataset {}", dataset.name()), e))?;
        let attributes = dataset.attributes();
        listed_datasets.push(ListedDataset { name: dataset.name().to_string(), dataset, header, attributes });
    }
    let index = listing.len();
    listing.push(Listed { path: path.clone(), attributes, datasets: listed_datasets, children: Vec::new() });
    ancestors.push(group.address());
    for child in groups {
        let child_path = if path.is_empty() { child.name().to_string() } else { format!("{path}/{}", child.name()) };
        if ancestors.contains(&child.address()) {
            tally.warnings.push(format!("group {child_path} links back to a group that holds it: left out"));
            continue;
        }
        let child_index = list(hdf5, &child, child_path, ancestors, limits, listing, tally)?;
        listing[index].children.push(child_index);
    }
    ancestors.pop();
    Ok(index)
}

/// A group's child groups and datasets. When `hdf5-reader` cannot list them because one is a
/// virtual dataset, they are opened one by one and that one is left out with a warning.
fn members(
    hdf5: &Hdf5File,
    group: &Group,
    path: &str,
    warnings: &mut Vec<String>,
) -> Hdf5Result<(Vec<Group>, Vec<Dataset>)> {
    let error = match group.members() {
        Ok(members) => return Ok(members),
        Err(error) if links::is_virtual_layout(&error) => error,
        Err(error) => return Err(error),
    };
    let Ok(links) = links::hard_links(hdf5, group.address()) else { return Err(error) };
    let (mut groups, mut datasets) = (Vec::new(), Vec::new());
    for (name, address) in links {
        let header = match hdf5.get_or_parse_header(address) {
            Ok(header) => header,
            Err(error) if links::is_virtual_layout(&error) => {
                let child = if path.is_empty() { name } else { format!("{path}/{name}") };
                warnings
                    .push(format!("variable {child} is a virtual dataset (its data is in other datasets); left out"));
                continue;
            }
            Err(error) => return Err(error),
        };
        let has = |f: fn(&HdfMessage) -> bool| header.messages.iter().any(f);
        if has(|m| matches!(m, HdfMessage::DataLayout(_))) {
            datasets.push(group.dataset(&name)?);
        } else if has(|m| matches!(m, HdfMessage::SymbolTable(_) | HdfMessage::LinkInfo(_) | HdfMessage::Link(_))) {
            groups.push(group.group(&name)?);
        }
    }
    Ok((groups, datasets))
}

/// h5py lists a group's links in creation order when the group indexes it (netCDF4 groups
/// do), else by name.
fn lists_in_creation_order(hdf5: &Hdf5File, group: &Group) -> bool {
    let Ok(header) = hdf5.get_or_parse_header(group.address()) else { return false };
    header.messages.iter().any(|m| matches!(m, HdfMessage::LinkInfo(info) if info.creation_order_indexed))
}

/// The nodes of the listed group `index` and of the groups below it.
fn build(
    listing: &[Listed],
    index: usize,
    names: &HashMap<u64, String>,
    chain: &mut Vec<GroupDimensions>,
    phony_count: &mut u64,
    builder: &mut node::Builder<'_>,
    parsed: &mut Parsed,
) -> Result<(), FormatError> {
    let group = &listing[index];
    let shown = if group.path.is_empty() { "the root group".to_string() } else { format!("group {}", group.path) };
    let attributes = attrs::attributes(&group.attributes, &shown, None, builder.limits, &mut parsed.warnings)?;
    let metadata = json!({"zarr_format": 3, "node_type": "group", "attributes": attributes});
    parsed.nodes.insert(group.path.clone(), Node { metadata: object(metadata).into(), chunks: Vec::new() });

    let members: Vec<Member> = group.datasets.iter().map(|d| member(d, builder.hdf5)).collect();
    chain.push(dims::group_dimensions(&members, phony_count));
    for (dataset, member) in group.datasets.iter().zip(&members) {
        let is_dimension_only = attrs::text(&dataset.attributes, "NAME").is_some_and(|n| n.contains(NOT_A_VARIABLE));
        if is_dimension_only {
            continue;
        }
        let name = dataset.name.strip_prefix(NON_COORD).unwrap_or(&dataset.name);
        let path = if group.path.is_empty() { name.to_string() } else { format!("{}/{name}", group.path) };
        let chain_refs: Vec<&GroupDimensions> = chain.iter().collect();
        let dimension_names = match dims::dimension_names(member, &chain_refs, names) {
            Ok(names) => names,
            Err(why) => {
                parsed.warnings.push(format!("variable {path} {why}: left out"));
                continue;
            }
        };
        if let Some(node) = builder.array(dataset, &path, dimension_names, &mut parsed.warnings)? {
            parsed.nodes.insert(path, node);
        }
    }
    for child in &group.children {
        build(listing, *child, names, chain, phony_count, builder, parsed)?;
    }
    chain.pop();
    Ok(())
}

/// What the dimension rules need of a dataset.
fn member(listed: &ListedDataset, hdf5: &Hdf5File) -> Member {
    let attributes = &listed.attributes;
    Member {
        name: listed.name.clone(),
        shape: listed.dataset.shape().to_vec(),
        max_dims: listed.dataset.max_dims().map(<[u64]>::to_vec),
        is_scale: attrs::text(attributes, "CLASS").as_deref() == Some("DIMENSION_SCALE"),
        dimid: attrs::integers(attributes, "_Netcdf4Dimid").and_then(|ids| ids.first().copied()),
        coordinates: attrs::integers(attributes, "_Netcdf4Coordinates"),
        dimension_list: attributes.iter().find(|a| a.name == "DIMENSION_LIST").map(|a| dimension_list(a, hdf5)),
    }
}

/// `DIMENSION_LIST`: per axis a variable-length list of object references; the last one of each.
fn dimension_list(attribute: &Attribute, hdf5: &Hdf5File) -> Vec<Option<u64>> {
    let offset_size = usize::from(hdf5.superblock().offset_size);
    let reference_size = 4 + offset_size + 4;
    let Ok(root) = hdf5.root_group() else { return Vec::new() };
    attribute
        .raw_data
        .chunks_exact(reference_size)
        .map(|reference| {
            let bytes = root.resolve_vlen_reference_bytes(reference, offset_size).ok()?;
            let last = bytes.rchunks_exact(offset_size).next()?;
            let mut address = [0u8; 8];
            address[..offset_size.min(8)].copy_from_slice(&last[..offset_size.min(8)]);
            Some(u64::from_le_bytes(address))
        })
        .collect()
}
