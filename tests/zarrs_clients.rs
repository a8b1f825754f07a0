//! zarrs writes, zarrgate serves, zarrs reads: arrays written by zarrs into a local
//! `FilesystemStore` are registered as native manifests pointing at the chunk files zarrs wrote,
//! then read back by zarrs over HTTP (zarrs_object_store over object_store's `HttpStore`), the way
//! a Rust user would. Every case compares the values read with the values written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use common::TestServer;
use reqwest::StatusCode;
use serde_json::{Map, Value, json};
use zarrs::array::chunk_key_encoding::V2ChunkKeyEncoding;
use zarrs::array::codec::{GzipCodec, ZstdCodec};
use zarrs::array::{
    Array, ArrayBuilder, ArraySubset, AsyncArrayShardedReadableExt, AsyncArrayShardedReadableExtCache,
    ChunkKeySeparator, CodecOptions, data_type,
};
use zarrs::filesystem::FilesystemStore;
use zarrs::group::{Group, GroupBuilder};
use zarrs_object_store::AsyncObjectStore;
use zarrs_object_store::object_store::http::{HttpBuilder, HttpStore};
use zarrs_object_store::object_store::{ClientOptions, RetryConfig};

/// What zarrs reads through.
type HttpZarr = AsyncObjectStore<HttpStore>;

/// A zarrs `FilesystemStore` in a fresh directory under the server's data directory (which the
/// `local` object store serves as `file://`).
fn fs_store(server: &TestServer, name: &str) -> (PathBuf, Arc<FilesystemStore>) {
    let root = server.data.join(format!("{name}.zarr"));
    std::fs::create_dir_all(&root).unwrap();
    let store = Arc::new(FilesystemStore::new(&root).unwrap());
    (root, store)
}

/// zarrs builds the array at `path`, stores its metadata and writes `values` over the whole array.
fn write_f32(
    store: &Arc<FilesystemStore>,
    path: &str,
    builder: &ArrayBuilder,
    values: &[f32],
) -> Array<FilesystemStore> {
    let array = builder.build(store.clone(), path).unwrap();
    array.store_metadata().unwrap();
    array.store_array_subset(&array.subset_all(), values.to_vec()).unwrap();
    array
}

/// Every index of a chunk grid, row-major; a 0-d grid has one chunk with no indices.
fn grid_indices(grid: &[u64]) -> Vec<Vec<u64>> {
    let mut out = vec![vec![]];
    for &n in grid {
        out = out.into_iter().flat_map(|prefix| (0..n).map(move |i| [prefix.clone(), vec![i]].concat())).collect();
    }
    out
}

/// The node's `zarr.json` exactly as zarrs wrote it.
fn zarr_json(root: &Path, node: &str) -> Value {
    let file = if node.is_empty() { root.join("zarr.json") } else { root.join(node).join("zarr.json") };
    serde_json::from_slice(&std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))).unwrap()
}

