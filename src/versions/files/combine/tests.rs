//! The combine rules on small hierarchies made by hand.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Combine, CombineError, Existing, Nodes};
use crate::formats::{Chunk, Node};
use crate::zarr::assembled::PieceSource;

/// An array `dims` long with chunks `chunk` long, every chunk at a byte range.
fn array(dims: &[(&str, u64)], chunk: &[u64], codecs: Value) -> Node {
    let metadata = json!({
        "zarr_format": 3, "node_type": "array",
        "shape": dims.iter().map(|d| d.1).collect::<Vec<_>>(),
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0, "codecs": codecs, "attributes": {},
        "dimension_names": dims.iter().map(|d| d.0).collect::<Vec<_>>(),
    });
    let grid: Vec<u64> = dims.iter().zip(chunk).map(|(d, c)| d.1.div_ceil(*c)).collect();
    let mut chunks = Vec::new();
    let mut index = vec![0; grid.len()];
    'all: loop {
        chunks.push((index.clone(), Chunk::Range { offset: 100 * chunks.len() as u64, length: 10 }));
        for axis in (0..grid.len()).rev() {
            index[axis] += 1;
            if index[axis] < grid[axis] {
                continue 'all;
            }
            index[axis] = 0;
        }
        break;
    }
    Node { metadata: metadata.as_object().cloned().unwrap().into(), chunks }
}

fn bytes() -> Value {
    json!([{"name": "bytes", "configuration": {"endian": "little"}}])
}

fn group() -> Node {
    Node {
        metadata: json!({"zarr_format": 3, "node_type": "group", "attributes": {}})
            .as_object()
            .cloned()
            .unwrap()
            .into(),
        chunks: vec![],
    }
}

/// A file of `steps` time steps: `t(time)` and `air(time, x)` chunked `chunk` along time, and `x(x)`.
fn daily(steps: u64, chunk: u64) -> Nodes {
    let mut t = array(&[("time", steps)], &[chunk], bytes());
    Arc::make_mut(&mut t.metadata)
        .insert("attributes".into(), json!({"units": "days since 2000-01-01", "calendar": "standard"}));
    Nodes::from([
        (String::new(), group()),
        ("time".to_owned(), t),
        ("air".to_owned(), array(&[("time", steps), ("x", 4)], &[chunk, 4], bytes())),
        ("x".to_owned(), array(&[("x", 4)], &[4], bytes())),
    ])
}

fn spec(value: Value) -> Result<Combine, CombineError> {
    Combine::from_json(&value)
}

