//! Kerchunk references over the API: detection, conversion, `[url]` lengths, export and
//! re-import, and bad documents that get a 4xx naming the problem and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestServer, f32_bytes};
use proptest::prelude::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn zarray(shape: Value, chunks: Value, extra: Value) -> String {
    let mut z = json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<f4", "fill_value": -1.0, "order": "C",
                       "filters": null, "compressor": null, "dimension_separator": "."});
    for (k, v) in extra.as_object().unwrap() {
        z[k] = v.clone();
    }
    z.to_string()
}

/// A kerchunk v1 document: `t` (8 floats, chunks of 4) from a source file, `lat` inline.
fn refs(server: &TestServer) -> Value {
    let path = server.write("t.bin", &f32_bytes((0..8).map(|i| i as f32)));
    json!({"version": 1, "refs": {
        ".zgroup": "{\"zarr_format\": 2}",
        ".zattrs": "{\"title\": \"kerchunk\"}",
        "t/.zarray": zarray(json!([8]), json!([4]), json!({})),
        "t/.zattrs": "{\"_ARRAY_DIMENSIONS\": [\"time\"], \"units\": \"K\"}",
        "t/0": [path, 0, 16],
        "t/1": [path, 16, 16],
        "lat/.zarray": zarray(json!([2]), json!([2]), json!({"fill_value": null})),
        "lat/.zattrs": "{\"_ARRAY_DIMENSIONS\": [\"lat\"], \"_FillValue\": NaN}",
        "lat/0": "base64:AAAgQQAAMEE=",
    }})
}

