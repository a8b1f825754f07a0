//! Format `files`: a netCDF4, a netCDF3 and an HDF5 file (written by netCDF4-python, scipy and
//! h5py: `tests/fixtures/files/make_server.py`) registered by their URL, read by the server
//! itself, and read back by zarrs over HTTP as a Rust user would: the numbers are the files'.
//! Several copies of one joined (`combine`) read as the joined array. Against SQLite and
//! PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Value, json};
use zarrs::array::{Array, ArraySubset};
use zarrs_object_store::AsyncObjectStore;
use zarrs_object_store::object_store::http::{HttpBuilder, HttpStore};
use zarrs_object_store::object_store::{ClientOptions, RetryConfig};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/files");

/// zarrs' view of the zarrgate store `name`, over HTTP.
fn http_store(server: &TestServer, name: &str) -> Arc<AsyncObjectStore<HttpStore>> {
    let http = HttpBuilder::new()
        .with_url(format!("{}/{name}/", server.url))
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .with_retry(RetryConfig { max_retries: 1, ..Default::default() })
        .build()
        .unwrap();
    Arc::new(AsyncObjectStore::new(http))
}

/// Copies fixture `file` under the server's `local` object store and registers it as store
/// `name` with `?format=files`; the answer.
async fn register(server: &TestServer, name: &str, file: &str, parser: &str) -> Value {
    server.local_store().await;
    let path = server.write(file, &std::fs::read(format!("{FIXTURES}/{file}")).unwrap());
    let body = json!({"files": [format!("file://{path}")], "parser": parser});
    let (status, answer) = server.put(&format!("/api/v1/stores/{name}?format=files"), &body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer
}

/// Every element of array `path` of store `name`, as zarrs reads them.
async fn read_all<T: zarrs::array::ElementOwned>(server: &TestServer, name: &str, path: &str) -> (Vec<u64>, Vec<T>) {
    let array = Array::async_open(http_store(server, name), path).await.unwrap_or_else(|e| panic!("{path}: {e}"));
    let values: Vec<T> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    (array.shape().to_vec(), values)
}

both_backends! {
    async fn zarrs_reads_a_netcdf4_file_the_server_read(server) {
        let answer = register(&server, "air", "server_air.nc", "auto").await;
        assert_eq!(answer["files"]["files"][0]["parser"], "hdf5", "{answer}");
        assert_eq!(answer["chunks"]["virtual"].as_u64(), Some(8 + 1), "air's 8 chunks and lat's one: {answer}");
        let (shape, air) = read_all::<f32>(&server, "air", "/air").await;
        assert_eq!(shape, [4, 5, 6]);
        assert_eq!(air, (0..120).map(|i| i as f32).collect::<Vec<_>>());
        let (_, lat) = read_all::<f64>(&server, "air", "/lat").await;
        assert_eq!(lat, [0.0, 1.0, 2.0, 3.0, 4.0]);
        // one corner, through a partial edge chunk
        let array = Array::async_open(http_store(&server, "air"), "/air").await.unwrap();
        let corner: Vec<f32> = array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&[3..4, 4..5, 5..6])).await.unwrap();
        assert_eq!(corner, [119.0]);
    }

    async fn zarrs_reads_netcdf3_records_the_server_laid_out(server) {
        let answer = register(&server, "rec", "server_record.nc", "netcdf3").await;
        assert_eq!(answer["files"]["files"][0]["parser"], "netcdf3", "{answer}");
        let (shape, temp) = read_all::<i16>(&server, "rec", "/temp").await;
        assert_eq!(shape, [5, 3]);
        assert_eq!(temp, (0..15).collect::<Vec<i16>>());
        let (_, fixed) = read_all::<f64>(&server, "rec", "/fixed").await;
        assert_eq!(fixed, [0.0, 1.0, 2.0]);
        let (_, other) = read_all::<f32>(&server, "rec", "/other").await;
        assert_eq!(other, [-1.0; 5]);
    }

    async fn zarrs_reads_an_hdf5_v1_btree_the_server_walked(server) {
        register(&server, "old", "server_btree.h5", "hdf5").await;
        let (shape, v) = read_all::<u16>(&server, "old", "/v").await;
        assert_eq!(shape, [10]);
        assert_eq!(v, (0..10).collect::<Vec<u16>>());
    }

    async fn a_file_that_is_not_one_changes_nothing(server) {
        register(&server, "kept", "server_btree.h5", "hdf5").await;
        let path = server.write("fake.nc", b"CDF\x01\xff\xff\xff\xffnot really a netCDF file");
        let body = json!({"files": [format!("file://{path}")]});
        let (status, answer) = server.put("/api/v1/stores/kept?format=files", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
        assert!(answer["detail"].as_str().unwrap().contains("fake.nc"), "{answer}");
        let (_, v) = read_all::<u16>(&server, "kept", "/v").await;
        assert_eq!(v, (0..10).collect::<Vec<u16>>(), "the store serves what it served before");
        let failed = server.metric_sum("zarrgate_parse_files_total", &[("parser", "netcdf3"), ("outcome", "invalid")]).await;
        assert_eq!(failed, 1.0);
    }

    async fn zarrs_reads_files_joined_along_time_and_stacked_as_runs(server) {
        server.local_store().await;
        let bytes = std::fs::read(format!("{FIXTURES}/server_air.nc")).unwrap();
        let files: Vec<String> = ["fc_20240101_00.nc", "fc_20240101_12.nc"]
            .iter()
            .map(|name| format!("file://{}", server.write(&format!("runs/{name}"), &bytes)))
            .collect();
        let along = json!({"files": files, "combine": {"join": "existing", "dim": "time"}});
        let (status, answer) = server.put("/api/v1/stores/along?format=files", &along).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        assert_eq!(answer["chunks"]["virtual"].as_u64(), Some(2 * 8 + 1), "{answer}");
        let (shape, air) = read_all::<f32>(&server, "along", "/air").await;
        assert_eq!(shape, [8, 5, 6]);
        let once: Vec<f32> = (0..120).map(|i| i as f32).collect();
        assert_eq!(air, [once.clone(), once.clone()].concat());

        let prefix = files[0].rsplit_once('/').unwrap().0.to_owned() + "/";
        let runs = json!({"files": {"prefix": prefix, "glob": "fc_*.nc"},
            "combine": {"join": "new", "dim": "run", "pattern": "(\\d{8})_(\\d{2})", "format": "%Y%m%d%H"}});
        let (status, answer) = server.put("/api/v1/stores/runs?format=files", &runs).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let (shape, air) = read_all::<f32>(&server, "runs", "/air").await;
        assert_eq!(shape, [2, 4, 5, 6]);
        assert_eq!(air, [once.clone(), once].concat());
        let (_, run) = read_all::<i64>(&server, "runs", "/run").await;
        assert_eq!(run, [1_704_067_200, 1_704_067_200 + 12 * 3600]);

        // The summary lists the files a page at a time.
        let listed = |answer: &Value| -> Vec<String> {
            answer["files"]["files"].as_array().unwrap().iter().map(|f| f["url"].as_str().unwrap().to_owned()).collect()
        };
        let all: Value = server.get("/api/v1/stores/along", &[]).await.json().await.unwrap();
        assert_eq!(listed(&all), files);
        assert!(all["files"].get("files_total").is_none(), "every file is listed: {all}");
        let second: Value = server.get("/api/v1/stores/along?files_offset=1&files_limit=1", &[]).await.json().await.unwrap();
        assert_eq!(listed(&second), files[1..]);
        assert_eq!((second["files"]["files_total"].as_u64(), second["files"]["files_offset"].as_u64()), (Some(2), Some(1)));
        let refused = server.get("/api/v1/stores/along?files_limit=10001", &[]).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert!(refused.text().await.unwrap().contains("page through the files with files_offset"));
    }
}

