//! What the two catalog backends share: the statements that read alike in both, the mapping of
//! result rows to catalog types, and the rows a new version writes.
//!
//! sqlx binds `$N` placeholders in SQLite as in PostgreSQL, so a statement that differs only by
//! placeholder style is written once, here. What truly differs (timestamps, JSON columns, row
//! locks, notifications, how many rows one statement may bind) stays in each backend.

use std::sync::Arc;

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, Decode, Postgres, Row, SqlSafeStr, SqlStr, Sqlite, Type};

use super::{
    CatalogError, Expected, ListedVersion, NewVersion, ObjectStoreRecord, StoreHead, StoreRecord, StoredNode,
    VersionHead, VersionOptions, Written,
};
use crate::zarr::document::SourceFacts;
use crate::zarr::metadata::NodeKind;
use crate::zarr::validate::{Summary, ValidNode};

/// Rows read between two turns given back to the async worker by [`collect_yielding`].
const YIELD_ROWS: usize = 256;

/// Reads every row of `rows` with `read`, one at a time as they arrive, and gives the async
/// worker back to other tasks every [`YIELD_ROWS`] rows. A version's nodes (100,000 rows, 45 MB)
/// arrive from a local PostgreSQL faster than they are decoded: read at once, they held one of
/// the two workers for hundreds of milliseconds, and a cached 4-byte chunk read queued behind
/// it took up to 228 ms (bench/many_arrays.py; 0.2 ms otherwise).
pub(super) async fn collect_yielding<R, T>(
    mut rows: impl futures::Stream<Item = Result<R, sqlx::Error>> + Unpin,
    read: impl Fn(&R) -> Result<T, CatalogError>,
) -> Result<Vec<T>, CatalogError> {
    use futures::TryStreamExt;
    let mut found = Vec::new();
    while let Some(row) = rows.try_next().await? {
        found.push(read(&row)?);
        if found.len() % YIELD_ROWS == 0 {
            tokio::task::yield_now().await;
        }
    }
    Ok(found)
}

/// The largest batch of encoded blocks written in one statement.
const BLOCK_BATCH_BYTES: usize = 8 << 20;

pub(super) const NODES: &str = "select path, metadata, tile_shape from nodes where version_id = $1 order by path";
pub(super) const BLOCK: &str = "select b.data from tiles t join blocks b on b.id = t.block_id \
                                where t.version_id = $1 and t.node = $2 and t.tile = $3";
pub(super) const TILES: &str = "select node, tile from tiles where version_id = $1 order by node, tile";
pub(super) const SOURCES: &str =
    "select url, etag, last_modified, size from sources where version_id = $1 order by url";
/// A derived version starts with every source of its base.
pub(super) const COPY_SOURCES: &str = "insert into sources (version_id, url, etag, last_modified, size) \
                                       select $1, url, etag, last_modified, size from sources where version_id = $2";
/// Ends an insert into `sources`: a URL already recorded for the version gets the newer facts.
pub(super) const SOURCES_CONFLICT: &str = " on conflict (version_id, url) do update set etag = excluded.etag, \
                                           last_modified = excluded.last_modified, size = excluded.size";
/// The origin of one version, with its store's name.
pub(super) const ORIGIN: &str = "select store, origin from versions where id = $1 and origin is not null";
/// The origin of every store's current version that has one.
pub(super) const ORIGINS: &str = "select s.name as store, v.origin from stores s \
                                  join versions v on v.id = s.current_version \
                                  where v.origin is not null order by s.name";
/// A store's current version, read once the transaction holds the store's row.
pub(super) const CURRENT_VERSION: &str = "select current_version from stores where name = $1";
/// A registration that creates a store ends its deletion mark, in the transaction that makes it
/// current: a reader sees the mark or the store, never neither.
pub(super) const UNMARK_DELETED: &str = "delete from deleted_stores where name = $1";
pub(super) const DELETE_STORE: &str = "delete from stores where name = $1";
pub(super) const DELETE_OBJECT_STORE: &str = "delete from object_stores where name = $1";

/// How a backend spells the columns that differ inside otherwise shared statements.
pub(super) struct Dialect {
    /// A timestamp column as unix milliseconds.
    pub millis: fn(&str) -> String,
    /// A JSON column as text.
    pub json_text: fn(&str) -> String,
    /// Whether a text column starts with a text parameter.
    pub starts_with: fn(&str, &str) -> String,
}