/// The manifest key of a chunk: grid indices joined by `.`, `""` for a 0-d array.
fn manifest_key(indices: &[u64]) -> String {
    indices.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

/// The native node of `array`: its `zarr.json` plus a manifest pointing at every chunk file zarrs
/// wrote, except the chunks in `leave_out`.
fn array_node(root: &Path, array: &Array<FilesystemStore>, leave_out: &[&[u64]]) -> Value {
    let node = array.path().as_str().trim_start_matches('/').to_owned();
    let mut doc = zarr_json(root, &node);
    let mut manifest = Map::new();
    for indices in grid_indices(array.chunk_grid_shape()) {
        if leave_out.contains(&indices.as_slice()) {
            continue;
        }
        let file = root.join(array.chunk_key(&indices).as_str());
        if let Ok(meta) = std::fs::metadata(&file) {
            manifest.insert(
                manifest_key(&indices),
                json!({"path": file.display().to_string(), "offset": 0, "length": meta.len()}),
            );
        }
    }
    doc["manifest"] = Value::Object(manifest);
    doc
}

/// Registers the `local` object store (once) and the store `name` from `nodes`; checks the
/// number of virtual chunks the server counted; returns the version.
async fn register(server: &TestServer, name: &str, nodes: Value, virtual_chunks: u64) -> i64 {
    local_object_store(server).await;
    let (status, body) = server.put(&format!("/api/v1/stores/{name}"), &json!({"nodes": nodes})).await;
    assert_eq!(status, StatusCode::CREATED, "registering {name}: {body}");
    assert_eq!(body["chunks"]["virtual"].as_u64(), Some(virtual_chunks), "{body}");
    body["version"].as_i64().unwrap_or_else(|| panic!("no version in {body}"))
}

/// Registers the `local` object store, the server's data directory (once).
async fn local_object_store(server: &TestServer) {
    let (status, body) = server
        .put(
            "/api/v1/object-stores/local",
            &json!({"url": url::Url::from_directory_path(&server.data).unwrap().as_str()}),
        )
        .await;
    assert!(status.is_success() || status == StatusCode::CONFLICT, "{status} {body}");
}

/// zarrs' view of the zarrgate store `name`, over HTTP.
fn http_store(server: &TestServer, name: &str) -> Arc<HttpZarr> {
    let http = HttpBuilder::new()
        .with_url(format!("{}/{name}/", server.url))
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .with_retry(RetryConfig { max_retries: 1, ..Default::default() })
        .build()
        .unwrap();
    Arc::new(AsyncObjectStore::new(http))
}

/// The elements of `values` (an array of `shape`, row-major) inside `ranges`.
fn region(values: &[f32], shape: &[u64], ranges: &[std::ops::Range<u64>]) -> Vec<f32> {
    let strides: Vec<u64> = (0..shape.len()).map(|d| shape[d + 1..].iter().product()).collect();
    let sizes: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
    grid_indices(&sizes)
        .into_iter()
        .map(|i| values[i.iter().zip(ranges).zip(&strides).map(|((i, r), s)| (r.start + i) * s).sum::<u64>() as usize])
        .collect()
}

/// Distinct, non-integral values for `n` elements.
fn sample(n: u64, base: f32) -> Vec<f32> {
    (0..n).map(|i| base + i as f32 * 0.25 - 7.0).collect()
}

/// Bitwise equality, so that a NaN or a sign of zero would not slip through.
fn assert_same(read: &[f32], expected: &[f32], what: &str) {
    assert_eq!(read.len(), expected.len(), "{what}: element count");
    let bad: Vec<usize> = (0..read.len()).filter(|&i| read[i].to_bits() != expected[i].to_bits()).collect();
    assert!(
        bad.is_empty(),
        "{what}: {} elements differ, first at {}: read {} expected {}",
        bad.len(),
        bad[0],
        read[bad[0]],
        expected[bad[0]]
    );
}

/// Sum of `zarrgate_http_requests_total` over routes for one method and status, from `/metrics`.
async fn served(server: &TestServer, method: &str, status: u16) -> u64 {
    let text = server.get("/metrics", &[]).await.text().await.unwrap();
    let (m, s) = (format!("method=\"{method}\""), format!("status=\"{status}\""));
    text.lines()
        .filter(|l| l.starts_with("zarrgate_http_requests_total{") && l.contains(&m) && l.contains(&s))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

const SHAPE_2D: [u64; 2] = [13, 11];

/// Case 1: 2-D float32, chunks 4x5 (grid 4x3 with partial edge chunks), gzip and zstd.
async fn compressed_2d(server: &TestServer) {
    let (root, store) = fs_store(server, "compressed");
    let values = sample(SHAPE_2D.iter().product(), 0.0);
    let mut gz = ArrayBuilder::new(SHAPE_2D.to_vec(), vec![4, 5], data_type::float32(), -1.0f32);
    gz.bytes_to_bytes_codecs(vec![Arc::new(GzipCodec::new(5).unwrap())]).dimension_names(Some(["y", "x"]));
    let gz = write_f32(&store, "/gz", &gz, &values);
    let zst_values: Vec<f32> = values.iter().map(|v| v * -3.0).collect();
    let mut zst = ArrayBuilder::new(SHAPE_2D.to_vec(), vec![4, 5], data_type::float32(), f32::NAN);
    zst.bytes_to_bytes_codecs(vec![Arc::new(ZstdCodec::new(3, true))]);
    let zst = write_f32(&store, "/zst", &zst, &zst_values);
    let version = register(
        server,
        "compressed",
        json!({"gz": array_node(&root, &gz, &[]), "zst": array_node(&root, &zst, &[])}),
        24,
    )
    .await;

    let http = http_store(server, "compressed");
    for (path, expected) in [("/gz", &values), ("/zst", &zst_values)] {
        let array = Array::async_open(http.clone(), path).await.unwrap_or_else(|e| panic!("opening {path}: {e}"));
        assert_eq!(array.shape(), SHAPE_2D);
        let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
        assert_same(&all, expected, &format!("{path}: whole array"));
        // Across four chunks, two of them edge chunks.
        let ranges = [3..13, 2..11];
        let sub: Vec<f32> = array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&ranges)).await.unwrap();
        assert_same(&sub, &region(expected, &SHAPE_2D, &ranges), &format!("{path}: sub-region"));
        // The corner chunk alone (partial in both dimensions).
        // Rows 12..16 and columns 10..15: only [12, 10] is inside the array, the rest is fill.
        let corner: Vec<f32> = array.async_retrieve_chunk(&[3, 2]).await.unwrap();
        let fill = if path == "/gz" { -1.0 } else { f32::NAN };
        let mut expected_corner = vec![fill; 20];
        expected_corner[0] = expected[(12 * SHAPE_2D[1] + 10) as usize];
        assert_same(&corner, &expected_corner, &format!("{path}: corner chunk [3, 2]"));
    }
    // The same through the pinned, immutable version URL.
    let pinned = Array::async_open(http_store(server, &format!("compressed@{version}")), "/gz").await.unwrap();
    let all: Vec<f32> = pinned.async_retrieve_array_subset(&pinned.subset_all()).await.unwrap();
    assert_same(&all, &values, "/gz at the pinned version");
}

