//! The `Catalog` trait's contract, checked by calling it directly on PostgreSQL and SQLite alike:
//! what a version write stores is what reads give back, a deleted store reads as deleted (never
//! unknown) until it is registered again, retention keeps the current version, and writes of
//! more rows than either database binds in one statement go through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, PgTestDb};
use serde_json::{Value, json};
use zarrgate::catalog::{
    Catalog, CatalogError, DerivedVersion, Expected, FileRows, ListedVersion, ObjectStoreRecord, ParsedKey, Retention,
    StoreHead, VersionOptions,
};
use zarrgate::zarr::document::SourceFacts;
use zarrgate::zarr::spill::{Scratch, SpillLog};
use zarrgate::zarr::validate::{ValidatedStore, validate_tiled};
use zarrgate::zarr::{ChunkRef, ManifestBlock, native};

/// A catalog opened through `zarrgate::catalog::connect` on a fresh database.
struct TestCatalog {
    catalog: Arc<dyn Catalog>,
    _dir: tempfile::TempDir,
    _db: Option<PgTestDb>,
}

impl std::ops::Deref for TestCatalog {
    type Target = dyn Catalog;
    fn deref(&self) -> &Self::Target {
        &*self.catalog
    }
}

impl TestCatalog {
    /// `None` when PostgreSQL tests are explicitly skipped.
    async fn open(backend: Backend) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let db = match backend {
            Backend::Sqlite => None,
            Backend::Postgres if std::env::var("ZARRGATE_TEST_POSTGRES").as_deref() == Ok("skip") => {
                eprintln!("ZARRGATE_TEST_POSTGRES=skip: PostgreSQL variant not run");
                return None;
            }
            Backend::Postgres => Some(PgTestDb::create().await),
        };
        let url = match &db {
            Some(db) => db.url.clone(),
            None => format!("sqlite://{}/catalog.db", dir.path().display()),
        };
        let catalog = zarrgate::catalog::connect(&url, 8).await.unwrap();
        Some(Self { catalog, _dir: dir, _db: db })
    }
}

/// Runs each test body once on an SQLite catalog and once on a PostgreSQL one.
macro_rules! both_catalogs {
    ($(async fn $name:ident($catalog:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    let $catalog = TestCatalog::open(Backend::Sqlite).await.unwrap();
                    $body
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let Some($catalog) = TestCatalog::open(Backend::Postgres).await else { return };
                    $body
                }
            }
        )*
    };
}

/// A native document validated as a registration validates it, in tiles of `tile_chunks`.
fn validated(doc: &Value, tile_chunks: u64) -> ValidatedStore {
    let doc = native::parse_reader(doc.to_string().as_bytes(), &Scratch::in_memory()).unwrap();
    validate_tiled(doc, &|_| true, tile_chunks, &zarrgate::zarr::Limits::default()).map_err(|r| r.problems()).unwrap()
}

fn array(len: u64, chunk: u64, manifest: Value) -> Value {
    common::f32_array(&[len], &[chunk], json!({"manifest": manifest}))
}

/// `g/x`: 8 chunks in tiles of 2 (tile 0 virtual and inline, tile 1 empty, tile 2 virtual);
/// `y`: one inline chunk.
fn demo() -> ValidatedStore {
    validated(
        &json!({
            "nodes": {
                "": {"zarr_format": 3, "node_type": "group", "attributes": {"title": "demo"}},
                "g/x": array(16, 2, json!({
                    "0": {"path": "s3://bucket/a.nc", "offset": 0, "length": 8},
                    "1": {"data": "AACAPwAAAEA="},
                    "4": {"path": "s3://bucket/b.nc", "offset": 8, "length": 8},
                })),
                "y": array(1, 1, json!({"0": {"data": "AACAPw=="}})),
            },
            "sources": {"s3://bucket/a.nc": {"etag": "\"a1\"", "size": 100}},
        }),
        2,
    )
}

