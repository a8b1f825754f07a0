//! Chunks that declare or inflate to far more than their array's chunk (a zstd frame declaring
//! 16 TiB, a gzip member inflating 1 MiB to 512 MiB) are refused with a 422 naming the codec and
//! the bound, read by a quick look (virtual) or checked at `PUT` (inline), without the
//! allocation: the server keeps answering, its peak memory stays bounded, and a refused quick
//! look is remembered, not decoded again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The 17 bytes of the report: a zstd frame whose header declares 2^44 bytes (single segment),
/// holding one raw block of one byte.
fn zstd_bomb() -> Vec<u8> {
    let mut b = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
    b.extend_from_slice(&(1u64 << 44).to_le_bytes());
    b.extend_from_slice(&[0x09, 0, 0, 7]);
    b
}

/// A gzip member that inflates to `mib` MiB of zeros, about 1 KiB per MiB: one MiB of zeros
/// deflated as non-final blocks (ending on a sync flush), repeated, then a final empty block.
/// Its trailer's checksum is wrong, which only a decoder that inflated all of it finds.
fn gzip_bomb(mib: usize) -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mut z = Compress::new(Compression::best(), false);
    let mut block = Vec::with_capacity(2 << 20);
    z.compress_vec(&vec![0u8; 1 << 20], &mut block, FlushCompress::Sync).unwrap();
    let mut end = Vec::with_capacity(64);
    z.compress_vec(&[], &mut end, FlushCompress::Finish).unwrap();
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    for _ in 0..mib {
        out.extend_from_slice(&block);
    }
    out.extend_from_slice(&end);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&((mib as u32) << 20).to_le_bytes());
    out
}

/// A uint8 array of one `side` x `side` chunk compressed by `codec`, with chunk `0.0` as given.
fn array(side: u64, codec: Value, chunk: Value) -> Value {
    json!({"zarr_format": 3, "node_type": "array", "shape": [side, side], "data_type": "uint8",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [side, side]}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
           "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, codec],
           "manifest": {"0.0": chunk}})
}

fn zstd() -> Value {
    json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}})
}

fn gzip() -> Value {
    json!({"name": "gzip", "configuration": {"level": 1}})
}