both_backends! {
    async fn registers_and_serves_kerchunk(server) {
        server.local_store().await;
        let (status, body) = server.put("/api/v1/stores/k", &refs(&server)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["chunks"], json!({"virtual": 2, "inline": 1, "assembled": 0, "missing": 0}));
        let t: Value = server.get("/k/t/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(t["dimension_names"], json!(["time"]));
        assert_eq!(t["chunk_key_encoding"], json!({"name": "v2", "configuration": {"separator": "."}}));
        assert_eq!(t["attributes"], json!({"units": "K", "_FillValue": "AAAAAAAA8L8="}), "v2 fill value declared for xarray");
        assert_eq!(server.bytes("/k/t/1").await, f32_bytes([4.0, 5.0, 6.0, 7.0]));
        assert_eq!(server.bytes("/k/lat/0").await, f32_bytes([10.0, 11.0]));
        let root: Value = server.get("/k/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(root["attributes"]["title"], "kerchunk");
    }

    async fn kerchunk_export_round_trips(server) {
        server.local_store().await;
        assert_eq!(server.put("/api/v1/stores/k", &refs(&server)).await.0, StatusCode::CREATED);
        let exported: Value = server.get("/api/v1/stores/k/manifest?format=kerchunk", &[]).await.json().await.unwrap();
        assert_eq!(exported["version"], 1);
        assert_eq!(exported["refs"]["t/1"][1], 16);
        assert_eq!(exported["refs"]["lat/0"], "base64:AAAgQQAAMEE=");
        let (status, body) = server.put("/api/v1/stores/copy", &exported).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        for key in ["zarr.json", "t/zarr.json", "t/0", "t/1", "lat/zarr.json", "lat/0"] {
            assert_eq!(server.bytes(&format!("/k/{key}")).await, server.bytes(&format!("/copy/{key}")).await, "{key}");
        }
        let again: Value = server.get("/api/v1/stores/copy/manifest?format=kerchunk", &[]).await.json().await.unwrap();
        assert_eq!(again, exported);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_zero_whole_objects_and_forced_formats() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    server.local_store().await;
    let a = server.write("whole/a.bin", &f32_bytes([1.0, 2.0]));
    let doc = json!({
        "x/.zarray": zarray(json!([4]), json!([2]), json!({"dimension_separator": "/"})),
        "x/0": [a],
        "x/1": [format!("file://{}", server.write("whole/b.bin", &f32_bytes([3.0, 4.0])))],
    });
    let (status, body) = server.put("/api/v1/stores/v0", &doc).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["referenced_bytes"], 16, "[url] lengths asked of the object store");
    assert_eq!(server.bytes("/v0/x/1").await, f32_bytes([3.0, 4.0]));
    assert_eq!(server.head("/v0/x/0").await.headers()["content-length"], "8");

    let (status, body) = server.put("/api/v1/stores/v0?format=native", &doc).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = server.put("/api/v1/stores/v0?format=parquet-please", &doc).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = server.put("/api/v1/stores/v0-forced?format=kerchunk", &doc).await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_kerchunk_changes_nothing() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    server.local_store().await;
    let good = refs(&server);
    assert_eq!(server.put("/api/v1/stores/k", &good).await.0, StatusCode::CREATED);
    let before = server.bytes("/k/t/0").await;

    // A structured dtype has no Zarr v3 form (an unknown codec is converted: src/zarr/codecs.rs).
    let mut structured = good.clone();
    structured["refs"]["t/.zarray"] = json!(zarray(json!([8]), json!([4]), json!({"dtype": [["a", "<f4"]]})));
    structured["refs"]["t/9"] = json!(["/elsewhere/x.nc", 0, 4]);
    structured["refs"]["lat/0"] = json!(["/no/such/whole.nc"]);
    structured["refs"]["gone/0"] = json!([server.data.join("missing.bin").display().to_string()]);
    structured["refs"]["gone/.zarray"] = json!(zarray(json!([2]), json!([2]), json!({})));
    let (status, body) = server.put("/api/v1/stores/k", &structured).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let problems = body["problems"].to_string();
    assert!(problems.contains(r#"array \"t\""#) && problems.contains("structured dtypes"), "{problems}");
    assert!(
        problems.contains("missing.bin cannot be read") && problems.contains("its object's length is unknown"),
        "{problems}"
    );
    assert!(problems.contains("file:///no/such/whole.nc is not under any registered object store"), "{problems}");
    assert_eq!(server.bytes("/k/t/0").await, before);

    let sharded = json!({"nodes": {"s": {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}}, "chunk_key_encoding": {"name": "default"},
        "fill_value": 0, "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [{"name": "bytes"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}], "index_location": "end"}}]}}});
    assert_eq!(server.put("/api/v1/stores/sharded", &sharded).await.0, StatusCode::CREATED);
    let r = server.get("/api/v1/stores/sharded/manifest?format=kerchunk", &[]).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = r.json().await.unwrap();
    assert!(body["problems"][0].as_str().unwrap().contains("sharding_indexed"), "{body}");
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[a-z0-9:/._{}-]{0,12}".prop_map(Value::from),
        "base64:[A-Za-z0-9+/=]{0,12}".prop_map(Value::from),
        ("/[a-z]{1,5}", 0u64..1_000_000, 0u64..1_000_000).prop_map(|(u, o, l)| json!([u, o, l])),
        ("/[a-z]{1,5}").prop_map(|u| json!([u])),
        Just(json!([])),
        Just(json!(null)),
        any::<i64>().prop_map(|n| json!([n, n, n])),
        Just(Value::from(zarray(json!([4]), json!([2]), json!({})))),
        Just(Value::from(zarray(json!([4, 4]), json!([2, 3]), json!({"dimension_separator": "/", "order": "F"})))),
        Just(Value::from(zarray(json!([]), json!([]), json!({"dtype": "<i8"})))),
        Just(Value::from("{\"zarr_format\": 2}")),
        Just(Value::from("{\"_ARRAY_DIMENSIONS\": [\"x\"], \"_FillValue\": NaN}")),
        Just(Value::from("{not json")),
        Just(json!({"zarr_format": 3, "node_type": "group"})),
        // Codecs, byte orders, strings, fill values as kerchunk and VirtualiZarr write them.
        Just(Value::from(zarray(
            json!([6]),
            json!([3]),
            json!({"dtype": ">i2", "fill_value": -32767,
            "filters": [{"id": "shuffle", "elementsize": 2}], "compressor": {"id": "zlib", "level": 4}})
        ))),
        Just(Value::from(zarray(
            json!([6]),
            json!([3]),
            json!({"compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}})
        ))),
        Just(Value::from(zarray(json!([6]), json!([3]), json!({"compressor": {"id": "lzma"}})))),
        Just(Value::from(zarray(json!([3]), json!([3]), json!({"dtype": "|S4", "fill_value": null})))),
        Just(Value::from(zarray(
            json!([3]),
            json!([3]),
            json!({"dtype": "|O", "filters": [{"id": "vlen-utf8"}], "fill_value": null})
        ))),
        Just(Value::from(zarray(json!([3]), json!([3]), json!({"dtype": "<M8[ns]", "fill_value": null})))),
        Just(Value::from(
            r#"{"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8", "fill_value": NaN, "order": "C", "filters": null, "compressor": null}"#
        )),
        Just(Value::from(
            r#"{"_ARRAY_DIMENSIONS": ["x"], "scale_factor": 0.5, "_FillValue": -Infinity, "missing_value": [1, 2]}"#
        )),
        "\\{\\{[a-z]{1,3}\\}\\}/[a-z]{1,4}".prop_map(|u| json!([u, 0, 4])),
        ("[0-9]{1,20}", "[0-9]{1,20}").prop_map(|(o, l)| json!(["/x", o, l])),
    ]
}

/// Version 1 extras: templates and generators, valid or not.
fn extras() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({})),
        Just(json!({"templates": {"u": "/data"}})),
        Just(json!({"templates": {"u": 5}})),
        Just(json!({"gen": [{"key": "a/{{i}}", "url": "{{u}}/f{{i}}.nc", "offset": "{{i * 4}}", "length": "4",
                             "dimensions": {"i": {"start": 0, "stop": 3}}}], "templates": {"u": "/data"}})),
        Just(json!({"gen": [{"key": "a/{{i}}", "url": "/f.nc", "dimensions": {"i": 1000000000}}]})),
        Just(json!({"gen": "nope"})),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(".zgroup".to_owned()),
        Just(".zattrs".to_owned()),
        Just("a/.zarray".to_owned()),
        Just("a/.zattrs".to_owned()),
        Just("a/b/.zarray".to_owned()),
        Just(".zmetadata".to_owned()),
        Just("a/zarr.json".to_owned()),
        "a/[0-9]{1,2}",
        "a/[0-9]{1,2}[./][0-9]",
        "a/b/[0-9./]{0,4}",
        "[a-z./_]{0,6}",
    ]
}

/// Any kerchunk-shaped document gets a 2xx or a 4xx with a problem body, never a 5xx; a
/// registered one serves its metadata.
fn fuzz_registration(server: TestServer, rt: &tokio::runtime::Runtime, cases: u32) {
    rt.block_on(server.local_store());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    let strategy = (proptest::collection::btree_map(key(), value(), 0..10), any::<bool>(), extras());
    runner
        .run(&strategy, |(refs, v1, extras)| {
            let body = if v1 {
                let mut doc = json!({"version": 1, "refs": refs});
                for (k, v) in extras.as_object().into_iter().flatten() {
                    doc[k] = v.clone();
                }
                doc
            } else {
                Value::Object(refs.into_iter().collect())
            };
            let (status, answer) = rt.block_on(server.put("/api/v1/stores/fuzz?format=kerchunk", &body));
            prop_assert!(status.is_success() || status.is_client_error(), "{status} {answer} for {body}");
            if status.is_client_error() {
                prop_assert!(answer["detail"].is_string(), "{answer}");
            } else {
                let root = rt.block_on(server.get("/fuzz/zarr.json", &[]));
                prop_assert_eq!(root.status(), StatusCode::OK);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn any_kerchunk_document_is_accepted_or_refused_never_a_server_error_sqlite() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = rt.block_on(TestServer::start(common::Backend::Sqlite));
    fuzz_registration(server, &rt, 128);
}

#[test]
fn any_kerchunk_document_is_accepted_or_refused_never_a_server_error_postgres() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let Some(server) = rt.block_on(TestServer::start_postgres()) else { return };
    fuzz_registration(server, &rt, 48);
}