fn refusal(result: Result<Nodes, CombineError>) -> String {
    match result {
        Err(CombineError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn aligned_files_join_by_references_with_shifted_indices() {
    let files = vec![("s3://b/a.nc".to_owned(), daily(4, 2)), ("s3://b/b.nc".to_owned(), daily(3, 2))];
    let out = spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files).unwrap();
    let air = &out["air"];
    assert_eq!(air.metadata["shape"], json!([7, 4]));
    let indices: Vec<_> = air.chunks.iter().map(|(i, _)| i.clone()).collect();
    assert_eq!(indices, [vec![0, 0], vec![1, 0], vec![2, 0], vec![3, 0]]);
    assert!(matches!(&air.chunks[2].1, Chunk::Elsewhere { url, offset: 0, .. } if url == "s3://b/b.nc"));
    assert!(matches!(&air.chunks[1].1, Chunk::Elsewhere { url, .. } if url == "s3://b/a.nc"));
    assert_eq!(out["time"].metadata["shape"], json!([7]));
    assert_eq!(out["x"].metadata["shape"], json!([4]), "x is taken from the first file");
    assert!(matches!(&out["x"].chunks[0].1, Chunk::Elsewhere { url, .. } if url == "s3://b/a.nc"));
}

/// The pieces of an assembled chunk as (url, offset, source_len, start, count, at).
fn pieces(chunk: &Chunk) -> Vec<(String, u64, u64, u64, u64, u64)> {
    let Chunk::Assembled(recipe) = chunk else { panic!("expected an assembled chunk, got {chunk:?}") };
    recipe
        .pieces
        .iter()
        .map(|p| match &p.source {
            PieceSource::Virtual { url, offset, .. } => (url.clone(), *offset, p.source_len, p.start, p.count, p.at),
            PieceSource::Inline(_) => panic!("inline piece"),
        })
        .collect()
}

#[test]
fn chunks_spanning_a_seam_are_assembled_and_the_rest_are_references() {
    // 10 steps chunked 7: chunk 1 of each file holds 3 steps and 4 of padding.
    let files = vec![("s3://b/a.nc".to_owned(), daily(10, 7)), ("s3://b/b.nc".to_owned(), daily(10, 7))];
    let out = spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files).unwrap();
    let air = &out["air"];
    assert_eq!(air.metadata["shape"], json!([20, 4]));
    let indices: Vec<_> = air.chunks.iter().map(|(i, _)| i.clone()).collect();
    assert_eq!(indices, [vec![0, 0], vec![1, 0], vec![2, 0]]);
    // Steps 0-6: a's chunk 0 as it is.
    assert!(matches!(&air.chunks[0].1, Chunk::Elsewhere { url, offset: 0, .. } if url == "s3://b/a.nc"));
    // Steps 7-13: a's 7-9 (its chunk 1, at offset 100), then b's 0-3 (its chunk 0, at 0).
    let a = "s3://b/a.nc".to_owned();
    let b = "s3://b/b.nc".to_owned();
    assert_eq!(pieces(&air.chunks[1].1), [(a, 100, 7, 0, 3, 0), (b.clone(), 0, 7, 0, 4, 3)]);
    // Steps 14-19 (the edge chunk): b's 4-6, then b's 7-9.
    assert_eq!(pieces(&air.chunks[2].1), [(b.clone(), 0, 7, 4, 3, 0), (b, 100, 7, 0, 3, 3)]);
}

#[test]
fn a_file_chunked_otherwise_along_the_axis_is_cut_from_its_own_chunks() {
    // The second file's variable is contiguous (one chunk of its 3 steps).
    let files = vec![("s3://b/a.nc".to_owned(), daily(4, 2)), ("s3://b/b.nc".to_owned(), daily(3, 3))];
    let out = spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files).unwrap();
    let t = &out["time"];
    assert_eq!(t.metadata["shape"], json!([7]));
    assert_eq!(t.metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([2]), "the first file's grid");
    let b = "s3://b/b.nc".to_owned();
    assert_eq!(pieces(&t.chunks[2].1), [(b.clone(), 0, 3, 0, 2, 0)]);
    assert_eq!(pieces(&t.chunks[3].1), [(b, 0, 3, 2, 1, 0)], "the edge chunk, from the contiguous file");
}

#[test]
fn strings_of_variable_length_spanning_a_seam_are_refused() {
    let mut a = daily(3, 2);
    Arc::make_mut(&mut a.get_mut("air").unwrap().metadata).insert("data_type".into(), json!("string"));
    let mut b = daily(3, 2);
    Arc::make_mut(&mut b.get_mut("air").unwrap().metadata).insert("data_type".into(), json!("string"));
    let files = vec![("s3://b/a.nc".to_owned(), a), ("s3://b/b.nc".to_owned(), b)];
    let why = refusal(spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files));
    assert!(why.contains("variable air") && why.contains("cannot be assembled"), "{why}");
}

