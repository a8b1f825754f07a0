//! Kerchunk parquet references (`kerchunk.df.refs_to_dataframe`, VirtualiZarr
//! `to_kerchunk(format="parquet")`) uploaded as a tar of their directory: detection, chunks read
//! back (virtual, inline, missing, whole-object, padding), the same store as the JSON form gives,
//! and archives that get a 422 naming what is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{TestServer, f32_bytes};
use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One row of a `refs.k.parq` file.
#[derive(Clone)]
enum Row {
    /// Missing chunk (and padding): `path` and `raw` null.
    Null,
    /// `[path, offset, size]`; offset and size both 0 is the whole object (`[path]`).
    Url(String, i64, i64),
    /// Inline bytes.
    Raw(Vec<u8>),
}

/// A parquet file with the schema kerchunk's `LazyReferenceMapper` writes (fastparquet, zstd), cut
/// into row groups of `group` rows, `path` dictionary-encoded or not.
fn refs_file(rows: &[Row], group: usize, dictionary: bool) -> Vec<u8> {
    let schema = parse_message_type(
        "message schema { OPTIONAL BYTE_ARRAY path (UTF8); REQUIRED INT64 offset; REQUIRED INT64 size; \
         OPTIONAL BYTE_ARRAY raw; }",
    )
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(dictionary)
        .build();
    let mut out = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut out, Arc::new(schema), Arc::new(props)).unwrap();
    for rows in rows.chunks(group) {
        let mut rg = writer.next_row_group().unwrap();
        let binary = |pick: &dyn Fn(&Row) -> Option<Vec<u8>>| {
            let defs: Vec<i16> = rows.iter().map(|r| i16::from(pick(r).is_some())).collect();
            let values: Vec<ByteArray> = rows.iter().filter_map(pick).map(ByteArray::from).collect();
            (defs, values)
        };
        let int = |pick: &dyn Fn(&Row) -> i64| rows.iter().map(pick).collect::<Vec<i64>>();
        let (defs, values) = binary(&|r| if let Row::Url(p, ..) = r { Some(p.as_bytes().to_vec()) } else { None });
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<ByteArrayType>().write_batch(&values, Some(&defs), None).unwrap();
        col.close().unwrap();
        for values in [
            int(&|r| if let Row::Url(_, o, _) = r { *o } else { 0 }),
            int(&|r| if let Row::Url(.., s) = r { *s } else { 0 }),
        ] {
            let mut col = rg.next_column().unwrap().unwrap();
            col.typed::<Int64Type>().write_batch(&values, None, None).unwrap();
            col.close().unwrap();
        }
        let (defs, values) = binary(&|r| if let Row::Raw(b) = r { Some(b.clone()) } else { None });
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<ByteArrayType>().write_batch(&values, Some(&defs), None).unwrap();
        col.close().unwrap();
        rg.close().unwrap();
    }
    writer.close().unwrap();
    out
}

/// A tar of `entries`, with POSIX (ustar) headers, or pre-POSIX ones that have no magic.
fn tar(entries: &[(&str, Vec<u8>)], ustar: bool) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data) in entries {
        let mut header = if ustar { tar::Header::new_ustar() } else { tar::Header::new_old() };
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, path, data.as_slice()).unwrap();
    }
    builder.into_inner().unwrap()
}

fn zarray(shape: Value, chunks: Value) -> Value {
    json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<f4", "fill_value": -1.0, "order": "C",
           "filters": null, "compressor": null, "dimension_separator": "."})
}

/// The v2 metadata of the tests, `"NAN"` standing for the bare `NaN` token Python writes.
fn metadata() -> Value {
    json!({
        ".zgroup": {"zarr_format": 2},
        ".zattrs": {"title": "parquet refs"},
        "air/.zarray": zarray(json!([4, 6]), json!([2, 2])),
        "air/.zattrs": {"_ARRAY_DIMENSIONS": ["lat", "lon"], "units": "K"},
        "lat/.zarray": zarray(json!([2]), json!([2])),
        "lat/.zattrs": {"_ARRAY_DIMENSIONS": ["lat"], "_FillValue": "NAN"},
    })
}

/// `.zmetadata` as `LazyReferenceMapper` writes it: metadata as objects, a bare `NaN`.
fn zmetadata(record_size: u64) -> Vec<u8> {
    json!({"metadata": metadata(), "record_size": record_size}).to_string().replace("\"NAN\"", "NaN").into_bytes()
}

