//! PATCH documents planned against a stored version (a group, a 1-d and a 2-d array): any
//! bytes are read and planned without a panic, and every block of a plan can be built.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use zarrgate::zarr::hierarchy::Hierarchy;
use zarrgate::zarr::limits::Limits;
use zarrgate::zarr::native::parse_slice;
use zarrgate::zarr::patch::plan;
use zarrgate::zarr::path::NodePath;

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn base() -> &'static Hierarchy {
    static BASE: OnceLock<Hierarchy> = OnceLock::new();
    BASE.get_or_init(|| {
        let array = |shape: Value, chunks: Value| {
            object(json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
                "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}))
        };
        let stored = vec![
            (NodePath::root(), object(json!({"zarr_format": 3, "node_type": "group"})), None),
            (NodePath::new("g").unwrap(), object(json!({"zarr_format": 3, "node_type": "group"})), None),
            (NodePath::new("g/x").unwrap(), array(json!([4]), json!([1])), Some(vec![2])),
            (NodePath::new("y").unwrap(), array(json!([4, 6]), json!([2, 3])), Some(vec![2, 2])),
        ];
        Hierarchy::build(stored, u64::MAX).unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = parse_slice(data) else { return };
    let Ok(plan) = plan(base(), doc, &|_| true, 4, &Limits::default()) else { return };
    for array in &plan.arrays {
        if array.rebuild {
            let _ = plan.rebuild_blocks(array, Vec::new());
        } else {
            for tile in array.changes.iter().map(|(loc, _)| loc.tile) {
                let _ = plan.patch_block(array, tile, None);
            }
        }
    }
});
