//! The document parsers a request reaches, fed random mutations of valid documents (proptest):
//! native manifests, kerchunk JSON and PATCH documents are read, validated and planned without
//! a panic, and what is called a syntax error (`400`) is never valid JSON. The
//! normal test suite's share of `fuzz/` (cargo fuzz explores further; fuzz/README.md). Range
//! headers, chunk keys and manifest blocks have their own properties beside their code.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::hierarchy::Hierarchy;
use super::json_stream::ErrorKind;
use super::limits::Limits;
use super::path::NodePath;
use super::{kerchunk, native, patch, validate};

const NATIVE: &[u8] = include_bytes!("../../fuzz/seeds/native_manifest/design.json");
const KERCHUNK: &[u8] = include_bytes!("../../fuzz/seeds/kerchunk_json/v1.json");
const PATCH: &[u8] = include_bytes!("../../fuzz/seeds/patch_document/grow.json");

/// One edit of a document: at a position (a fraction of its length), replace a byte, insert
/// one, delete a run, or cut the rest.
#[derive(Debug, Clone)]
enum Edit {
    Replace(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index, u8),
    Cut(prop::sample::Index),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    // Bytes that matter to JSON and to the documents, more often than any other.
    let byte = prop_oneof![
        3 => prop::sample::select(b"{}[]\",:0123456789-.eE tfn\\u/\x00\xff".to_vec()),
        1 => any::<u8>(),
    ];
    let edit = prop_oneof![
        (any::<prop::sample::Index>(), byte.clone()).prop_map(|(i, b)| Edit::Replace(i, b)),
        (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<prop::sample::Index>(), 1u8..16).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<prop::sample::Index>().prop_map(Edit::Cut),
    ];
    prop::collection::vec(edit, 1..6)
}

fn mutate(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut doc = seed.to_vec();
    for edit in edits {
        let at = |i: &prop::sample::Index| if doc.is_empty() { 0 } else { i.index(doc.len()) };
        match edit {
            Edit::Replace(i, b) if !doc.is_empty() => {
                let at = at(i);
                doc[at] = *b;
            }
            Edit::Insert(i, b) => {
                let at = at(i);
                doc.insert(at, *b);
            }
            Edit::Delete(i, n) => {
                let at = at(i);
                doc.drain(at..(at + usize::from(*n)).min(doc.len()));
            }
            Edit::Cut(i) => {
                let at = at(i);
                doc.truncate(at);
            }
            Edit::Replace(..) => {}
        }
    }
    doc
}

/// A syntax error (`400`) must be one: the bytes are not JSON (checked with serde_json). The
/// other way round is not checked: reading stops at the first error, so JSON of the wrong shape
/// that is also broken further on is answered as the shape error (`422`).
fn told_apart(bytes: &[u8], kind: ErrorKind) -> Result<(), TestCaseError> {
    // A Value, not IgnoredAny: serde_json checks that strings are UTF-8 only when it keeps them.
    let is_json = serde_json::from_slice::<Value>(bytes).is_ok();
    match kind {
        ErrorKind::Syntax => prop_assert!(!is_json, "a syntax error in JSON: {}", String::from_utf8_lossy(bytes)),
        ErrorKind::Shape => {}
        ErrorKind::Io(_) => prop_assert!(false, "an I/O error reading a slice"),
    }
    Ok(())
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// The version PATCH documents are planned against (the one fuzz/ uses).
fn base() -> Hierarchy {
    let array = |shape: Value, chunks: Value| {
        object(json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}))
    };
    let group = || object(json!({"zarr_format": 3, "node_type": "group"}));
    let stored = vec![
        (NodePath::root(), group(), None),
        (NodePath::new("g").unwrap(), group(), None),
        (NodePath::new("g/x").unwrap(), array(json!([4]), json!([1])), Some(vec![2])),
        (NodePath::new("y").unwrap(), array(json!([4, 6]), json!([2, 3])), Some(vec![2, 2])),
    ];
    Hierarchy::build(stored, u64::MAX).unwrap()
}

#[test]
fn the_seeds_are_valid() {
    assert!(validate::validate(native::parse_slice(NATIVE).unwrap(), &|_| true).is_ok());
    assert!(kerchunk::parse_slice(KERCHUNK).is_ok());
    assert!(patch::plan(&base(), native::parse_slice(PATCH).unwrap(), &|_| true, 4, &Limits::default()).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn native_documents(edits in edits()) {
        let bytes = mutate(NATIVE, &edits);
        match native::parse_slice(&bytes) {
            Ok(doc) => drop(validate::validate(doc, &|_| true)),
            Err(e) => told_apart(&bytes, e.0.kind)?,
        }
    }

    #[test]
    fn kerchunk_documents(edits in edits()) {
        let bytes = mutate(KERCHUNK, &edits);
        match kerchunk::parse_slice(&bytes) {
            Ok(doc) => drop(validate::validate(doc, &|_| true)),
            Err(e) => told_apart(&bytes, e.0.kind)?,
        }
    }

    #[test]
    fn patch_documents(edits in edits()) {
        let bytes = mutate(PATCH, &edits);
        if let Ok(doc) = native::parse_slice(&bytes)
            && let Ok(plan) = patch::plan(&base(), doc, &|_| true, 4, &Limits::default())
        {
            for array in &plan.arrays {
                if array.rebuild {
                    let _ = plan.rebuild_blocks(array, Vec::new());
                } else {
                    for (loc, _) in &array.changes {
                        let _ = plan.patch_block(array, loc.tile, None);
                    }
                }
            }
        }
    }
}