#[test]
fn disagreeing_codecs_units_and_shapes_name_both_files() {
    let mut other = daily(2, 1);
    other.insert(
        "air".into(),
        array(&[("time", 2), ("x", 4)], &[1, 4], json!([{"name": "numcodecs.zlib", "configuration": {"level": 4}}])),
    );
    let files = vec![("s3://b/a.nc".to_owned(), daily(2, 1)), ("s3://b/b.nc".to_owned(), other)];
    let why = refusal(spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files));
    assert!(
        why.contains("s3://b/a.nc") && why.contains("s3://b/b.nc") && why.contains("air") && why.contains("codecs"),
        "{why}"
    );

    let mut hours = daily(2, 1);
    Arc::make_mut(&mut hours.get_mut("time").unwrap().metadata)
        .insert("attributes".into(), json!({"units": "hours since 2000-01-01", "calendar": "standard"}));
    let files = vec![("s3://b/a.nc".to_owned(), daily(2, 1)), ("s3://b/b.nc".to_owned(), hours)];
    let why = refusal(spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files));
    assert!(why.contains("re-encoding") && why.contains("s3://b/b.nc") && why.contains("units"), "{why}");

    let mut wider = daily(2, 1);
    wider.insert("x".into(), array(&[("x", 5)], &[4], bytes()));
    let files = vec![("s3://b/a.nc".to_owned(), daily(2, 1)), ("s3://b/b.nc".to_owned(), wider)];
    let why = refusal(spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files));
    assert!(why.contains("variable x") && why.contains("shape"), "{why}");
}

#[test]
fn a_new_dimension_stacks_variables_and_dates_files_by_name() {
    let files = vec![
        ("s3://b/fc_20240101_00.nc".to_owned(), daily(2, 1)),
        ("s3://b/fc_20240101_12.nc".to_owned(), daily(2, 1)),
    ];
    let combine =
        spec(json!({"join": "new", "dim": "run", "pattern": "fc_(\\d{8})_(\\d{2})", "format": "%Y%m%d%H"})).unwrap();
    let out = combine.apply(files).unwrap();
    let air = &out["air"];
    assert_eq!(air.metadata["shape"], json!([2, 2, 4]));
    assert_eq!(air.metadata["dimension_names"], json!(["run", "time", "x"]));
    assert_eq!(air.metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([1, 1, 4]));
    assert_eq!(air.chunks.last().unwrap().0, vec![1, 1, 0]);
    assert_eq!(out["time"].metadata["shape"], json!([2]), "a coordinate comes from the first file");
    let run = &out["run"];
    assert_eq!(run.metadata["attributes"]["units"], json!("seconds since 1970-01-01T00:00:00"));
    let expected: Vec<u8> =
        [1_704_067_200_i64, 1_704_067_200 + 12 * 3600].iter().flat_map(|s| s.to_le_bytes()).collect();
    assert_eq!(run.chunks, vec![(vec![0], Chunk::Inline(expected))]);

    let files = vec![("s3://b/other.nc".to_owned(), daily(2, 1))];
    let why = refusal(combine.apply(files));
    assert!(why.contains("other.nc") && why.contains("does not match"), "{why}");
}

#[test]
fn a_union_puts_variables_side_by_side_and_checks_dimensions() {
    let a = Nodes::from([(String::new(), group()), ("u".to_owned(), array(&[("x", 4)], &[4], bytes()))]);
    let b = Nodes::from([(String::new(), group()), ("v".to_owned(), array(&[("x", 4)], &[2], bytes()))]);
    let files = vec![("s3://b/u.nc".to_owned(), a.clone()), ("s3://b/v.nc".to_owned(), b)];
    let out = spec(json!({"join": "union"})).unwrap().apply(files).unwrap();
    assert_eq!(out.keys().collect::<Vec<_>>(), ["", "u", "v"]);
    assert!(matches!(&out["v"].chunks[1].1, Chunk::Elsewhere { url, .. } if url == "s3://b/v.nc"));

    let c = Nodes::from([("w".to_owned(), array(&[("x", 5)], &[5], bytes()))]);
    let why = refusal(
        spec(json!({"join": "union"}))
            .unwrap()
            .apply(vec![("s3://b/u.nc".into(), a.clone()), ("s3://b/w.nc".into(), c)]),
    );
    assert!(why.contains("s3://b/u.nc") && why.contains("s3://b/w.nc") && why.contains("dimension x"), "{why}");

    let d = Nodes::from([("u".to_owned(), array(&[("x", 4)], &[2], bytes()))]);
    let why = refusal(
        spec(json!({"join": "union"})).unwrap().apply(vec![("s3://b/u.nc".into(), a), ("s3://b/d.nc".into(), d)]),
    );
    assert!(why.contains("variable u") && why.contains("s3://b/d.nc"), "{why}");
}