const SHARD_SHAPE: [u64; 2] = [18, 20];

/// Case 2: sharded (shards 8x10 of inner chunks 4x5, gzip inside), partial edge shards.
async fn sharded(server: &TestServer) {
    let (root, store) = fs_store(server, "sharded");
    let values = sample(SHARD_SHAPE.iter().product(), 100.0);
    let mut builder = ArrayBuilder::new(SHARD_SHAPE.to_vec(), vec![8, 10], data_type::float32(), 0.0f32);
    builder.subchunk_shape(vec![4, 5]).bytes_to_bytes_codecs(vec![Arc::new(GzipCodec::new(5).unwrap())]);
    let array = write_f32(&store, "/s", &builder, &values);
    let written = zarr_json(&root, "s");
    assert_eq!(written["codecs"][0]["name"], "sharding_indexed", "zarrs wrote a sharded array: {written}");
    register(server, "sharded", json!({"s": array_node(&root, &array, &[])}), 6).await;

    let http = http_store(server, "sharded");
    let array = Array::async_open(http.clone(), "/s").await.unwrap();
    let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    assert_same(&all, &values, "sharded: whole array");

    // Parts of shards: zarrs reads the shard index and the inner chunks with HEAD + Range.
    let (heads, partials) = (served(server, "HEAD", 200).await, served(server, "GET", 206).await);
    let ranges = [5..15, 3..17];
    let sub: Vec<f32> = array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&ranges)).await.unwrap();
    assert_same(&sub, &region(&values, &SHARD_SHAPE, &ranges), "sharded: sub-region across shards");
    // One inner chunk, [4..8, 5..10], alone.
    let one: Vec<f32> = array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&[4..8, 5..10])).await.unwrap();
    assert_same(&one, &region(&values, &SHARD_SHAPE, &[4..8, 5..10]), "sharded: one inner chunk region");
    // The same inner chunk through zarrs' sharded API, and one in the partial last shard row.
    let cache = AsyncArrayShardedReadableExtCache::new(&array);
    let inner: Vec<f32> = array.async_retrieve_subchunk_opt(&cache, &[1, 1], &CodecOptions::default()).await.unwrap();
    assert_same(&inner, &region(&values, &SHARD_SHAPE, &[4..8, 5..10]), "sharded: subchunk [1, 1]");
    let inner: Vec<f32> = array.async_retrieve_subchunk_opt(&cache, &[4, 3], &CodecOptions::default()).await.unwrap();
    let mut expected = region(&values, &SHARD_SHAPE, &[16..18, 15..20]);
    expected.extend([0.0; 10]); // rows 18..20 are outside the array: fill value
    assert_same(&inner, &expected, "sharded: subchunk [4, 3] at the edge");
    assert!(served(server, "HEAD", 200).await > heads, "zarrs sent HEAD before its ranged reads");
    assert!(served(server, "GET", 206).await > partials, "zarrs read parts of shards with single ranges, answered 206");

    // What the HTTP layer does for zarrs, on the shard file [1, 1].
    let shard = std::fs::read(root.join("s/c/1/1")).unwrap();
    assert!(shard.len() > 30);
    let head = server.head("/sharded/s/c/1/1").await;
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["content-length"], shard.len().to_string().as_str(), "HEAD gives the chunk length");
    let r = server.get("/sharded/s/c/1/1", &[("range", "bytes=0-9, 20-29")]).await;
    assert_eq!(r.status(), StatusCode::OK, "several ranges: 200 with the full body");
    assert!(r.headers().get("content-range").is_none());
    assert_eq!(r.bytes().await.unwrap().to_vec(), shard, "several ranges: the full chunk, not multipart");
    let index_start = shard.len() - 20;
    let r = server.get("/sharded/s/c/1/1", &[("range", &format!("bytes={index_start}-{}", shard.len() - 1))]).await;
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        r.headers()["content-range"],
        format!("bytes {index_start}-{}/{}", shard.len() - 1, shard.len()).as_str()
    );
    assert_eq!(r.bytes().await.unwrap().to_vec(), shard[index_start..], "an absolute range, as zarrs sends it");
}

both_backends! {
    async fn zarrs_reads_compressed_arrays_with_edge_chunks(server) {
        compressed_2d(&server).await;
    }

    async fn zarrs_reads_sharded_arrays_with_ranges(server) {
        sharded(&server).await;
    }
}