/// The statements whose text depends on the [`Dialect`], spelled once per catalog.
#[derive(Debug, Clone)]
pub(super) struct Statements {
    /// The columns of a [`VersionHead`] read from `versions v`.
    pub head_columns: String,
    /// The current version's head and origin, read inside the transaction that would replace it.
    pub current_origin: SqlStr,
    pub head: SqlStr,
    pub store: SqlStr,
    pub list_stores: SqlStr,
    /// The stores with a version referencing a URL under a prefix.
    pub stores_using: SqlStr,
    pub versions: SqlStr,
    pub object_stores: SqlStr,
}

impl Statements {
    pub fn new(d: &Dialect) -> Self {
        let millis = d.millis;
        let head = format!("v.store, v.id, v.fill_missing, v.portable, {} as created_at_ms", millis("v.created_at"));
        let record = format!(
            "select {head}, {} as summary, {} as store_created_at_ms \
             from stores s join versions v on v.id = s.current_version",
            (d.json_text)("v.summary"),
            millis("s.created_at"),
        );
        Self {
            current_origin: sql(format!(
                "select {head}, v.origin from stores s join versions v on v.id = s.current_version where s.name = $1"
            )),
            // One statement, so one snapshot: a registration ends the deletion mark and a deletion
            // sets it in the transaction that changes the store, and this row has one or the other.
            head: sql(format!(
                "select {head}, {} as deleted_at_ms from (select $1 as name) q \
                 left join versions v on v.store = q.name \
                   and v.id = coalesce($2, (select s.current_version from stores s where s.name = q.name)) \
                 left join deleted_stores d on d.name = q.name",
                millis("d.deleted_at")
            )),
            store: sql(format!("{record} where s.name = $1")),
            list_stores: sql(format!("{record} where s.name > $1 order by s.name limit $2")),
            stores_using: sql(format!(
                "{record} where s.name in (select w.store from sources u join versions w on w.id = u.version_id \
                 where {}) order by s.name",
                (d.starts_with)("u.url", "$1")
            )),
            // Newest first, by the `versions_store_idx` index: ids grow with time.
            versions: sql(format!(
                "select {head}, v.id = s.current_version as current from versions v \
                 join stores s on s.name = v.store where v.store = $1 order by v.id desc limit $2"
            )),
            object_stores: sql(format!(
                "select name, url, {} as options from object_stores order by name",
                (d.json_text)("options")
            )),
            head_columns: head,
        }
    }
}

/// Built once: clones share the text.
fn sql(text: String) -> SqlStr {
    AssertSqlSafe(Arc::<str>::from(text)).into_sql_str()
}

/// A column type both backends decode.
pub(super) trait Field:
    for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite>
{
}

impl<T> Field for T where T: for<'r> Decode<'r, Postgres> + Type<Postgres> + for<'r> Decode<'r, Sqlite> + Type<Sqlite> {}

/// A result row of either backend, read by column name.
pub(super) trait CatalogRow {
    fn field<T: Field>(&self, column: &str) -> Result<T, sqlx::Error>;
}

impl CatalogRow for PgRow {
    fn field<T: Field>(&self, column: &str) -> Result<T, sqlx::Error> {
        self.try_get(column)
    }
}

impl CatalogRow for SqliteRow {
    fn field<T: Field>(&self, column: &str) -> Result<T, sqlx::Error> {
        self.try_get(column)
    }
}

pub(super) fn version_head(row: &impl CatalogRow) -> Result<VersionHead, sqlx::Error> {
    Ok(VersionHead {
        store: row.field("store")?,
        id: row.field("id")?,
        created_at_ms: row.field("created_at_ms")?,
        fill_missing: row.field("fill_missing")?,
        portable: row.field("portable")?,
    })
}

/// What a write with [`VersionOptions::unless_same_origin`] answers instead of writing, given the
/// row of [`Statements::current_origin`]: the current version, when it has the origin asked for.
pub(super) fn unchanged(
    row: Option<&impl CatalogRow>,
    options: &VersionOptions,
) -> Result<Option<Written>, CatalogError> {
    let Some(row) = row else { return Ok(None) };
    let origin: Option<String> = row.field("origin")?;
    if options.origin.is_none() || origin != options.origin {
        return Ok(None);
    }
    Ok(Some(Written { head: version_head(row)?, created: false, unchanged: true }))
}

/// How a write of a whole store begins, once it holds the store's row.
pub(super) enum Opened {
    /// The write goes on; `created` when the store did not exist before.
    Store { created: bool },
    /// Nothing is to be written: the current version has the origin asked for.
    Unchanged(Written),
}

