//! The quick look as an overview: a whole 2-D slice drawn from its chunks (a strided subset of
//! at most 32 when it spans more), packed values unpacked, CF missing values masked, the units
//! and the coordinate ranges of its axes in its JSON and caption, numbers to four digits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine;
use common::{Backend, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn array(data_type: &str, shape: &[u64], chunks: &[u64], dims: &[&str], extra: Value) -> Value {
    let mut node = json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "dimension_names": dims});
    for (k, v) in extra.as_object().unwrap() {
        node[k] = v.clone();
    }
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_look_is_an_overview_of_the_whole_slice_with_its_axes_and_units() {
    let server = TestServer::start(Backend::Sqlite).await;
    // t (2) x lat (4) x lon (6) packed int16, chunks of 1 x 2 x 3: the first slice spans four
    // chunks; the last is missing. -32767 is CF's missing value (xarray's base64 form).
    let chunk = |base: i16| -> String {
        let values: Vec<u8> = (0..6).flat_map(|i| if i == 4 { -32767i16 } else { base + i }.to_le_bytes()).collect();
        b64(&values)
    };
    let f64s = |v: &[f64]| b64(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let doc = json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group"},
        "t2m": array("int16", &[2, 4, 6], &[1, 2, 3], &["time", "lat", "lon"], json!({
            "attributes": {"scale_factor": 0.01, "add_offset": 273.15, "units": "K",
                           "_FillValue": b64(&(-32767i16).to_le_bytes())},
            "manifest": {"0.0.0": {"data": chunk(100)}, "0.0.1": {"data": chunk(200)},
                         "0.1.0": {"data": chunk(300)}}})),
        "lat": array("float64", &[4], &[4], &["lat"], json!({"manifest": {"0": {"data": f64s(&[90.0, 30.0, -30.0, -90.0])}}})),
        "lon": array("float64", &[6], &[3], &["lon"], json!({"manifest": {
            "0": {"data": f64s(&[0.0, 60.0, 120.0])}, "1": {"data": f64s(&[180.0, 240.0, 300.0])}}})),
        "big": array("uint8", &[1000, 1000], &[10, 10], &["y", "x"], json!({})),
    }});
    let (status, body) = server.put("/api/v1/stores/era", &doc).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let q: Value = server.get("/era/t2m/?quicklook=json", &[]).await.json().await.unwrap();
    assert_eq!(q["plane"], json!([4, 6]), "{q}");
    assert_eq!((q["chunks_read"].as_u64(), q["chunks_spanned"].as_u64()), (Some(4), Some(4)), "{q}");
    // Unpacked: 100 * 0.01 + 273.15 up to 305 * 0.01 + 273.15; -32767 masked.
    let (min, max) = (q["min"].as_f64().unwrap(), q["max"].as_f64().unwrap());
    assert!((min - 274.15).abs() < 1e-9 && (max - 276.2).abs() < 1e-9, "{q}");
    assert_eq!(q["units"], "K");
    assert_eq!(q["axes"]["rows"], json!({"name": "lat", "first": 90.0, "last": -90.0}), "{q}");
    assert_eq!(q["axes"]["columns"], json!({"name": "lon", "first": 0.0, "last": 300.0}), "{q}");
    assert_eq!(q["caption"], "274.1 \u{2013} 276.2 K; rows: lat 90 \u{2026} -90, columns: lon 0 \u{2026} 300", "{q}");
    let png = server.get("/era/t2m/?quicklook=png", &[]).await;
    assert_eq!(png.status(), StatusCode::OK);

    // A slice of 10,000 chunks: at most 32 of them read (5 rows x 6 columns of chunks), and the
    // caption says so.
    let big: Value = server.get("/era/big/?quicklook=json", &[]).await.json().await.unwrap();
    assert_eq!((big["chunks_read"].as_u64(), big["chunks_spanned"].as_u64()), (Some(30), Some(10_000)), "{big}");
    assert!(big["caption"].as_str().unwrap().contains("drawn from 30 of the slice's 10000 chunks"), "{big}");
    assert_eq!(big["axes"]["rows"], Value::Null);
}
