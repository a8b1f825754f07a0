//! A group's children read from its own header, for when `hdf5-reader` cannot list the group
//! because one child's header is one it does not parse (a virtual dataset): compact links, dense
//! links (fractal heap) and old-style symbol tables. Each child is then opened by name, and the one that fails alone is
//! left out.

use hdf5_reader::btree_v2::{BTreeV2Header, BTreeV2Record, collect_btree_v2_records_storage};
use hdf5_reader::error::{Error as Hdf5Error, Result as Hdf5Result};
use hdf5_reader::fractal_heap::FractalHeap;
use hdf5_reader::io::Cursor;
use hdf5_reader::local_heap::LocalHeap;
use hdf5_reader::messages::HdfMessage;
use hdf5_reader::messages::link::{self, LinkTarget};
use hdf5_reader::messages::link_info::LinkInfoMessage;
use hdf5_reader::messages::symbol_table_msg::SymbolTableMessage;
use hdf5_reader::symbol_table::SymbolTableNode;
use hdf5_reader::{Hdf5File, btree_v1};

/// Most symbol-table entries one node may hold (2K for the largest K HDF5 allows).
const MAX_NODE_ENTRIES: usize = 1 << 16;

/// Whether `error` is `hdf5-reader` refusing a virtual dataset's layout.
pub(super) fn is_virtual_layout(error: &Hdf5Error) -> bool {
    match error {
        Hdf5Error::UnsupportedLayoutClass(3) => true,
        Hdf5Error::Context { source, .. } => is_virtual_layout(source),
        _ => false,
    }
}

/// The names and object header addresses of the hard links of the group at `address`.
pub(super) fn hard_links(hdf5: &Hdf5File, address: u64) -> Hdf5Result<Vec<(String, u64)>> {
    let header = hdf5.get_or_parse_header(address)?;
    let mut links = Vec::new();
    for message in &header.messages {
        match message {
            HdfMessage::Link(link) => {
                if let LinkTarget::Hard { address } = link.target {
                    links.push((link.name.clone(), address));
                }
            }
            HdfMessage::SymbolTable(table) => links.extend(symbol_table(hdf5, table)?),
            HdfMessage::LinkInfo(info) if info.fractal_heap_address != u64::MAX => links.extend(dense(hdf5, info)?),
            _ => {}
        }
    }
    Ok(links)
}

/// The links of a group in dense storage: link messages in a fractal heap, found through the
/// B-tree of their names.
fn dense(hdf5: &Hdf5File, info: &LinkInfoMessage) -> Hdf5Result<Vec<(String, u64)>> {
    let storage = hdf5.storage();
    let (offset_size, length_size) = (hdf5.superblock().offset_size, hdf5.superblock().length_size);
    let heap = FractalHeap::parse_at_storage(storage, info.fractal_heap_address, offset_size, length_size)?;
    let names = BTreeV2Header::parse_at_storage(storage, info.btree_name_index_address, offset_size, length_size)?;
    let records = collect_btree_v2_records_storage(storage, &names, offset_size, length_size, None, &[], None)?;
    let mut links = Vec::new();
    for record in records {
        if let BTreeV2Record::LinkNameHash { heap_id, .. } = record {
            let bytes = heap.get_object_storage(&heap_id, storage, offset_size, length_size)?;
            let link = link::parse(&mut Cursor::new(&bytes), offset_size, length_size, bytes.len())?;
            if let LinkTarget::Hard { address } = link.target {
                links.push((link.name, address));
            }
        }
    }
    Ok(links)
}

/// The entries of an old-style group: its B-tree's symbol-table nodes, names in its local heap.
fn symbol_table(hdf5: &Hdf5File, table: &SymbolTableMessage) -> Hdf5Result<Vec<(String, u64)>> {
    let storage = hdf5.storage();
    let (offset_size, length_size) = (hdf5.superblock().offset_size, hdf5.superblock().length_size);
    let heap = LocalHeap::parse_at_storage(storage, table.heap_address, offset_size, length_size)?;
    let leaves = btree_v1::collect_btree_v1_leaves_storage(
        storage,
        table.btree_address,
        offset_size,
        length_size,
        None,
        &[],
        None,
    )?;
    let entry_len = 2 * usize::from(offset_size) + 4 + 4 + 16;
    let mut links = Vec::new();
    for (_, node_address) in leaves {
        let prefix = storage.read_range(node_address, 8)?;
        let count = usize::from(u16::from_le_bytes([prefix[6], prefix[7]])).min(MAX_NODE_ENTRIES);
        let bytes = storage.read_range(node_address, 8 + count * entry_len)?;
        let node = SymbolTableNode::parse(&mut Cursor::new(&bytes), offset_size, length_size)?;
        for entry in node.entries.iter().filter(|e| e.cache_type != 2) {
            let name = heap.get_string_storage(entry.link_name_offset, storage)?;
            links.push((name, entry.object_header_address));
        }
    }
    Ok(links)
}