/// `Ok` when a derived version may be written over `base`: the store's `current` version is
/// as the write expects and is still `base` ([`CatalogError::Conflict`] otherwise).
pub(super) fn check_base(
    name: &str,
    base: i64,
    current: Option<i64>,
    options: &VersionOptions,
) -> Result<(), CatalogError> {
    Expected::check(options.expected, name, current)?;
    if current != Some(base) {
        return Err(CatalogError::Conflict(format!(
            "the current version of store {name:?}, which changed during this update"
        )));
    }
    Ok(())
}

/// A row of [`Statements::versions`].
pub(super) fn listed_version(row: &impl CatalogRow) -> Result<ListedVersion, sqlx::Error> {
    Ok(ListedVersion { head: version_head(row)?, current: row.field("current")? })
}

/// A row of [`Statements::head`]: the version if there is one, else the deletion mark.
pub(super) fn store_head(row: &impl CatalogRow) -> Result<StoreHead, sqlx::Error> {
    Ok(match row.field::<Option<i64>>("id")? {
        Some(_) => StoreHead::Version(version_head(row)?),
        None => row.field::<Option<i64>>("deleted_at_ms")?.map_or(StoreHead::Unknown, StoreHead::Deleted),
    })
}

pub(super) fn store_record(row: &impl CatalogRow) -> Result<StoreRecord, CatalogError> {
    let summary: String = row.field("summary")?;
    Ok(StoreRecord {
        head: version_head(row)?,
        store_created_at_ms: row.field("store_created_at_ms")?,
        summary: serde_json::from_str(&summary).map_err(|e| CatalogError::Corrupt(format!("version summary: {e}")))?,
    })
}

pub(super) fn node(row: &impl CatalogRow) -> Result<StoredNode, CatalogError> {
    let path: String = row.field("path")?;
    let metadata: String = row.field("metadata")?;
    let tile_shape = row
        .field::<Option<String>>("tile_shape")?
        .map(|t| serde_json::from_str::<Vec<u64>>(&t))
        .transpose()
        .map_err(|e| CatalogError::Corrupt(format!("tile shape of node {path:?}: {e}")))?;
    Ok(StoredNode { path, metadata, tile_shape })
}

pub(super) fn tile(row: &impl CatalogRow) -> Result<(String, u64), sqlx::Error> {
    Ok((row.field("node")?, row.field::<i64>("tile")? as u64))
}

pub(super) fn source(row: &impl CatalogRow) -> Result<(String, SourceFacts), sqlx::Error> {
    let facts = SourceFacts {
        etag: row.field("etag")?,
        last_modified: row.field("last_modified")?,
        size: row.field::<Option<i64>>("size")?.map(|s| s as u64),
    };
    Ok((row.field("url")?, facts))
}

/// A row of [`ORIGIN`] or [`ORIGINS`]: a store's name and an origin.
pub(super) fn origin(row: &impl CatalogRow) -> Result<(String, String), sqlx::Error> {
    Ok((row.field("store")?, row.field("origin")?))
}

pub(super) fn object_store(row: &impl CatalogRow) -> Result<ObjectStoreRecord, CatalogError> {
    let options: String = row.field("options")?;
    Ok(ObjectStoreRecord {
        name: row.field("name")?,
        url: row.field("url")?,
        options: serde_json::from_str(&options)
            .map_err(|e| CatalogError::Corrupt(format!("object store options: {e}")))?,
    })
}

/// Nodes as written, column by column.
pub(super) struct NodeColumns<'a> {
    pub paths: Vec<&'a str>,
    /// The nodes' metadata, borrowed: validation left it as the text to store.
    pub metadata: Vec<&'a str>,
    /// For arrays, the shape of their tiles in chunks, as JSON.
    pub tile_shapes: Vec<Option<String>>,
}

impl<'a> NodeColumns<'a> {
    pub fn new(nodes: &'a [ValidNode]) -> Self {
        Self {
            paths: nodes.iter().map(|n| n.path.as_str()).collect(),
            metadata: nodes.iter().map(|n| &*n.json).collect(),
            tile_shapes: nodes.iter().map(|n| tile_json(&n.kind)).collect(),
        }
    }
}

fn tile_json(kind: &NodeKind) -> Option<String> {
    match kind {
        NodeKind::Array(layout) => serde_json::to_string(layout.grid.tile_shape()).ok(),
        NodeKind::Group => None,
    }
}

/// Source facts as written, column by column.
#[derive(Default)]
pub(super) struct SourceColumns<'a> {
    pub urls: Vec<&'a str>,
    pub etags: Vec<Option<&'a str>>,
    pub last_modified: Vec<Option<&'a str>>,
    pub sizes: Vec<Option<i64>>,
}