both_backends! {
    async fn zarrs_reads_chunks_assembled_at_the_seams_as_the_joined_array(server) {
        server.local_store().await;
        // Two copies of air(time 4, lat 5, lon 6) chunked (2, 3, 4), joined along lat: each file's
        // lat chunk 1 holds 2 rows and a row of padding, so joined chunks 1 to 3 along lat span a
        // seam or start inside a file's chunk, and are assembled.
        let bytes = std::fs::read(format!("{FIXTURES}/server_air.nc")).unwrap();
        let files: Vec<String> =
            ["a.nc", "b.nc"].iter().map(|name| format!("file://{}", server.write(&format!("lat/{name}"), &bytes))).collect();
        let body = json!({"files": files, "combine": {"join": "existing", "dim": "lat"}});
        let (status, answer) = server.put("/api/v1/stores/seams?format=files", &body).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        // air: 2 x 4 x 2 chunks; along lat chunk 0 is the first file's, 1-3 assembled (2 x 3 x 2).
        assert_eq!(answer["chunks"]["assembled"].as_u64(), Some(12), "{answer}");
        assert_eq!(answer["chunks"]["virtual"].as_u64(), Some(4), "air's first lat chunks: {answer}");
        assert_eq!(answer["chunks"]["inline"].as_u64(), Some(1), "lat, read and concatenated: {answer}");
        let once: Vec<f32> = (0..120).map(|i| i as f32).collect();
        let joined: Vec<f32> = (0..4 * 10 * 6)
            .map(|i| {
                let (t, y, x) = (i / 60, (i / 6) % 10, i % 6);
                once[t * 30 + (y % 5) * 6 + x]
            })
            .collect();
        let (shape, air) = read_all::<f32>(&server, "seams", "/air").await;
        assert_eq!(shape, [4, 10, 6]);
        assert_eq!(air, joined);
        // One assembled chunk on its own: (time 2-3, lat 6-8, lon 4-5), the second file's lat 1-3.
        let array = Array::async_open(http_store(&server, "seams"), "/air").await.unwrap();
        let chunk: Vec<f32> = array.async_retrieve_chunk(&[1, 2, 1]).await.unwrap();
        // Past the array's end along lon (4 and 5 of the chunk) is padding, whatever the files hold.
        let inside = |i: usize| 4 + i % 4 < 6;
        let expected: Vec<f32> = (0..2 * 3 * 4)
            .filter(|i| inside(*i))
            .map(|i| joined[(2 + i / 12) * 60 + (6 + (i / 4) % 3) * 6 + 4 + i % 4])
            .collect();
        let read: Vec<f32> = chunk.iter().enumerate().filter(|(i, _)| inside(*i)).map(|(_, v)| *v).collect();
        assert_eq!(read, expected);
        let built = server.metric_sum("zarrgate_assembled_chunks_total", &[("outcome", "ok")]).await;
        assert_eq!(built, 12.0, "each assembled chunk built once, then served from memory");
        let (_, lat) = read_all::<f64>(&server, "seams", "/lat").await;
        assert_eq!(lat, [0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
    }
}

/// A file whose metadata needs more than `files.max_read_bytes` is refused, naming the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_past_its_read_budget_is_refused_naming_the_bound() {
    let server = TestServer::start_with(common::Backend::Sqlite, |c| {
        c.files.first_read_bytes = 4096;
        c.files.read_ahead_bytes = 4096;
        c.files.max_read_bytes = 6000;
    })
    .await;
    server.local_store().await;
    let path = server.write("air.nc", &std::fs::read(format!("{FIXTURES}/server_air.nc")).unwrap());
    let body = json!({"files": [format!("file://{path}")]});
    let (status, answer) = server.put("/api/v1/stores/big?format=files", &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.contains("files.max_read_bytes = 6000") && detail.contains("air.nc"), "{detail}");
    assert_eq!(server.get("/api/v1/stores/big", &[]).await.status(), StatusCode::NOT_FOUND);
}

/// A join whose files would hold more memory than `ingest.memory_bytes` allows is refused,
/// naming the bound, before any file is read, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_past_the_memory_bound_is_refused_naming_it() {
    let server = TestServer::start_with(common::Backend::Sqlite, |c| c.ingest.memory_bytes = 4096).await;
    server.local_store().await;
    let bytes = std::fs::read(format!("{FIXTURES}/server_air.nc")).unwrap();
    let files: Vec<String> =
        (0..20).map(|i| format!("file://{}", server.write(&format!("many/{i:02}.nc"), &bytes))).collect();
    let body = json!({"files": files, "combine": {"join": "existing", "dim": "time"}});
    let (status, answer) = server.put("/api/v1/stores/many?format=files", &body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(
        detail.contains("the 20 files listed would hold at least")
            && detail.contains("past ingest.memory_bytes = 4096"),
        "{detail}"
    );
    assert_eq!(server.get("/api/v1/stores/many", &[]).await.status(), StatusCode::NOT_FOUND);
    let parsed = server.metric_sum("zarrgate_parse_files_total", &[]).await;
    assert_eq!(parsed, 0.0, "refused from the listing, before any file is read");
    // Within the bound, the same server joins a few of them.
    let body = json!({"files": &files[..3], "combine": {"join": "existing", "dim": "time"}});
    let (status, answer) = server.put("/api/v1/stores/few?format=files", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["sources"].as_u64(), Some(3), "{answer}");
}