/// Arrays `a000000`.. with one inline chunk each.
fn many_arrays(n: usize) -> ValidatedStore {
    let nodes: serde_json::Map<String, Value> =
        (0..n).map(|i| (format!("a{i:06}"), array(1, 1, json!({"0": {"data": "AACAPw=="}})))).collect();
    validated(&json!({ "nodes": nodes }), 65_536)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `catalog.try_lock(name)`, asked again until it is had (a closed session's locks are
/// released by the server once it sees the connection gone).
async fn eventually_locked(catalog: &dyn Catalog, name: &str) -> zarrgate::catalog::LockGuard {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(held) = catalog.try_lock(name).await.unwrap() {
            return held;
        }
        assert!(Instant::now() < until, "lock {name} was never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_catalogs! {
    async fn a_lock_is_held_by_one_task_of_one_replica_at_a_time(catalog) {
        let held = catalog.try_lock("rescan a").await.unwrap().expect("a free lock is had");
        assert!(catalog.try_lock("rescan a").await.unwrap().is_none(), "held twice in one process");
        let other = catalog.try_lock("rescan b").await.unwrap();
        assert!(other.is_some(), "another name is another lock");
        if let Some(db) = &catalog._db {
            // another replica, on the same database
            let replica = zarrgate::catalog::connect(&db.url, 2).await.unwrap();
            assert!(replica.try_lock("rescan a").await.unwrap().is_none(), "held by two replicas");
            held.release().await;
            let theirs = replica.try_lock("rescan a").await.unwrap().expect("released: the other replica has it");
            assert!(catalog.try_lock("rescan a").await.unwrap().is_none());
            drop(theirs); // dropped without release: its session is closed, which releases it
            drop(eventually_locked(&*catalog, "rescan a").await);
        } else {
            held.release().await;
            assert!(catalog.try_lock("rescan a").await.unwrap().is_some(), "released, it is free again");
        }
        drop(other);
        drop(eventually_locked(&*catalog, "rescan b").await);
    }

    async fn a_parsed_file_is_remembered_until_its_file_is_rewritten(catalog) {
        let key = |url, validator, parse_key| ParsedKey { url, validator, parse_key };
        let (a, b) = ("s3://b/a.nc", "s3://b/b.nc");
        assert_eq!(catalog.parsed_file(key(a, "etag:1", "auto")).await.unwrap(), None);
        catalog.put_parsed_files(&[(key(a, "etag:1", "auto"), &b"first"[..])]).await.unwrap();
        catalog.put_parsed_files(&[(key(a, "etag:1", "hdf5"), &b"as hdf5"[..])]).await.unwrap();
        catalog.put_parsed_files(&[(key(b, "etag:1", "auto"), &b"other file"[..])]).await.unwrap();
        assert_eq!(catalog.parsed_file(key(a, "etag:1", "auto")).await.unwrap().as_deref(), Some(&b"first"[..]));
        // written again under the same key: replaced
        catalog.put_parsed_files(&[(key(a, "etag:1", "auto"), &b"again"[..])]).await.unwrap();
        assert_eq!(catalog.parsed_file(key(a, "etag:1", "auto")).await.unwrap().as_deref(), Some(&b"again"[..]));
        assert_eq!(catalog.parsed_file(key(a, "etag:1", "hdf5")).await.unwrap().as_deref(), Some(&b"as hdf5"[..]));
        // the file rewritten: its old parses (under any parse key) are forgotten, others' kept
        catalog.put_parsed_files(&[(key(a, "etag:2", "auto"), &b"second"[..])]).await.unwrap();
        assert_eq!(catalog.parsed_file(key(a, "etag:1", "auto")).await.unwrap(), None);
        assert_eq!(catalog.parsed_file(key(a, "etag:1", "hdf5")).await.unwrap(), None);
        assert_eq!(catalog.parsed_file(key(a, "etag:2", "auto")).await.unwrap().as_deref(), Some(&b"second"[..]));
        assert_eq!(catalog.parsed_file(key(a, "etag:2", "hdf5")).await.unwrap(), None);
        assert_eq!(catalog.parsed_file(key(b, "etag:1", "auto")).await.unwrap().as_deref(), Some(&b"other file"[..]));
        // several at once (a registration's files), in one transaction
        let (c, d) = ("s3://b/c.nc", "s3://b/d.nc");
        let batch = [(key(c, "etag:7", "auto"), &b"c"[..]), (key(d, "etag:8", "auto"), &b"d"[..])];
        catalog.put_parsed_files(&batch).await.unwrap();
        assert_eq!(catalog.parsed_file(key(c, "etag:7", "auto")).await.unwrap().as_deref(), Some(&b"c"[..]));
        assert_eq!(catalog.parsed_file(key(d, "etag:8", "auto")).await.unwrap().as_deref(), Some(&b"d"[..]));
        catalog.put_parsed_files(&[]).await.unwrap();
        // looked up together (a rescan's unchanged files), in the keys' order, past one batch
        let wanted = [key(d, "etag:8", "auto"), key(a, "etag:1", "auto"), key(c, "etag:7", "hdf5"), key(b, "etag:1", "auto")];
        let found = catalog.parsed_files(&wanted).await.unwrap();
        assert_eq!(found, [Some(b"d".to_vec()), None, None, Some(b"other file".to_vec())]);
        let urls: Vec<String> = (0..1200).map(|i| format!("s3://b/many/{i}.nc")).collect();
        let many: Vec<(ParsedKey<'_>, &[u8])> = urls.iter().map(|u| (key(u, "etag:1", "auto"), u.as_bytes())).collect();
        catalog.put_parsed_files(&many).await.unwrap();
        let keys: Vec<ParsedKey<'_>> = urls.iter().rev().map(|u| key(u, "etag:1", "auto")).collect();
        let found = catalog.parsed_files(&keys).await.unwrap();
        assert!(found.iter().zip(urls.iter().rev()).all(|(f, u)| f.as_deref() == Some(u.as_bytes())));
        assert!(catalog.parsed_files(&[]).await.unwrap().is_empty());
    }

    async fn a_version_reads_back_as_written(catalog) {
        let store = demo();
        let written = catalog.write_version("demo", &store, VersionOptions { fill_missing: true, ..VersionOptions::default() }).await.unwrap();
        assert!(written.created);
        let head = written.head;
        assert_eq!((head.store.as_str(), head.fill_missing), ("demo", true));
        assert!((head.created_at_ms - now_ms()).abs() < 60_000, "{head:?}");
        assert_eq!(catalog.current_version("demo").await.unwrap(), Some(head.clone()));
        assert_eq!(catalog.version("demo", head.id).await.unwrap(), Some(head.clone()));
        assert_eq!(catalog.version("other", head.id).await.unwrap(), None, "a version belongs to its store");
        assert_eq!(catalog.head("demo", None).await.unwrap(), StoreHead::Version(head.clone()));
        assert_eq!(catalog.head("demo", Some(head.id)).await.unwrap(), StoreHead::Version(head.clone()));
        assert_eq!(catalog.head("demo", Some(head.id + 1000)).await.unwrap(), StoreHead::Unknown);
        assert_eq!(catalog.head("other", Some(head.id)).await.unwrap(), StoreHead::Unknown);
        assert_eq!(catalog.head("never", None).await.unwrap(), StoreHead::Unknown);

        let nodes = catalog.nodes(head.id).await.unwrap();
        let paths: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["", "g", "g/x", "y"], "implicit groups included, in path order");
        assert_eq!(nodes[0].parse_metadata().unwrap()["attributes"]["title"], "demo");
        assert_eq!((nodes[1].tile_shape.as_deref(), nodes[2].tile_shape.as_deref()), (None, Some(&[2u64][..])));
        assert_eq!(nodes[2].parse_metadata().unwrap()["shape"], json!([16]));
        assert!(!nodes[2].parse_metadata().unwrap().contains_key("manifest"), "the manifest lives in blocks");

        let tiles = catalog.tiles(head.id).await.unwrap();
        assert_eq!(tiles, [("g/x".to_owned(), 0), ("g/x".to_owned(), 2), ("y".to_owned(), 0)]);
        let block = ManifestBlock::decode(&catalog.block(head.id, "g/x", 0).await.unwrap().unwrap()).unwrap();
        match block.get(0) {
            ChunkRef::Virtual { source, offset: 0, length: 8 } => assert_eq!(source.url, "s3://bucket/a.nc"),
            other => panic!("chunk 0: {other:?}"),
        }
        assert_eq!(block.get(1), ChunkRef::Inline(bytes::Bytes::from_static(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40])));
        assert_eq!(catalog.block(head.id, "g/x", 1).await.unwrap(), None, "an empty tile has no block");

        let a = SourceFacts { etag: Some("\"a1\"".into()), last_modified: None, size: Some(100) };
        let sources = catalog.sources(head.id).await.unwrap();
        assert_eq!(sources, [("s3://bucket/a.nc".to_owned(), a), ("s3://bucket/b.nc".to_owned(), SourceFacts::default())]);
        assert_eq!(catalog.stores_using("s3://bucket/").await.unwrap(), ["demo"]);

        let record = catalog.store("demo").await.unwrap().unwrap();
        assert_eq!((&record.head, &record.summary, record.summary.arrays), (&head, &store.summary, 2));
        assert_eq!(catalog.list_stores(None, 10).await.unwrap().len(), 1);
    }

    async fn a_deleted_store_reads_as_deleted_until_registered_again(catalog) {
        let first = catalog.write_version("d", &demo(), VersionOptions::default()).await.unwrap().head;
        let before = now_ms();
        assert!(catalog.delete_store("d").await.unwrap());
        let Ok(StoreHead::Deleted(at)) = catalog.head("d", None).await else { panic!("not deleted") };
        assert!((before - 1000..=now_ms() + 1000).contains(&at), "deleted at {at}, now {before}");
        assert_eq!(catalog.deleted_at("d").await.unwrap(), Some(at));
        assert_eq!(catalog.head("d", Some(first.id)).await.unwrap(), StoreHead::Deleted(at), "pinned: deleted too");
        assert_eq!(catalog.current_version("d").await.unwrap(), None);
        assert!(catalog.store("d").await.unwrap().is_none());
        assert!(!catalog.delete_store("d").await.unwrap(), "nothing left to delete");

        let again = catalog.write_version("d", &demo(), VersionOptions::default()).await.unwrap();
        assert!(again.created, "a deleted store is created again");
        assert_eq!(catalog.head("d", None).await.unwrap(), StoreHead::Version(again.head.clone()));
        assert_eq!(catalog.deleted_at("d").await.unwrap(), None);
        assert_eq!(catalog.head("d", Some(first.id)).await.unwrap(), StoreHead::Unknown, "the old version is gone");
        assert!(again.head.id > first.id, "version ids are never reused");
    }

    async fn versions_are_listed_newest_first_and_bounded(catalog) {
        let mut written = Vec::new();
        for _ in 0..3 {
            written.push(catalog.write_version("v", &demo(), VersionOptions::default()).await.unwrap().head);
        }
        catalog.write_version("other", &demo(), VersionOptions { fill_missing: true, ..VersionOptions::default() }).await.unwrap();
        let listed = catalog.versions("v", 10).await.unwrap();
        let expected: Vec<ListedVersion> = written
            .iter()
            .rev()
            .enumerate()
            .map(|(i, head)| ListedVersion { head: head.clone(), current: i == 0 })
            .collect();
        assert_eq!(listed, expected, "newest first, only the newest current, no other store's");
        let two = catalog.versions("v", 2).await.unwrap();
        assert_eq!(two, expected[..2], "bounded by the limit, from the newest");
        assert_eq!(catalog.versions("never", 10).await.unwrap(), vec![]);
        catalog.prune("v", Retention { keep_versions: 0, keep_ms: 0 }).await.unwrap();
        assert_eq!(catalog.versions("v", 10).await.unwrap(), expected[..1], "pruned versions are not listed");
        assert!(catalog.delete_store("v").await.unwrap());
        assert_eq!(catalog.versions("v", 10).await.unwrap(), vec![], "a deleted store has none");
    }

    async fn retention_keeps_the_current_version(catalog) {
        let old = catalog.write_version("r", &demo(), VersionOptions::default()).await.unwrap();
        let current = catalog.write_version("r", &demo(), VersionOptions::default()).await.unwrap();
        assert!(!current.created);
        let current = current.head;
        assert_eq!(catalog.head("r", Some(old.head.id)).await.unwrap(), StoreHead::Version(old.head.clone()));
        let all = Retention { keep_versions: 0, keep_ms: 0 };
        assert_eq!(catalog.prune("r", all).await.unwrap(), [old.head.id], "all but the current one");
        assert_eq!(catalog.prune("r", all).await.unwrap(), Vec::<i64>::new());
        assert_eq!(catalog.head("r", None).await.unwrap(), StoreHead::Version(current.clone()));
        assert_eq!(catalog.head("r", Some(old.head.id)).await.unwrap(), StoreHead::Unknown);
        assert_eq!(catalog.tiles(current.id).await.unwrap().len(), 3);
        assert!(catalog.block(current.id, "y", 0).await.unwrap().is_some(), "the current version's blocks stay");
        assert_eq!(catalog.tiles(old.head.id).await.unwrap(), vec![]);
    }

    // 20,000 arrays: four values per array are more than SQLite binds in one statement (32,766)
    // and PostgreSQL too (65,535); so are the 18,000 tiles a derived version drops, two each.
    async fn versions_of_many_arrays_are_written_and_derived(catalog) {
        const N: usize = 20_000;
        let name = |i: usize| format!("a{i:06}");
        let store = many_arrays(N);
        let base = catalog.write_version("many", &store, VersionOptions::default()).await.unwrap().head;
        assert_eq!(catalog.nodes(base.id).await.unwrap().len(), N + 1);
        assert_eq!(catalog.tiles(base.id).await.unwrap().len(), N);
        assert!(catalog.block(base.id, &name(N - 1), 0).await.unwrap().is_some());

        // Derived: arrays 0..17,000 emptied, 17,000..18,000 removed, 18,000..19,000 given new
        // blocks, the rest shared with the base.
        let removed: Vec<String> = (17_000..18_000).map(name).collect();
        let nodes: Vec<_> = store.nodes.iter().filter(|n| !removed.iter().any(|r| r == n.path.as_str())).cloned().collect();
        let data = catalog.block(base.id, &name(0), 0).await.unwrap().unwrap();
        let sources = Default::default();
        let derived = DerivedVersion {
            base: base.id,
            nodes: &nodes,
            dropped_nodes: removed,
            dropped_tiles: (0..17_000).chain(18_000..19_000).map(|i| (name(i), 0)).collect(),
            blocks: (18_000..19_000).map(|i| (name(i), 0, data.clone())).collect(),
            sources: &sources,
            summary: store.summary.clone(),
        };
        let head = catalog.write_derived("many", &derived, VersionOptions::default()).await.unwrap().head;
        assert_eq!(catalog.nodes(head.id).await.unwrap().len(), N - 1_000 + 1);
        let tiles = catalog.tiles(head.id).await.unwrap();
        assert_eq!((tiles.len(), tiles[0].0.as_str()), (2_000, "a018000"));
        for (array, what) in [(0, "an emptied array"), (17_000, "a removed array")] {
            assert_eq!(catalog.block(head.id, &name(array), 0).await.unwrap(), None, "{what}");
        }
        assert_eq!(catalog.block(head.id, &name(18_000), 0).await.unwrap(), Some(data), "a new block");
        assert_eq!(catalog.prune("many", Retention { keep_versions: 0, keep_ms: 0 }).await.unwrap(), [base.id]);
        assert!(catalog.block(head.id, &name(19_000), 0).await.unwrap().is_some(), "a block shared with the base");
        assert!(catalog.delete_store("many").await.unwrap());
        assert_eq!(catalog.tiles(head.id).await.unwrap(), vec![]);
    }

    // Writers replace and delete one store while readers ask for its head: once the store has
    // existed, a reader sees a version or a deletion, never an unknown store (a 404 that a
    // client would read as fill values).
    async fn readers_never_see_a_store_being_replaced_as_unknown(catalog) {
        let catalog = catalog.catalog.clone();
        catalog.write_version("race", &demo(), VersionOptions::default()).await.unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
        let mut readers = Vec::new();
        for _ in 0..5 {
            let (catalog, stop, counts) = (catalog.clone(), stop.clone(), counts.clone());
            readers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let i = match catalog.head("race", None).await.unwrap() {
                        StoreHead::Version(_) => 0,
                        StoreHead::Deleted(_) => 1,
                        StoreHead::Unknown => 2,
                    };
                    counts[i].fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut writers = Vec::new();
        for _ in 0..3 {
            let catalog = catalog.clone();
            writers.push(tokio::spawn(async move {
                let store = demo();
                let mut rounds = 0;
                while Instant::now() < deadline || rounds < 10 {
                    catalog.write_version("race", &store, VersionOptions::default()).await.unwrap();
                    catalog.delete_store("race").await.unwrap();
                    rounds += 1;
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.await.unwrap();
        }
        let [versions, deleted, unknown] = counts.each_ref().map(|c| c.load(Ordering::Relaxed));
        eprintln!("{}: heads read: {versions} versions, {deleted} deleted, {unknown} unknown", catalog.backend());
        assert!(versions > 0 && deleted > 0, "the readers saw both states: {versions} versions, {deleted} deleted");
        assert_eq!(unknown, 0, "{unknown} reads saw neither the store nor its deletion");
    }

    async fn writes_keep_to_their_origin_and_their_preconditions(catalog) {
        let origin = Some(r#"{"repository":"s3://bucket/repo","branch":"main"}"#.to_owned());
        let synced = VersionOptions { origin: origin.clone(), unless_same_origin: true, ..VersionOptions::default() };
        let first = catalog.write_version("o", &demo(), synced.clone()).await.unwrap();
        assert!(first.created && !first.unchanged);
        assert_eq!(catalog.origin(first.head.id).await.unwrap(), origin);
        assert_eq!(catalog.origins().await.unwrap(), [("o".to_owned(), origin.clone().unwrap())]);
        let again = catalog.write_version("o", &demo(), synced).await.unwrap();
        assert!(again.unchanged && !again.created, "the same origin writes nothing");
        assert_eq!(again.head, first.head);

        let absent = VersionOptions { expected: Some(Expected::Absent), ..VersionOptions::default() };
        let refused = catalog.write_version("o", &demo(), absent.clone()).await.unwrap_err();
        assert!(matches!(refused, CatalogError::PreconditionFailed { current: Some(id), .. } if id == first.head.id));
        let current = VersionOptions { expected: Some(Expected::Version(first.head.id)), ..VersionOptions::default() };
        let plain = catalog.write_version("o", &demo(), current).await.unwrap();
        assert_eq!(catalog.origin(plain.head.id).await.unwrap(), None);
        assert_eq!(catalog.origins().await.unwrap(), vec![], "only current versions' origins are followed");
        assert!(catalog.write_version("new", &demo(), absent).await.unwrap().created);
        assert_eq!(catalog.stores_using("s3://bucket/").await.unwrap(), ["new", "o"]);
        assert_eq!(catalog.stores_using("s3://other/").await.unwrap(), Vec::<String>::new());

        let record = ObjectStoreRecord { name: "b".into(), url: "s3://bucket/".into(), options: Default::default() };
        assert!(catalog.put_object_store(&record).await.unwrap(), "new");
        assert!(!catalog.put_object_store(&record).await.unwrap(), "replaced");
        assert_eq!(catalog.object_stores().await.unwrap(), [record]);
        assert!(catalog.delete_object_store("b").await.unwrap());
        assert!(!catalog.delete_object_store("b").await.unwrap(), "nothing left to delete");
        assert_eq!(catalog.object_stores().await.unwrap(), vec![]);
    }

    async fn a_version_keeps_its_files_as_rows_read_a_page_at_a_time(catalog) {
        // More records than one statement writes on either database, most of them spilled to
        // disk by a registration's scratch log before they are written.
        let n = 25_000u64;
        let scratch = Scratch::new(0, None);
        let mut log = SpillLog::new(&scratch);
        for i in 0..n {
            log.append(format!("{{\"url\":\"s3://bucket/f{i:05}.nc\"}}\n").as_bytes());
        }
        assert!(log.spilled(), "the records went to disk");
        let files = FileRows::new(log);
        let options = VersionOptions { origin: Some("{}".into()), files: Some(files), ..VersionOptions::default() };
        let first = catalog.write_version("f", &demo(), options).await.unwrap();
        let id = first.head.id;
        let url = |i: u64| format!("{{\"url\":\"s3://bucket/f{i:05}.nc\"}}");
        assert_eq!(catalog.version_files(id, 0, 3).await.unwrap(), [url(0), url(1), url(2)]);
        assert_eq!(catalog.version_files(id, n - 2, 10).await.unwrap(), [url(n - 2), url(n - 1)], "the last page");
        assert_eq!(catalog.version_files(id, n, 10).await.unwrap(), Vec::<String>::new(), "past the end");
        let all = catalog.version_files(id, 0, u64::MAX).await.unwrap();
        assert_eq!(all.len() as u64, n);
        assert!(all.iter().enumerate().all(|(i, r)| *r == url(i as u64)), "in the order given");

        // A version written without files has none; deleting the store deletes them.
        let plain = catalog.write_version("f", &demo(), VersionOptions::default()).await.unwrap();
        assert_eq!(catalog.version_files(plain.head.id, 0, 10).await.unwrap(), Vec::<String>::new());
        assert!(catalog.delete_store("f").await.unwrap());
        assert_eq!(catalog.version_files(id, 0, 10).await.unwrap(), Vec::<String>::new(), "gone with the store");
    }
}
