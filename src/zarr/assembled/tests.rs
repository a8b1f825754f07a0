use serde_json::json;

use super::*;

fn metadata() -> Map<String, Value> {
    json!({
        "zarr_format": 3, "node_type": "array", "shape": [10, 3], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": -1,
        "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 1}}],
    })
    .as_object()
    .cloned()
    .unwrap()
}

/// A chunk of rows `first..first + 4` whose element (r, c) is `100 * r + c`, encoded.
fn chunk(first: i32) -> Vec<u8> {
    let raw: Vec<u8> = (0..12).flat_map(|i| (100 * (first + i / 3) + i % 3).to_ne_bytes()).collect();
    encode(&metadata(), &[4, 3], raw, 4).unwrap()
}

fn decoded(encoded: &[u8]) -> Vec<i32> {
    let decoder = ChunkDecoder::new(&metadata(), &[4, 3], 1 << 20).unwrap();
    let raw = decoder.decode(encoded).unwrap().into_fixed().unwrap().into_owned();
    raw.chunks_exact(4).map(|b| i32::from_ne_bytes(b.try_into().unwrap())).collect()
}

fn virtual_piece(start: u64, count: u64, at: u64) -> Piece {
    let source = PieceSource::Virtual {
        url: "s3://bucket/a b.nc".into(),
        etag: Some("\"e1\"".into()),
        size: Some(0),
        offset: 1 << 40,
        length: 77,
    };
    Piece { source, source_len: 4, start, count, at }
}

#[test]
fn recipes_come_back_as_they_were_written() {
    let recipe = Recipe {
        axis: 1,
        pieces: vec![
            virtual_piece(2, 2, 0),
            Piece { source: PieceSource::Inline(vec![1, 2, 3]), source_len: 3, start: 0, count: 1, at: 2 },
            Piece {
                source: PieceSource::Virtual { url: "file:///x".into(), etag: None, size: None, offset: 0, length: 1 },
                source_len: 1,
                start: 0,
                count: 1,
                at: 3,
            },
        ],
    };
    let encoded = recipe.encode();
    assert_eq!(Recipe::decode(&encoded).unwrap(), recipe);
    for cut in 0..encoded.len() {
        assert!(Recipe::decode(&encoded[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = encoded.clone();
    longer.push(0);
    assert_eq!(Recipe::decode(&longer), Err(AssembleError::Corrupt("trailing bytes")));
}

#[test]
fn a_recipe_that_does_not_fit_the_chunk_is_refused() {
    let recipe = Recipe { axis: 0, pieces: vec![virtual_piece(2, 3, 0)] };
    let why = recipe.check(&[4, 3]).unwrap_err().to_string();
    assert!(why.contains("3 steps from 2 of a chunk 4 long"), "{why}");
    assert!(Recipe { axis: 2, pieces: vec![] }.check(&[4, 3]).is_err());
    assert!(Recipe { axis: 0, pieces: vec![virtual_piece(0, 0, 0)] }.check(&[4, 3]).is_err());
}

#[test]
fn a_chunk_spanning_a_seam_is_the_tail_of_one_and_the_head_of_the_next() {
    // File A is 6 rows long: its chunk 1 holds rows 4, 5 and padding. File B follows it.
    let (a1, b0) = (chunk(4), chunk(6));
    let recipe = Recipe { axis: 0, pieces: vec![virtual_piece(0, 2, 0), virtual_piece(0, 2, 2)] };
    let out = assemble(&metadata(), &[4, 3], &recipe, &[&a1, &b0], 1 << 20, 1).unwrap().bytes;
    let values = decoded(&out);
    assert_eq!(values, vec![400, 401, 402, 500, 501, 502, 600, 601, 602, 700, 701, 702]);
}

#[test]
fn what_no_piece_covers_is_the_fill_value() {
    let mut piece = virtual_piece(1, 1, 0);
    piece.source_len = 3;
    let recipe = Recipe { axis: 1, pieces: vec![piece] };
    let out = assemble(&metadata(), &[4, 3], &recipe, &[&chunk(0)], 1 << 20, 1).unwrap().bytes;
    assert_eq!(decoded(&out), vec![1, -1, -1, 101, -1, -1, 201, -1, -1, 301, -1, -1]);
}

#[test]
fn bad_pieces_are_refused_not_served() {
    let recipe = Recipe { axis: 0, pieces: vec![virtual_piece(0, 2, 0)] };
    assert!(matches!(assemble(&metadata(), &[4, 3], &recipe, &[b"junk"], 1 << 20, 1), Err(AssembleError::Codec(_))));
    assert!(matches!(assemble(&metadata(), &[4, 3], &recipe, &[], 1 << 20, 1), Err(AssembleError::Misfit(_))));
    let why = assemble(&metadata(), &[4, 3], &recipe, &[&chunk(0)], 20, 1).unwrap_err().to_string();
    assert!(why.contains("above the 20 allowed") || why.contains("20"), "{why}");
}

#[test]
fn pieces_of_a_contiguous_file_are_cut_from_chunks_of_their_own_length() {
    // A file whose variable is contiguous: one chunk of 2 rows (rows 8 and 9 of the joined array).
    let raw: Vec<u8> = (0..6i32).flat_map(|i| (100 * (8 + i / 3) + i % 3).to_ne_bytes()).collect();
    let short = encode(&metadata(), &[2, 3], raw, 4).unwrap();
    let mut piece = virtual_piece(0, 2, 0);
    piece.source_len = 2;
    let recipe = Recipe { axis: 0, pieces: vec![piece, virtual_piece(0, 2, 2)] };
    let out = assemble(&metadata(), &[4, 3], &recipe, &[&short, &chunk(10)], 1 << 20, 1).unwrap().bytes;
    assert_eq!(decoded(&out), vec![800, 801, 802, 900, 901, 902, 1000, 1001, 1002, 1100, 1101, 1102]);
}

#[test]
fn any_deflate_level_decodes_to_the_same_chunk() {
    let recipe = Recipe { axis: 0, pieces: vec![virtual_piece(0, 2, 0), virtual_piece(0, 2, 2)] };
    let at = |level| assemble(&metadata(), &[4, 3], &recipe, &[&chunk(4), &chunk(6)], 1 << 20, level).unwrap().bytes;
    let (stored, fast, best) = (at(0), at(1), at(9));
    assert_eq!(decoded(&stored), decoded(&fast));
    assert_eq!(decoded(&best), decoded(&fast));
    assert!(stored.len() > 48, "level 0 stores the 48 bytes as they are: {}", stored.len());
}