/// Case 3: a chunk left out of the manifest reads as the fill value; the rest (virtual and
/// inline chunks) is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_chunk_reads_as_fill_value() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    let (root, store) = fs_store(&server, "holes");
    let shape = [8u64, 8];
    let values = sample(64, 1.0);
    let mut builder = ArrayBuilder::new(shape.to_vec(), vec![4, 4], data_type::float32(), 42.5f32);
    builder.bytes_to_bytes_codecs(vec![Arc::new(GzipCodec::new(1).unwrap())]);
    let array = write_f32(&store, "/h", &builder, &values);
    assert!(root.join("h/c/1/0").exists(), "zarrs wrote chunk [1, 0]; the manifest leaves it out");
    // Chunk [1, 1] is carried inline in the manifest instead of referenced.
    let mut node = array_node(&root, &array, &[&[1, 0]]);
    let inline = std::fs::read(root.join("h/c/1/1")).unwrap();
    assert!(inline.len() > 30);
    node["manifest"]["1.1"] = json!({"data": base64::engine::general_purpose::STANDARD.encode(&inline)});
    // A sharded array with shard [0, 1] left out: zarrs' HEAD before a ranged read gets 404.
    let mut sharded = ArrayBuilder::new(shape.to_vec(), vec![4, 4], data_type::float32(), 7.75f32);
    sharded.subchunk_shape(vec![2, 2]);
    let sharded = write_f32(&store, "/sh", &sharded, &values);
    let nodes = json!({"h": node, "sh": array_node(&root, &sharded, &[&[0, 1]])});
    register(&server, "holes", nodes.clone(), 2 + 3).await;
    // The same store answering missing chunks with encoded fill-value chunks (for caches that
    // mishandle 404): zarrs must read the same numbers from it.
    register(&server, "filled?missing_chunks=fill", nodes, 2 + 3).await;
    assert_eq!(server.get("/filled/h/c/1/0", &[]).await.status(), StatusCode::OK);
    let head = server.head("/holes/h/c/1/1").await;
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["content-length"], inline.len().to_string().as_str(), "HEAD of an inline chunk");
    let r = server.get("/holes/h/c/1/1", &[("range", "bytes=0-9, 20-29")]).await;
    assert_eq!(r.status(), StatusCode::OK, "several ranges on an inline chunk: 200 with the full body");
    assert_eq!(r.bytes().await.unwrap().to_vec(), inline);
    assert_eq!(server.get("/holes/h/c/1/0", &[]).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(server.head("/holes/h/c/1/0").await.status(), StatusCode::NOT_FOUND);

    let http = http_store(&server, "holes");
    let array = Array::async_open(http, "/h").await.unwrap();
    let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    let expected: Vec<f32> =
        (0..64).map(|i| if (4..8).contains(&(i / 8)) && i % 8 < 4 { 42.5 } else { values[i] }).collect();
    assert_same(&all, &expected, "array with chunk [1, 0] missing");
    // A region straddling the hole and its neighbours (a partial read of a missing chunk).
    let sub: Vec<f32> = array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&[3..6, 2..6])).await.unwrap();
    assert_same(&sub, &region(&expected, &shape, &[3..6, 2..6]), "region around the missing chunk");
    let chunk: Vec<f32> = array.async_retrieve_chunk(&[1, 0]).await.unwrap();
    assert_same(&chunk, &[42.5; 16], "the missing chunk itself");
    let present: Option<Vec<f32>> = array.async_retrieve_chunk_if_exists(&[1, 0]).await.unwrap();
    assert!(present.is_none(), "zarrs sees the chunk as absent, not as an error");

    let sharded = Array::async_open(http_store(&server, "holes"), "/sh").await.unwrap();
    let expected: Vec<f32> = (0..64).map(|i| if i / 8 < 4 && i % 8 >= 4 { 7.75 } else { values[i] }).collect();
    let ranges = [1..7, 3..6];
    let sub: Vec<f32> = sharded.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&ranges)).await.unwrap();
    assert_same(&sub, &region(&expected, &shape, &ranges), "sharded: region across the missing shard");
    let all: Vec<f32> = sharded.async_retrieve_array_subset(&sharded.subset_all()).await.unwrap();
    assert_same(&all, &expected, "sharded array with shard [0, 1] missing");

    let filled = http_store(&server, "filled");
    let h = Array::async_open(filled.clone(), "/h").await.unwrap();
    let all: Vec<f32> = h.async_retrieve_array_subset(&h.subset_all()).await.unwrap();
    let expected_h: Vec<f32> =
        (0..64).map(|i| if (4..8).contains(&(i / 8)) && i % 8 < 4 { 42.5 } else { values[i] }).collect();
    assert_same(&all, &expected_h, "missing_chunks=fill: the gzip fill chunk decodes to the fill value");
    let sh = Array::async_open(filled, "/sh").await.unwrap();
    let all: Vec<f32> = sh.async_retrieve_array_subset(&sh.subset_all()).await.unwrap();
    assert_same(&all, &expected, "missing_chunks=fill: the fill shard decodes to the fill value");
}