impl<'a> SourceColumns<'a> {
    /// The sources a new version records: every source of a whole store, with the facts
    /// recorded for it (if any); those new to a derived version (it shares its base's).
    pub fn of(content: NewVersion<'a>) -> Self {
        match content {
            NewVersion::Whole(store) => Self::new(store.sources()),
            NewVersion::Derived(version) => Self::new(version.sources.iter().map(|(u, f)| (u.as_str(), Some(f)))),
        }
    }

    fn new(sources: impl Iterator<Item = (&'a str, Option<&'a SourceFacts>)>) -> Self {
        let mut c = Self::default();
        for (url, facts) in sources {
            c.urls.push(url);
            c.etags.push(facts.and_then(|f| f.etag.as_deref()));
            c.last_modified.push(facts.and_then(|f| f.last_modified.as_deref()));
            c.sizes.push(facts.and_then(|f| f.size).map(|s| s as i64));
        }
        c
    }

    pub fn len(&self) -> usize {
        self.urls.len()
    }
}

/// An encoded block ready to be inserted.
pub(super) struct EncodedBlock {
    pub node: String,
    pub tile: i64,
    pub data: Vec<u8>,
}

impl<'a> NewVersion<'a> {
    /// The counts of the new version.
    pub(super) fn summary(self) -> &'a Summary {
        match self {
            Self::Whole(store) => &store.summary,
            Self::Derived(version) => &version.summary,
        }
    }

    /// Every node of the new version.
    pub(super) fn nodes(self) -> &'a [ValidNode] {
        match self {
            Self::Whole(store) => &store.nodes,
            Self::Derived(version) => version.nodes,
        }
    }

    /// The blocks the new version writes (a whole store's read back from scratch space, a
    /// derived version's new ones), in batches of at most `max_rows` blocks and
    /// [`BLOCK_BATCH_BYTES`].
    pub(super) fn block_batches(
        self,
        max_rows: usize,
    ) -> impl Iterator<Item = Result<Vec<EncodedBlock>, CatalogError>> + Send + 'a {
        let blocks: Box<dyn Iterator<Item = Result<EncodedBlock, CatalogError>> + Send + 'a> = match self {
            Self::Whole(store) => Box::new(store.blocks().map(|b| {
                let b = b?;
                Ok(EncodedBlock { node: b.node.as_str().to_owned(), tile: b.tile as i64, data: b.data })
            })),
            Self::Derived(version) => Box::new(version.blocks.iter().map(|(node, tile, data)| {
                Ok(EncodedBlock { node: node.clone(), tile: *tile as i64, data: data.clone() })
            })),
        };
        batches(blocks, max_rows)
    }
}

fn batches(
    mut blocks: impl Iterator<Item = Result<EncodedBlock, CatalogError>>,
    max_rows: usize,
) -> impl Iterator<Item = Result<Vec<EncodedBlock>, CatalogError>> {
    let mut pending: Option<EncodedBlock> = None;
    std::iter::from_fn(move || {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while batch.len() < max_rows {
            let b = match pending.take().map(Ok).or_else(|| blocks.next()) {
                None => break,
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(b)) => b,
            };
            if !batch.is_empty() && bytes + b.data.len() > BLOCK_BATCH_BYTES {
                pending = Some(b);
                break;
            }
            bytes += b.data.len();
            batch.push(b);
        }
        (!batch.is_empty()).then_some(Ok(batch))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(sizes: &[usize]) -> impl Iterator<Item = Result<EncodedBlock, CatalogError>> + '_ {
        sizes.iter().map(|&n| Ok(EncodedBlock { node: "x".into(), tile: 0, data: vec![0; n] }))
    }

    fn lens(batches: impl Iterator<Item = Result<Vec<EncodedBlock>, CatalogError>>) -> Vec<usize> {
        batches.map(|b| b.map(|b| b.len())).collect::<Result<_, _>>().unwrap_or_default()
    }

    #[test]
    fn batches_stop_at_their_rows_or_bytes() {
        assert_eq!(lens(batches(blocks(&[1; 10]), 4)), [4, 4, 2]);
        assert_eq!(lens(batches(blocks(&[1; 10]), usize::MAX)), [10]);
        let big = BLOCK_BATCH_BYTES / 2;
        assert_eq!(lens(batches(blocks(&[big, big, 1, big]), usize::MAX)), [2, 2], "the bytes bound");
        assert_eq!(lens(batches(blocks(&[BLOCK_BATCH_BYTES * 2, 1]), 8)), [1, 1], "one block past the bound");
        assert_eq!(lens(batches(blocks(&[]), 8)), Vec::<usize>::new());
    }
}