/// Chunk `i` of `air` (4 floats).
fn chunk(i: usize) -> Vec<u8> {
    f32_bytes((0..4).map(|j| (i * 10 + j) as f32))
}

/// The reference set of the tests, as rows by array, and the same as kerchunk JSON.
///
/// `air` has a 2 x 3 chunk grid, in record files of 4 rows: `refs.0` holds chunks 0..4 (0.0 virtual,
/// 0.1 inline, 0.2 missing, 1.0 virtual in another file), `refs.1` chunks 4 and 5 (1.1 virtual,
/// 1.2 a whole object) and two padding rows. `lat` is one inline chunk.
fn references(server: &TestServer) -> (Vec<(&'static str, Vec<Row>)>, Value) {
    let a = server.write("a.bin", &[chunk(0), chunk(4)].concat());
    let b = server.write("b.bin", &[vec![7u8; 5], chunk(3)].concat());
    let c = server.write("sub/c.bin", &chunk(5));
    let lat = f32_bytes([10.0, 11.0]);
    let files = vec![
        (
            "air/refs.0.parq",
            vec![Row::Url(a.clone(), 0, 16), Row::Raw(chunk(1)), Row::Null, Row::Url(b.clone(), 5, 16)],
        ),
        ("air/refs.1.parq", vec![Row::Url(a.clone(), 16, 16), Row::Url(c.clone(), 0, 0), Row::Null, Row::Null]),
        ("lat/refs.0.parq", vec![Row::Raw(lat.clone()), Row::Null, Row::Null, Row::Null]),
    ];
    let b64 = |bytes: &[u8]| {
        use base64::Engine;
        format!("base64:{}", base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let mut refs = serde_json::Map::new();
    for (k, v) in metadata().as_object().unwrap() {
        refs.insert(k.clone(), Value::from(v.to_string().replace("\"NAN\"", "NaN")));
    }
    refs.insert("air/0.0".into(), json!([a, 0, 16]));
    refs.insert("air/0.1".into(), json!(b64(&chunk(1))));
    refs.insert("air/1.0".into(), json!([b, 5, 16]));
    refs.insert("air/1.1".into(), json!([a, 16, 16]));
    refs.insert("air/1.2".into(), json!([c]));
    refs.insert("lat/0".into(), json!(b64(&lat)));
    (files, json!({"version": 1, "refs": refs}))
}

/// The archive of `files` with `.zmetadata`, under `root/`, `.zmetadata` last so that the
/// parquet files before it wait for it.
fn archive(files: &[(&str, Vec<Row>)], root: &str, ustar: bool) -> Vec<u8> {
    let mut entries: Vec<(String, Vec<u8>)> = files
        .iter()
        .enumerate()
        .map(|(i, (name, rows))| (format!("{root}{name}"), refs_file(rows, if i == 0 { 3 } else { 4 }, i != 1)))
        .collect();
    entries.push((format!("{root}.zmetadata"), zmetadata(4)));
    let entries: Vec<(&str, Vec<u8>)> = entries.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    tar(&entries, ustar)
}

async fn put_tar(server: &TestServer, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let r = server
        .client
        .put(format!("{}{path}", server.url))
        .header("content-type", "application/x-tar")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

both_backends! {
    async fn registers_and_serves_parquet_references(server) {
        server.local_store().await;
        let (files, _) = references(&server);
        let (status, body) = put_tar(&server, "/api/v1/stores/pq", archive(&files, "air.kerchunk.parq/", true)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["chunks"], json!({"virtual": 4, "inline": 2, "assembled": 0, "missing": 1}));
        assert_eq!(body["arrays"], 2);

        let air: Value = server.get("/pq/air/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(air["dimension_names"], json!(["lat", "lon"]));
        assert_eq!(air["chunk_key_encoding"], json!({"name": "v2", "configuration": {"separator": "."}}));
        let lat: Value = server.get("/pq/lat/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(lat["attributes"]["_FillValue"], "AAAAAAAA+H8=", "the bare NaN of .zmetadata");
        let root: Value = server.get("/pq/zarr.json", &[]).await.json().await.unwrap();
        assert_eq!(root["attributes"]["title"], "parquet refs");

        for (key, i) in [("0.0", 0), ("0.1", 1), ("1.0", 3), ("1.1", 4), ("1.2", 5)] {
            assert_eq!(server.bytes(&format!("/pq/air/{key}")).await, chunk(i), "chunk {key}");
        }
        assert_eq!(server.get("/pq/air/0.2", &[]).await.status(), StatusCode::NOT_FOUND, "a null row is missing");
        assert_eq!(server.get("/pq/air/2.0", &[]).await.status(), StatusCode::NOT_FOUND, "padding is no chunk");
        assert_eq!(server.bytes("/pq/lat/0").await, f32_bytes([10.0, 11.0]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_store_as_the_json_references() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    server.local_store().await;
    let (files, json_refs) = references(&server);
    let (status, body) = server.put("/api/v1/stores/json", &json_refs).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // No leading directory, no Content-Type: detected by the tar magic.
    let (status, body) = server.put_raw("/api/v1/stores/pq", archive(&files, "", true)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let export = |name: &'static str| {
        let server = &server;
        async move {
            let r = server.get(&format!("/api/v1/stores/{name}/manifest"), &[]).await;
            assert_eq!(r.status(), StatusCode::OK);
            r.json::<Value>().await.unwrap()
        }
    };
    let (json_doc, pq_doc) = (export("json").await, export("pq").await);
    assert_eq!(json_doc, pq_doc, "parquet and JSON references give the same store");
    assert_eq!(pq_doc["nodes"]["air"]["manifest"].as_object().unwrap().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_forced_by_the_query() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    server.local_store().await;
    let (files, _) = references(&server);
    // A pre-POSIX tar has no magic: without the query it is read as JSON, and refused.
    let old = archive(&files, "./", false);
    let (status, body) = server.put_raw("/api/v1/stores/old", old.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "not JSON: {body}");
    let (status, body) = server.put_raw("/api/v1/stores/old?format=kerchunk-parquet", old).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(server.bytes("/old/air/1.1").await, chunk(4));
    let (status, body) = server.put_raw("/api/v1/stores/old?format=parquet", vec![]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("kerchunk-parquet"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_archives_are_refused_and_change_nothing() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    server.local_store().await;
    let (files, _) = references(&server);
    assert_eq!(put_tar(&server, "/api/v1/stores/pq", archive(&files, "", true)).await.0, StatusCode::CREATED);
    let version = server.get("/pq/zarr.json", &[]).await.headers()["zarrgate-version"].to_str().unwrap().to_owned();

    // A corrupt parquet file, and a row pointing outside the object stores: both named.
    let mut outside = files[1].1.clone();
    outside[0] = Row::Url("/elsewhere/x.nc".into(), 0, 4);
    let mut corrupt = refs_file(&files[2].1, 4, true);
    corrupt.truncate(corrupt.len() / 2);
    let body = tar(
        &[
            ("refs/.zmetadata", zmetadata(4)),
            ("refs/lat/refs.0.parq", corrupt),
            ("refs/air/refs.0.parq", refs_file(&files[0].1, 4, true)),
            ("refs/air/refs.1.parq", refs_file(&outside, 4, true)),
        ],
        true,
    );
    let (status, answer) = put_tar(&server, "/api/v1/stores/pq", body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let problems = answer["problems"].to_string();
    assert!(problems.contains("lat/refs.0.parq: not a valid kerchunk parquet file"), "{problems}");
    assert!(problems.contains("file:///elsewhere/x.nc is not under any registered object store"), "{problems}");
    assert_eq!(answer["type"], "urn:zarrgate:problem:invalid");

    // No .zmetadata.
    let parquet_only: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, rows)| (*n, refs_file(rows, 4, true))).collect();
    let (status, answer) = put_tar(&server, "/api/v1/stores/pq", tar(&parquet_only, true)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(answer["detail"].as_str().unwrap().contains("has no .zmetadata"), "{answer}");

    // A truncated archive.
    let mut cut = archive(&files, "", true);
    cut.truncate(700);
    let (status, answer) = put_tar(&server, "/api/v1/stores/pq", cut).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "not a tar archive: {answer}");
    assert!(answer["detail"].as_str().unwrap().contains("not a valid tar archive"), "{answer}");

    let now = server.get("/pq/zarr.json", &[]).await.headers()["zarrgate-version"].to_str().unwrap().to_owned();
    assert_eq!(now, version, "the store is unchanged");
    assert_eq!(server.bytes("/pq/air/1.1").await, chunk(4));
}