/// Case 4: `v2` and `default` with `.` chunk key encodings, and 0-d arrays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_key_encodings_and_scalars() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    let (root, store) = fs_store(&server, "keys");
    let shape = [6u64, 7];
    let values = sample(42, -2.0);
    let mut v2 = ArrayBuilder::new(shape.to_vec(), vec![4, 3], data_type::float32(), -1.0f32);
    v2.chunk_key_encoding(V2ChunkKeyEncoding::new_dot());
    let v2 = write_f32(&store, "/v2", &v2, &values);
    assert!(root.join("v2/1.2").is_file(), "zarrs wrote v2 keys");
    let dotted: Vec<f32> = values.iter().map(|v| v + 1000.0).collect();
    let mut dot = ArrayBuilder::new(shape.to_vec(), vec![4, 3], data_type::float32(), -1.0f32);
    dot.chunk_key_encoding_default_separator(ChunkKeySeparator::Dot);
    let dot = write_f32(&store, "/dot", &dot, &dotted);
    assert!(root.join("dot/c.1.2").is_file(), "zarrs wrote c.1.2 keys");
    let mut scalar = ArrayBuilder::new(Vec::<u64>::new(), Vec::<u64>::new(), data_type::float32(), 0.0f32);
    scalar.bytes_to_bytes_codecs(vec![Arc::new(GzipCodec::new(5).unwrap())]);
    let scalar = write_f32(&store, "/scalar", &scalar, &[3.25]);
    assert!(root.join("scalar/c").is_file(), "zarrs wrote the 0-d chunk at c");
    let mut scalar_v2 = ArrayBuilder::new(Vec::<u64>::new(), Vec::<u64>::new(), data_type::float32(), 0.0f32);
    scalar_v2.chunk_key_encoding(V2ChunkKeyEncoding::new_dot());
    let scalar_v2 = write_f32(&store, "/scalar_v2", &scalar_v2, &[-0.5]);
    assert!(root.join("scalar_v2/0").is_file(), "zarrs wrote the 0-d v2 chunk at 0");

    let scalar_node = array_node(&root, &scalar, &[]);
    assert!(scalar_node["manifest"].get("").is_some(), "the 0-d chunk's manifest key is \"\": {scalar_node}");
    let nodes = json!({
        "v2": array_node(&root, &v2, &[]),
        "dot": array_node(&root, &dot, &[]),
        "scalar": scalar_node,
        "scalar_v2": array_node(&root, &scalar_v2, &[]),
    });
    register(&server, "keys", nodes, 6 + 6 + 1 + 1).await;

    let http = http_store(&server, "keys");
    for (path, expected) in [("/v2", &values), ("/dot", &dotted)] {
        let array = Array::async_open(http.clone(), path).await.unwrap();
        let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
        assert_same(&all, expected, path);
        let ranges = [1..5, 2..7];
        let sub: Vec<f32> = array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&ranges)).await.unwrap();
        assert_same(&sub, &region(expected, &shape, &ranges), &format!("{path}: sub-region"));
    }
    for (path, expected) in [("/scalar", 3.25f32), ("/scalar_v2", -0.5)] {
        let array = Array::async_open(http.clone(), path).await.unwrap();
        assert!(array.shape().is_empty());
        let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
        assert_same(&all, &[expected], path);
    }
}