#[test]
fn bad_specs_are_named() {
    for (value, expected) in [
        (json!("time"), "not an object"),
        (json!({"dim": "time"}), "\"join\" is missing"),
        (json!({"join": "stack"}), "not one of existing, new, union"),
        (json!({"join": "existing"}), "\"dim\" is missing"),
        (json!({"join": "existing", "dim": "time", "dims": 1}), "\"dims\" is not a key"),
        (json!({"join": "existing", "dim": "time", "order": "size"}), "\"order\""),
        (json!({"join": "new", "dim": "run", "pattern": "(", "format": "%Y"}), "not a regex"),
        (json!({"join": "new", "dim": "run", "pattern": "x", "format": "%Q"}), "not a strftime format"),
        (json!({"join": "union", "dim": "x"}), "\"dim\" is not a key"),
    ] {
        match spec(value.clone()) {
            Err(CombineError::Spec(why)) => assert!(why.contains(expected), "{value}: {why}"),
            other => panic!("{value}: {other:?}"),
        }
    }
}

#[test]
fn a_join_hands_on_each_chunk_once_the_files_reach_its_end() {
    // 50 files of 10 steps chunked 7: a chunk of the join is settled as soon as the files read
    // reach its end, so the join holds only the chunk at its open seam, whatever the count.
    let mut join = Existing::new("time");
    let mut handed: Vec<(String, Vec<u64>, Chunk)> = Vec::new();
    for k in 0..50u64 {
        let mut sink = |path: &str, index: Vec<u64>, chunk: Chunk| handed.push((path.to_owned(), index, chunk));
        join.push(&format!("s3://b/{k:03}.nc").into(), daily(10, 7), &mut sink).unwrap();
        let air = handed.iter().filter(|(path, ..)| path == "air").count() as u64;
        assert_eq!(air, (k + 1) * 10 / 7, "chunks of air settled after file {k}");
        assert_eq!(handed.iter().filter(|(path, ..)| path == "x").count(), 1, "x is the first file's");
        assert!(!handed.iter().any(|(path, ..)| path == "time"), "the coordinate waits for its values");
    }
    let mut sink = |path: &str, index: Vec<u64>, chunk: Chunk| handed.push((path.to_owned(), index, chunk));
    let out = join.finish(None, &mut sink).unwrap();
    assert_eq!(out["air"].metadata["shape"], json!([500, 4]));
    assert!(out["air"].chunks.is_empty(), "every chunk was handed on");
    let mut air: Vec<Vec<u64>> = handed.iter().filter(|(path, ..)| path == "air").map(|(_, i, _)| i.clone()).collect();
    air.sort();
    assert_eq!(air, (0..72).map(|m| vec![m, 0]).collect::<Vec<_>>(), "each of the 72 chunks once");
    // The same chunks as the join of all the files at once.
    let files = (0..50u64).map(|k| (format!("s3://b/{k:03}.nc"), daily(10, 7))).collect();
    let whole = spec(json!({"join": "existing", "dim": "time"})).unwrap().apply(files).unwrap();
    let mut streamed: Vec<_> = handed.into_iter().filter(|(path, ..)| path == "air").map(|(_, i, c)| (i, c)).collect();
    streamed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(streamed, whole["air"].chunks);
}
