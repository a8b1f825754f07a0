use super::*;
use serde_json::json;

fn array(data_type: &str, shape: Value, chunks: Value, fill: Value) -> Map<String, Value> {
    json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": fill,
           "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})
    .as_object()
    .unwrap()
    .clone()
}

fn dims(m: &Map<String, Value>, key: &str) -> Vec<u64> {
    let v = if key == "shape" { &m["shape"] } else { &m["chunk_grid"]["configuration"]["chunk_shape"] };
    v.as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect()
}

/// The overview of `m` with every chunk given by `chunk`.
fn render(
    m: &Map<String, Value>,
    chunk: impl Fn(&[u64]) -> Option<Vec<u8>>,
    max: u64,
) -> Result<Quicklook, QuicklookError> {
    let mut o = Overview::new(m, &dims(m, "shape"), &dims(m, "chunk_shape"), max)?;
    for (i, coords) in o.chunks().to_vec().iter().enumerate() {
        o.add(i, chunk(coords).as_deref())?;
    }
    Ok(o.finish())
}

fn pixel(png: &[u8]) -> (u32, u32) {
    (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()))
}

#[test]
fn draws_the_first_slice_with_its_range() {
    let m = array("float32", json!([2, 3, 4]), json!([1, 3, 4]), json!(-1.0));
    let values: Vec<u8> = (0..12).flat_map(|i| if i == 5 { -1.0f32 } else { i as f32 }.to_le_bytes()).collect();
    let q = render(&m, |c| (c == [0, 0, 0]).then(|| values.clone()), 1 << 20).unwrap();
    assert_eq!((q.min, q.max), (Some(0.0), Some(11.0)), "the fill value is not part of the range");
    assert_eq!(q.plane, [3, 4]);
    assert_eq!(&q.png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(pixel(&q.png), (256, 192 + BAR as u32), "a small plane enlarged 64 times");
    assert_eq!(crc32(b"IEND"), 0xAE42_6082);
}

#[test]
fn the_overview_spans_every_chunk_of_the_slice() {
    // 4 x 6 in chunks of 2 x 3: four chunks, each filled with its number.
    let m = array("uint8", json!([5, 4, 6]), json!([1, 2, 3]), json!(255));
    let q = render(&m, |c| Some(vec![(c[1] * 2 + c[2]) as u8 * 10; 6]), 1 << 20).unwrap();
    assert_eq!((q.min, q.max, q.plane), (Some(0.0), Some(30.0), [4, 6]));
    // A missing chunk is fill: transparent, out of the range.
    let q = render(&m, |c| (c[2] == 0).then(|| vec![(c[1] * 2 + 1) as u8; 6]), 1 << 20).unwrap();
    assert_eq!((q.min, q.max), (Some(1.0), Some(3.0)));
}

#[test]
fn packed_values_are_unpacked_and_missing_ones_masked() {
    let mut m = array("int16", json!([2, 2]), json!([2, 2]), json!(0));
    m.insert("attributes".into(), json!({"scale_factor": 0.5, "add_offset": 100, "_FillValue": -1, "units": "K"}));
    let raw: Vec<u8> = [2i16, -1, 4, 10].iter().flat_map(|v| v.to_le_bytes()).collect();
    let q = render(&m, |_| Some(raw.clone()), 1 << 20).unwrap();
    assert_eq!((q.min, q.max, q.units.as_deref()), (Some(101.0), Some(105.0), Some("K")));
    assert_eq!(element(&m, &[2, 2], Some(&raw), 3, 1 << 20), Ok(Some(105.0)));
    assert_eq!(element(&m, &[2, 2], Some(&raw), 1, 1 << 20), Ok(None), "missing");
}

#[test]
fn big_planes_are_sampled_down_and_big_chunks_refused() {
    let m = array("uint8", json!([2000, 1000]), json!([2000, 1000]), json!(0));
    let q = render(&m, |_| Some(vec![7u8; 2_000_000]), 4 << 20).unwrap();
    assert_eq!(pixel(&q.png), (512, 512 + BAR as u32));
    let wide = array("uint8", json!([1, 1000]), json!([1, 1000]), json!(0));
    assert_eq!(pixel(&render(&wide, |_| Some(vec![1u8; 1000]), 1000).unwrap().png), (512, 1 + BAR as u32));
    assert_eq!(render(&m, |_| None, 1000), Err(QuicklookError::TooLarge { bytes: 2_000_000, max: 1000 }));
    let s = array("string", json!([2]), json!([2]), json!(""));
    assert!(matches!(render(&s, |_| None, 1000), Err(QuicklookError::NotNumeric(_))));
}

#[test]
fn a_chunk_that_decodes_past_its_size_is_refused() {
    let mut m = array("uint8", json!([16]), json!([16]), json!(0));
    m.insert("codecs".into(), json!([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]));
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    g.write_all(&[1u8; 1 << 20]).unwrap();
    let bomb = g.finish().unwrap();
    let err = render(&m, |_| Some(bomb.clone()), 1 << 20).unwrap_err();
    assert!(err.to_string().contains("codec gzip decodes to more than the 16 bytes"), "{err}");
}

#[test]
fn a_missing_chunk_is_all_fill() {
    let m = array("int16", json!([4, 4]), json!([2, 2]), json!(3));
    let q = render(&m, |_| None, 1000).unwrap();
    assert_eq!((q.min, q.max), (None, None));
}

#[test]
fn viridis_is_close_to_matplotlibs_table() {
    let near = |a: [u8; 3], b: [u8; 3]| a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 4);
    assert!(near(viridis(0.0), [68, 1, 84]), "{:?}", viridis(0.0));
    assert!(near(viridis(0.5), [33, 145, 140]), "{:?}", viridis(0.5));
    assert!(near(viridis(1.0), [253, 231, 37]), "{:?}", viridis(1.0));
}