/// Case 5: a root group with attributes, a subgroup with an array; zarrs opens them by path and
/// sees the members through the root's consolidated metadata (zarrgate cannot list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_hierarchy_with_consolidated_metadata() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    let (root, store) = fs_store(&server, "tree");
    let attrs = |v: Value| v.as_object().unwrap().clone();
    let root_attrs = attrs(json!({"title": "zarrs hierarchy", "answer": 42, "nested": {"list": [1, 2.5, "x"]}}));
    GroupBuilder::new().attributes(root_attrs.clone()).build(store.clone(), "/").unwrap().store_metadata().unwrap();
    let sub_attrs = attrs(json!({"kind": "subgroup"}));
    GroupBuilder::new().attributes(sub_attrs.clone()).build(store.clone(), "/sub").unwrap().store_metadata().unwrap();
    let values = sample(30, 9.0);
    let mut builder = ArrayBuilder::new(vec![5, 6], vec![2, 4], data_type::float32(), -9999.0f32);
    builder
        .bytes_to_bytes_codecs(vec![Arc::new(ZstdCodec::new(1, false))])
        .dimension_names(Some(["lat", "lon"]))
        .attributes(attrs(json!({"units": "K"})));
    let temp = write_f32(&store, "/sub/temp", &builder, &values);
    let nodes =
        json!({"": zarr_json(&root, ""), "sub": zarr_json(&root, "sub"), "sub/temp": array_node(&root, &temp, &[])});
    register(&server, "tree", nodes, 6).await;

    let http = http_store(&server, "tree");
    let group = Group::async_open(http.clone(), "/").await.unwrap();
    for (k, v) in &root_attrs {
        assert_eq!(group.attributes().get(k), Some(v), "root attribute {k}");
    }
    let consolidated = group.consolidated_metadata().expect("the root zarr.json served has consolidated_metadata");
    let mut members: Vec<&str> = consolidated.metadata.keys().map(String::as_str).collect();
    members.sort_unstable();
    assert_eq!(members, ["sub", "sub/temp"]);
    // zarrs uses the consolidated metadata to list (an HTTP store cannot list zarrgate).
    let mut children: Vec<String> =
        group.async_traverse().await.unwrap().into_iter().map(|(p, _)| p.as_str().to_owned()).collect();
    children.sort_unstable();
    assert_eq!(children, ["/sub", "/sub/temp"]);

    let sub = Group::async_open(http.clone(), "/sub").await.unwrap();
    for (k, v) in &sub_attrs {
        assert_eq!(sub.attributes().get(k), Some(v), "subgroup attribute {k}");
    }
    let array = Array::async_open(http.clone(), "/sub/temp").await.unwrap();
    assert_eq!(array.attributes().get("units"), Some(&json!("K")));
    let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    assert_same(&all, &values, "sub/temp");
    let sub_region: Vec<f32> =
        array.async_retrieve_array_subset(&ArraySubset::new_with_ranges(&[1..4, 3..6])).await.unwrap();
    assert_same(&sub_region, &region(&values, &[5, 6], &[1..4, 3..6]), "sub/temp region");
}

/// An array written by zarrs with codecs as the file's metadata names them (netCDF4's default
/// `numcodecs.shuffle` and `numcodecs.zlib`, say), and `values` over it.
fn write_with_codecs(
    store: &Arc<FilesystemStore>,
    path: &str,
    shape: &[u64],
    chunks: &[u64],
    codecs: Value,
    values: &[f32],
) -> Array<FilesystemStore> {
    let metadata = json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": -5.5, "codecs": codecs, "attributes": {"units": "K"},
    });
    let metadata = zarrs::array::ArrayMetadata::V3(serde_json::from_value(metadata).unwrap());
    let array = Array::new_with_metadata(store.clone(), path, metadata).unwrap();
    array.store_metadata().unwrap();
    array.store_array_subset(&array.subset_all(), values.to_vec()).unwrap();
    array
}

