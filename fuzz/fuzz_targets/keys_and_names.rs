//! Keys a reader sends and names a client chooses: any key resolves (or not) without a panic
//! against a store with every chunk key encoding; a chunk key that resolves names a chunk of
//! the grid whose encoded key is the key read back; a store name is accepted or refused.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use zarrgate::http::names;
use zarrgate::zarr::hierarchy::{Hierarchy, Resolved};
use zarrgate::zarr::path::NodePath;

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn store() -> &'static Hierarchy {
    static STORE: OnceLock<Hierarchy> = OnceLock::new();
    STORE.get_or_init(|| {
        let array = |shape: Value, chunks: Value, encoding: Value| {
            object(json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
                "chunk_key_encoding": encoding, "fill_value": 0, "codecs": [{"name": "bytes"}]}))
        };
        let group = || object(json!({"zarr_format": 3, "node_type": "group"}));
        let stored = vec![
            (NodePath::root(), group(), None),
            (NodePath::new("g").unwrap(), group(), None),
            (
                NodePath::new("g/slash").unwrap(),
                array(json!([5, 7]), json!([2, 3]), json!({"name": "default"})),
                Some(vec![2, 2]),
            ),
            (
                NodePath::new("dot").unwrap(),
                array(json!([9]), json!([4]), json!({"name": "default", "configuration": {"separator": "."}})),
                Some(vec![3]),
            ),
            (
                NodePath::new("v2").unwrap(),
                array(json!([3, 3]), json!([1, 1]), json!({"name": "v2"})),
                Some(vec![3, 3]),
            ),
            (NodePath::new("scalar").unwrap(), array(json!([]), json!([]), json!({"name": "default"})), Some(vec![])),
        ];
        Hierarchy::build(stored, u64::MAX).unwrap()
    })
}

fuzz_target!(|text: &str| {
    if let Resolved::Chunk { node, layout, coords, location } = store().resolve(text) {
        assert_eq!(layout.grid.locate(&coords), Some(location), "{text:?}");
        let key = format!(
            "{}{}{}",
            node.path.as_str(),
            if node.path.is_root() { "" } else { "/" },
            layout.encoding.encode(&coords)
        );
        assert!(
            matches!(store().resolve(&key), Resolved::Chunk { coords: again, .. } if again == coords),
            "{text:?} -> {key:?}"
        );
    }
    let _ = names::check("store", text);
});