/// Registers store `name` with arrays `zstd` (the zstd bomb) and `gzip` (the gzip bomb), both
/// virtual.
async fn register_bombs(server: &TestServer, name: &str) {
    server.local_store().await;
    let zstd_path = server.write("bomb.zst", &zstd_bomb());
    let gzip_bytes = gzip_bomb(512);
    let gzip_path = server.write("bomb.gz", &gzip_bytes);
    let doc = json!({"nodes": {
        "": {"zarr_format": 3, "node_type": "group"},
        "zstd": array(64, zstd(), json!({"path": zstd_path, "offset": 0, "length": 17})),
        "gzip": array(1024, gzip(), json!({"path": gzip_path, "offset": 0, "length": gzip_bytes.len()})),
    }});
    let (status, body) = server.put(&format!("/api/v1/stores/{name}"), &doc).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn refusal(server: &TestServer, path: &str) -> String {
    let r = server.get(path, &[]).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "GET {path}");
    r.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_read_by_a_quick_look_are_refused_within_bounded_memory_and_remembered() {
    let server = TestServer::start(Backend::Sqlite).await;
    register_bombs(&server, "bombs").await;
    let misses = r#"zarrgate_cache_misses_total{cache="quicklooks"}"#;
    let upstream = r#"zarrgate_upstream_requests_total{object_store="local",outcome="ok"}"#;
    common::reset_peak_rss();
    let before = common::peak_rss();

    let said = refusal(&server, "/bombs/zstd/?quicklook=json").await;
    assert!(said.contains("codec zstd decodes to more than the 4096 bytes this array's chunk can take"), "{said}");
    // The process is alive and answers.
    assert_eq!(server.get("/bombs/zstd/zarr.json", &[]).await.status(), StatusCode::OK);

    let said = refusal(&server, "/bombs/gzip/?quicklook=png").await;
    assert!(said.contains("codec gzip decodes to more than the 1048576 bytes"), "{said}");
    let grown = common::peak_rss().saturating_sub(before);
    assert!(grown < 96 << 20, "a 512 MiB gzip member raised the peak memory by {} MiB", grown >> 20);

    // The refusals are remembered: asked again (the page and its image), nothing is read.
    let metrics = server.metrics().await;
    let (read, missed) = (common::metric_in(&metrics, upstream), common::metric_in(&metrics, misses));
    assert_eq!(missed, 2.0, "{metrics}");
    for path in ["/bombs/gzip/?quicklook=json", "/bombs/gzip/?quicklook=png", "/bombs/zstd/?quicklook=png"] {
        assert!(refusal(&server, path).await.contains("decodes to more than"), "{path}");
    }
    let metrics = server.metrics().await;
    assert_eq!(common::metric_in(&metrics, upstream), read, "a refused quick look is not read again");
    assert_eq!(common::metric_in(&metrics, misses), missed, "nor decoded again");
    assert_eq!(server.get("/bombs/gzip/c/0/0", &[]).await.status(), StatusCode::OK, "the chunk itself is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_as_inline_chunks_are_refused_at_put_and_nothing_changes() {
    use base64::Engine;
    let server = TestServer::start(Backend::Sqlite).await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let good = json!({"nodes": {"": {"zarr_format": 3, "node_type": "group", "attributes": {"v": 1}}}});
    let (status, body) = server.put("/api/v1/stores/inline", &good).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let version = server.get("/api/v1/stores/inline", &[]).await.json::<Value>().await.unwrap()["version"].clone();

    for (codec, bytes, side, what) in [
        (zstd(), zstd_bomb(), 64, "codec zstd decodes to more than the 4096 bytes"),
        (gzip(), gzip_bomb(64), 256, "codec gzip decodes to more than the 65536 bytes"),
    ] {
        common::reset_peak_rss();
        let before = common::peak_rss();
        let doc = json!({"nodes": {"": {"zarr_format": 3, "node_type": "group"},
                                   "a": array(side, codec, json!({"data": b64(&bytes)}))}});
        let (status, problem) = server.put("/api/v1/stores/inline", &doc).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        let text = problem.to_string();
        assert!(text.contains(r#"array a, chunk \"0.0\": its"#) && text.contains(what), "{text}");
        let grown = common::peak_rss().saturating_sub(before);
        assert!(grown < 48 << 20, "{what}: the peak memory grew by {} MiB", grown >> 20);
    }
    let now = server.get("/api/v1/stores/inline", &[]).await.json::<Value>().await.unwrap();
    assert_eq!(now["version"], version, "the store is unchanged: {now}");
    assert_eq!(server.get("/inline/zarr.json", &[]).await.json::<Value>().await.unwrap()["attributes"]["v"], 1);
}

/// An Icechunk file: magic, implementation name, spec `version`, `file_type`, and `body`
/// compressed by zstd (`compression` 1) or not (0).
fn icechunk_file(version: u8, file_type: u8, compression: u8, body: &[u8]) -> Vec<u8> {
    let mut out = "ICE🧊CHUNK".as_bytes().to_vec();
    out.extend_from_slice(format!("{:<24}", "ic-test").as_bytes());
    out.extend_from_slice(&[version, file_type, compression]);
    out.extend_from_slice(body);
    out
}

/// `mib` MiB of zeros as one zstd frame, its content size declared or not.
fn zstd_zeros(mib: usize, declared: bool) -> Vec<u8> {
    let zeros = vec![0u8; mib << 20];
    if declared {
        return zstd::bulk::compress(&zeros, 1).unwrap();
    }
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    encoder.include_contentsize(false).unwrap();
    std::io::Write::write_all(&mut encoder, &zeros).unwrap();
    encoder.finish().unwrap()
}

fn bounded(c: &mut zarrgate::config::Config) {
    c.limits.max_icechunk_file_bytes = 1 << 20;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_icechunk_file_inflating_past_the_bound_is_refused_at_registration() {
    let server = TestServer::start_with(Backend::Sqlite, bounded).await;
    server.local_store().await;
    let root = url::Url::from_directory_path(&server.data).unwrap();
    for (name, declared) in [("declared", true), ("streamed", false)] {
        server.write(&format!("{name}/repo"), &icechunk_file(2, 6, 1, &zstd_zeros(64, declared)));
        common::reset_peak_rss();
        let before = common::peak_rss();
        let body = json!({"repository": format!("{root}{name}")});
        let (status, problem) = server.put("/api/v1/stores/ice?format=icechunk", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        let text = problem.to_string();
        assert!(
            text.contains(&format!(
                "{root}{name}/repo inflates to more than limits.max_icechunk_file_bytes = 1048576 bytes"
            )),
            "{text}"
        );
        let grown = common::peak_rss().saturating_sub(before);
        assert!(grown < 32 << 20, "{name}: a 64 MiB repo file raised the peak memory by {} MiB", grown >> 20);
        assert_eq!(server.get("/api/v1/stores/ice", &[]).await.status(), StatusCode::NOT_FOUND);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_branch_moved_to_an_inflation_bomb_keeps_serving_the_old_version() {
    use icechunk_format::SnapshotId;
    use icechunk_format::format_constants::SpecVersionBin;
    use icechunk_format::snapshot::Snapshot;
    let server = TestServer::start_with(Backend::Sqlite, bounded).await;
    server.local_store().await;
    let root = url::Url::from_directory_path(&server.data).unwrap();
    // A format-1 repository whose branch main is at the initial (empty) snapshot.
    let first = Snapshot::initial(SpecVersionBin::V1).unwrap();
    let first_id = first.id().to_string();
    server.write(&format!("repo/snapshots/{first_id}"), &icechunk_file(1, 1, 0, first.bytes()));
    server.write("repo/refs/branch.main/ref.json", json!({"snapshot": first_id}).to_string().as_bytes());
    let body = json!({"repository": format!("{root}repo"), "branch": "main", "follow_seconds": 1});
    let (status, registered) = server.put("/api/v1/stores/ice?format=icechunk", &body).await;
    assert_eq!(status, StatusCode::CREATED, "{registered}");
    let version = server.get("/api/v1/stores/ice", &[]).await.json::<Value>().await.unwrap()["version"].clone();

    // The branch moves to a snapshot whose body inflates to 64 MiB.
    let bomb_id = SnapshotId::random().to_string();
    server.write(&format!("repo/snapshots/{bomb_id}"), &icechunk_file(1, 1, 1, &zstd_zeros(64, false)));
    common::reset_peak_rss();
    let before = common::peak_rss();
    server.write("repo/refs/branch.main/ref.json", json!({"snapshot": bomb_id}).to_string().as_bytes());
    tokio::time::sleep(std::time::Duration::from_secs(5)).await; // two ticks of the follower

    let grown = common::peak_rss().saturating_sub(before);
    assert!(grown < 32 << 20, "following the bomb raised the peak memory by {} MiB", grown >> 20);
    let now = server.get("/api/v1/stores/ice", &[]).await.json::<Value>().await.unwrap();
    assert_eq!(now["version"], version, "the old version is still served: {now}");
    assert_eq!(server.get("/ice/zarr.json", &[]).await.status(), StatusCode::OK);
    // A sync on request says why.
    let r = server.client.post(format!("{}/api/v1/stores/ice/sync", server.url)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let text = r.text().await.unwrap();
    let file =
        format!("{root}repo/snapshots/{bomb_id} inflates to more than limits.max_icechunk_file_bytes = 1048576 bytes");
    assert!(text.contains(&file), "{text}");
}