/// `?codecs=portable`: an array of netCDF4's zlib + shuffle (which GDAL and zarrita.js cannot
/// decode) is served as `bytes` + `gzip`, its chunks transcoded when read, and zarrs reads the
/// same numbers; an array already portable is served byte for byte; the export keeps the
/// files' own codecs, whose references it writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portable_codecs_read_by_zarrs_as_the_files_values() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    let (root, store) = fs_store(&server, "portable");
    let shape = [9u64, 7];
    let values = sample(63, 3.0);
    let netcdf4 = json!([
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 6}},
    ]);
    let shuffled = write_with_codecs(&store, "/air", &shape, &[4, 4], netcdf4.clone(), &values);
    let scalar = write_with_codecs(&store, "/scalar", &[], &[], netcdf4, &[2.25]);
    let mut gz = ArrayBuilder::new(shape.to_vec(), vec![4, 4], data_type::float32(), 0.0f32);
    gz.bytes_to_bytes_codecs(vec![Arc::new(GzipCodec::new(5).unwrap())]);
    let gz = write_f32(&store, "/gz", &gz, &values);
    // Chunk [2, 1] of air is carried inline, chunk [0, 1] left out (fill value).
    let mut air = array_node(&root, &shuffled, &[&[0, 1]]);
    let inline = std::fs::read(root.join("air/c/2/1")).unwrap();
    air["manifest"]["2.1"] = json!({"data": base64::engine::general_purpose::STANDARD.encode(&inline)});
    let nodes = json!({"air": air, "scalar": array_node(&root, &scalar, &[]), "gz": array_node(&root, &gz, &[])});
    local_object_store(&server).await;
    let (status, body) = server.put("/api/v1/stores/portable?codecs=portable", &json!({"nodes": nodes})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["codecs"], "portable", "{body}");
    assert_eq!(body["transcoded_arrays"], 2, "air and scalar; gz is portable already: {body}");

    let served: Value = server.get("/portable/air/zarr.json", &[]).await.json().await.unwrap();
    let names: Vec<&str> = served["codecs"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bytes", "gzip"], "{served}");
    assert_eq!(served["attributes"]["units"], "K");
    let root_doc: Value = server.get("/portable/zarr.json", &[]).await.json().await.unwrap();
    let consolidated = &root_doc["consolidated_metadata"]["metadata"]["air"]["codecs"];
    assert_eq!(consolidated[1]["name"], "gzip", "the consolidated metadata is the served one: {root_doc}");

    let http = http_store(&server, "portable");
    let array = Array::async_open(http.clone(), "/air").await.unwrap();
    let all: Vec<f32> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    let expected: Vec<f32> =
        (0..63).map(|i| if i / 7 < 4 && (4..7).contains(&(i % 7)) { -5.5 } else { values[i] }).collect();
    assert_same(&all, &expected, "air, transcoded (one chunk inline, one missing)");
    let scalar = Array::async_open(http.clone(), "/scalar").await.unwrap();
    let one: Vec<f32> = scalar.async_retrieve_array_subset(&scalar.subset_all()).await.unwrap();
    assert_same(&one, &[2.25], "a 0-d array, transcoded");
    let gz_read = Array::async_open(http.clone(), "/gz").await.unwrap();
    let all: Vec<f32> = gz_read.async_retrieve_array_subset(&gz_read.subset_all()).await.unwrap();
    assert_same(&all, &values, "gz, served as it is");
    assert_eq!(server.bytes("/portable/gz/c/1/1").await, std::fs::read(root.join("gz/c/1/1")).unwrap());

    // A transcoded chunk is a gzip stream with a strong ETag, its length known to HEAD, ranges
    // and revalidation served as for any chunk.
    let body = server.bytes("/portable/air/c/1/0").await;
    assert_eq!(&body[..2], &[0x1f, 0x8b]);
    let head = server.head("/portable/air/c/1/0").await;
    assert_eq!(head.headers()["content-length"], body.len().to_string().as_str());
    let tag = head.headers()["etag"].to_str().unwrap().to_owned();
    assert!(tag.starts_with('"'), "a strong ETag: {tag}");
    let part = server.get("/portable/air/c/1/0", &[("range", "bytes=2-9")]).await;
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.bytes().await.unwrap().to_vec(), body[2..10].to_vec());
    let again = server.get("/portable/air/c/1/0", &[("if-none-match", &tag)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(server.get("/portable/air/c/0/1", &[]).await.status(), StatusCode::NOT_FOUND);
    assert!(server.metric_sum("zarrgate_transcoded_chunks_total", &[("outcome", "ok")]).await >= 4.0);

    // The v2 view carries the same portable codecs.
    let zarray: Value = server.get("/v2/portable/air/.zarray", &[]).await.json().await.unwrap();
    assert_eq!(zarray["compressor"]["id"], "gzip", "{zarray}");
    assert_eq!(zarray["filters"], Value::Null, "{zarray}");

    // The export is the manifest as registered: the files' codecs, whose bytes it points at.
    let exported: Value = server.get("/api/v1/stores/portable/manifest", &[]).await.json().await.unwrap();
    assert_eq!(exported["nodes"]["air"]["codecs"][2]["name"], "numcodecs.zlib", "{exported}");

    // A re-registration keeps the setting; `codecs=as-is` serves the files' codecs again.
    let (status, body) = server.put("/api/v1/stores/portable", &json!({"nodes": nodes})).await;
    assert_eq!((status, &body["codecs"]), (StatusCode::OK, &json!("portable")), "{body}");
    let (status, body) = server.put("/api/v1/stores/portable?codecs=as-is", &json!({"nodes": nodes})).await;
    assert_eq!((status, &body["codecs"], &body["transcoded_arrays"]), (StatusCode::OK, &json!("as-is"), &json!(0)));
    let served: Value = server.get("/portable/air/zarr.json", &[]).await.json().await.unwrap();
    assert_eq!(served["codecs"][2]["name"], "numcodecs.zlib", "{served}");
    let (status, body) = server.put("/api/v1/stores/portable?codecs=gdal", &json!({"nodes": nodes})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("\"portable\""), "{body}");
}

/// A little-endian TIFF of one strip: `values` (`height` x `width` uint16) with the horizontal
/// predictor and LZW, as libtiff writes them (tags in order, one IFD).
fn lzw_predictor_tiff(values: &[u16], height: u32, width: u32) -> Vec<u8> {
    let mut predicted = values.to_vec();
    for row in predicted.chunks_exact_mut(width as usize) {
        for x in (1..row.len()).rev() {
            row[x] = row[x].wrapping_sub(row[x - 1]);
        }
    }
    let raw: Vec<u8> = predicted.iter().flat_map(|v| v.to_le_bytes()).collect();
    let strip = weezl::encode::Encoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8).encode(&raw).unwrap();
    const SHORT: u16 = 3;
    const LONG: u16 = 4;
    let data_at = 8u32;
    let ifd_at = data_at + strip.len() as u32;
    let entries: [(u16, u16, u32); 11] = [
        (256, LONG, width),
        (257, LONG, height),
        (258, SHORT, 16),
        (259, SHORT, 5),
        (262, SHORT, 1),
        (273, LONG, data_at),
        (277, SHORT, 1),
        (278, LONG, height),
        (279, LONG, strip.len() as u32),
        (317, SHORT, 2),
        (339, SHORT, 1),
    ];
    let mut file = b"II*\0".to_vec();
    file.extend_from_slice(&ifd_at.to_le_bytes());
    file.extend_from_slice(&strip);
    file.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for (tag, kind, value) in entries {
        file.extend_from_slice(&tag.to_le_bytes());
        file.extend_from_slice(&kind.to_le_bytes());
        file.extend_from_slice(&1u32.to_le_bytes());
        file.extend_from_slice(&value.to_le_bytes());
    }
    file.extend_from_slice(&0u32.to_le_bytes());
    file
}

/// A TIFF of LZW and the horizontal predictor (imagecodecs' codecs, which zarrs does not have)
/// registered with `codecs=portable`: zarrs reads its values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiff_served_portable_is_read_by_zarrs() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    let (height, width) = (8u32, 6u32);
    let values: Vec<u16> = (0..height * width).map(|i| (i * 977 % 4001) as u16).collect();
    let path = server.data.join("image.tif");
    std::fs::write(&path, lzw_predictor_tiff(&values, height, width)).unwrap();
    local_object_store(&server).await;
    let url = url::Url::from_file_path(&path).unwrap();
    let request = json!({"files": [url.as_str()], "codecs": "portable"});
    let (status, body) = server.put("/api/v1/stores/tiff?format=files", &request).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["transcoded_arrays"], 1, "{body}");
    let array = Array::async_open(http_store(&server, "tiff"), "/0").await.unwrap();
    assert_eq!(array.shape(), [u64::from(height), u64::from(width)]);
    let read: Vec<u16> = array.async_retrieve_array_subset(&array.subset_all()).await.unwrap();
    assert_eq!(read, values);
}

/// A GRIB2 file ecCodes wrote (tests/fixtures/files/small.grib2: surface pressure with a
/// bitmap among others) registered as it is and with `codecs=portable`: zarrs reads the same
/// values from both, through gribberish's zarrs codec from the first, with no plugin from the
/// second (its chunks transcoded to `bytes` + `gzip`); the point the bitmap masks is NaN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grib2_file_served_portable_is_read_by_zarrs() {
    let server = TestServer::start(common::Backend::Sqlite).await;
    let grib = std::fs::read("tests/fixtures/files/small.grib2").unwrap();
    let path = server.data.join("small.grib2");
    std::fs::write(&path, &grib).unwrap();
    local_object_store(&server).await;
    let url = url::Url::from_file_path(&path).unwrap();
    for (store, codecs) in [("grib", "as-is"), ("grib-portable", "portable")] {
        let request = json!({"files": [url.as_str()], "codecs": codecs});
        let (status, body) = server.put(&format!("/api/v1/stores/{store}?format=files"), &request).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["files"]["files"][0]["parser"], "grib", "{body}");
    }
    let served = |store: &'static str| {
        let server = &server;
        async move {
            let array = Array::async_open(http_store(server, store), "/sfc/instant/pres").await.unwrap();
            assert_eq!(array.shape(), [2, 5, 8]);
            let metadata: Value =
                server.get(&format!("/{store}/sfc/instant/pres/zarr.json"), &[]).await.json().await.unwrap();
            let names: Vec<String> =
                metadata["codecs"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect();
            (names, array.async_retrieve_array_subset::<Vec<f64>>(&array.subset_all()).await.unwrap())
        }
    };
    let (stored_codecs, as_is) = served("grib").await;
    let (portable_codecs, portable) = served("grib-portable").await;
    assert_eq!(stored_codecs, ["gribberish"]);
    assert_eq!(portable_codecs, ["bytes", "gzip"]);
    // The messages of surface pressure (steps 0 and 6) decoded from the file by gribberish.
    let expected: Vec<f64> = [897usize, 2095]
        .iter()
        .flat_map(|offset| gribberish::message::Message::from_data(&grib, *offset).unwrap().data().unwrap())
        .collect();
    for values in [&as_is, &portable] {
        assert_eq!(values.len(), expected.len());
        for (i, (got, want)) in values.iter().zip(&expected).enumerate() {
            assert!(got == want || (got.is_nan() && want.is_nan()), "value {i}: {got} != {want}");
        }
    }
    assert!(portable[8 + 2].is_nan() && portable[40 + 8 + 2].is_nan(), "the masked point");
    assert_eq!(portable.iter().filter(|v| v.is_nan()).count(), 2);
}
