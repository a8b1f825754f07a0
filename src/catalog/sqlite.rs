//! The SQLite catalog: the embedded default, one file, no server to run.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::query_builder::Separated;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection, Transaction};

use super::rows::{
    self, BLOCK, COPY_SOURCES, DELETE_OBJECT_STORE, DELETE_STORE, Dialect, EncodedBlock, NODES, NodeColumns, ORIGIN,
    ORIGINS, SOURCES, SOURCES_CONFLICT, SourceColumns, Statements, TILES, UNMARK_DELETED,
};
use super::{
    Catalog, CatalogError, DerivedVersion, Expected, ListedVersion, ObjectStoreRecord, Retention, StoreHead,
    StoreRecord, StoredNode, VersionHead, VersionOptions, Written, unique_violation,
};
use crate::zarr::document::SourceFacts;
use crate::zarr::validate::{Summary, ValidNode, ValidatedStore};

/// The most values one statement binds: SQLITE_MAX_VARIABLE_NUMBER of the bundled SQLite.
const MAX_VARIABLES: usize = 32_766;

/// Timestamps are unix milliseconds already, JSON is text.
const DIALECT: Dialect = Dialect { millis: |column| column.to_owned(), json_text: |column| column.to_owned() };

/// A catalog in an SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteCatalog {
    pool: SqlitePool,
    sql: Statements,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl SqliteCatalog {
    /// Opens (creating the file and its directory if needed) and applies migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, CatalogError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30));
        if let Some(dir) = options.get_filename().parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| sqlx::Error::Configuration(format!("creating {}: {e}", dir.display()).into()))?;
        }
        let pool = SqlitePoolOptions::new().max_connections(max_connections.max(1)).connect_with(options).await?;
        sqlx::migrate!("migrations/sqlite").run(&pool).await?;
        Ok(Self { pool, sql: Statements::new(&DIALECT) })
    }
}

async fn insert_version(
    tx: &mut Transaction<'_, Sqlite>,
    name: &str,
    summary: &Summary,
    options: VersionOptions,
    now: i64,
) -> Result<VersionHead, CatalogError> {
    let summary = serde_json::to_string(summary).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
    let row = sqlx::query(
        "insert into versions (store, created_at, summary, fill_missing, origin) values ($1, $2, $3, $4, $5) \
         returning store, id, created_at as created_at_ms, fill_missing",
    )
    .bind(name)
    .bind(now)
    .bind(summary)
    .bind(options.fill_missing)
    .bind(options.origin)
    .fetch_one(&mut **tx)
    .await?;
    Ok(rows::version_head(&row)?)
}

/// Runs `insert` (`insert into t (c1, ...) `, ended by `tail`) over `rows` rows of `columns`
/// values each, as many rows per statement as SQLite binds values; `push` binds row `i`.
async fn insert_rows(
    tx: &mut SqliteConnection,
    insert: &str,
    tail: &str,
    columns: usize,
    rows: usize,
    mut push: impl FnMut(&mut Separated<'_, Sqlite, &'static str>, usize),
) -> Result<(), CatalogError> {
    let per_statement = MAX_VARIABLES / columns;
    for start in (0..rows).step_by(per_statement) {
        let mut q = QueryBuilder::<Sqlite>::new(insert);
        q.push_values(start..rows.min(start + per_statement), |mut b, i| push(&mut b, i));
        q.push(tail);
        q.build().execute(&mut *tx).await?;
    }
    Ok(())
}

async fn insert_nodes(tx: &mut SqliteConnection, version: i64, nodes: &[ValidNode]) -> Result<(), CatalogError> {
    let c = NodeColumns::new(nodes);
    insert_rows(tx, "insert into nodes (version_id, path, metadata, tile_shape) ", "", 4, nodes.len(), |b, i| {
        b.push_bind(version).push_bind(c.paths[i]).push_bind(c.metadata[i]).push_bind(&c.tile_shapes[i]);
    })
    .await
}

/// Records source facts; a URL already recorded for the version gets the newer facts.
async fn insert_sources(tx: &mut SqliteConnection, version: i64, c: &SourceColumns<'_>) -> Result<(), CatalogError> {
    let insert = "insert into sources (version_id, url, etag, last_modified, size) ";
    insert_rows(tx, insert, SOURCES_CONFLICT, 5, c.len(), |b, i| {
        b.push_bind(version).push_bind(c.urls[i]).push_bind(c.etags[i]).push_bind(c.last_modified[i]);
        b.push_bind(c.sizes[i]);
    })
    .await
}

async fn make_current(tx: &mut SqliteConnection, name: &str, version: i64, now: i64) -> Result<(), CatalogError> {
    sqlx::query("update stores set current_version = $1, updated_at = $2 where name = $3")
        .bind(version)
        .bind(now)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn insert_blocks(
    tx: &mut SqliteConnection,
    store: &str,
    version: i64,
    batch: Vec<EncodedBlock>,
) -> Result<(), CatalogError> {
    // Writers are serialised by SQLite, so the next ids cannot be taken by anyone else.
    let first: i64 = sqlx::query_scalar("select coalesce(max(id), 0) + 1 from blocks").fetch_one(&mut *tx).await?;
    insert_rows(tx, "insert into blocks (id, store, data) ", "", 3, batch.len(), |b, i| {
        b.push_bind(first + i as i64).push_bind(store).push_bind(&batch[i].data);
    })
    .await?;
    insert_rows(tx, "insert into tiles (version_id, node, tile, block_id) ", "", 4, batch.len(), |b, i| {
        b.push_bind(version).push_bind(&batch[i].node).push_bind(batch[i].tile).push_bind(first + i as i64);
    })
    .await
}

/// Removes from a derived version the tiles its base shared but for those dropped.
async fn drop_tiles(tx: &mut SqliteConnection, version: i64, derived: &DerivedVersion<'_>) -> Result<(), CatalogError> {
    for nodes in derived.dropped_nodes.chunks(MAX_VARIABLES - 1) {
        let mut q = QueryBuilder::<Sqlite>::new("delete from tiles where version_id = ");
        q.push_bind(version).push(" and node in (");
        let mut list = q.separated(", ");
        for node in nodes {
            list.push_bind(node);
        }
        q.push(")").build().execute(&mut *tx).await?;
    }
    for tiles in derived.dropped_tiles.chunks((MAX_VARIABLES - 1) / 2) {
        let mut q = QueryBuilder::<Sqlite>::new("delete from tiles where version_id = ");
        q.push_bind(version).push(" and (node, tile) in (");
        q.push_values(tiles, |mut b, (node, tile)| {
            b.push_bind(node).push_bind(*tile as i64);
        });
        q.push(")").build().execute(&mut *tx).await?;
    }
    Ok(())
}

#[async_trait]
impl Catalog for SqliteCatalog {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> Result<(), CatalogError> {
        sqlx::query("select 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn current_version(&self, store: &str) -> Result<Option<VersionHead>, CatalogError> {
        let row = sqlx::query(self.sql.current_version.clone()).bind(store).fetch_optional(&self.pool).await?;
        Ok(row.as_ref().map(rows::version_head).transpose()?)
    }

    async fn version(&self, store: &str, id: i64) -> Result<Option<VersionHead>, CatalogError> {
        let row = sqlx::query(self.sql.version.clone()).bind(id).bind(store).fetch_optional(&self.pool).await?;
        Ok(row.as_ref().map(rows::version_head).transpose()?)
    }

    async fn head(&self, store: &str, pinned: Option<i64>) -> Result<StoreHead, CatalogError> {
        let row = sqlx::query(self.sql.head.clone()).bind(store).bind(pinned).fetch_one(&self.pool).await?;
        Ok(rows::store_head(&row)?)
    }

    async fn nodes(&self, version: i64) -> Result<Vec<StoredNode>, CatalogError> {
        rows::collect_yielding(sqlx::query(NODES).bind(version).fetch(&self.pool), rows::node).await
    }

    async fn block(&self, version: i64, node: &str, tile: u64) -> Result<Option<Vec<u8>>, CatalogError> {
        let query = sqlx::query_scalar(BLOCK).bind(version).bind(node).bind(tile as i64);
        Ok(query.fetch_optional(&self.pool).await?)
    }

    async fn tiles(&self, version: i64) -> Result<Vec<(String, u64)>, CatalogError> {
        let found = sqlx::query(TILES).bind(version).fetch_all(&self.pool).await?;
        Ok(found.iter().map(rows::tile).collect::<Result<_, _>>()?)
    }

    async fn sources(&self, version: i64) -> Result<Vec<(String, SourceFacts)>, CatalogError> {
        let found = sqlx::query(SOURCES).bind(version).fetch_all(&self.pool).await?;
        Ok(found.iter().map(rows::source).collect::<Result<_, _>>()?)
    }

    async fn write_version(
        &self,
        name: &str,
        store: &ValidatedStore,
        options: VersionOptions,
    ) -> Result<Written, CatalogError> {
        let now = now_ms();
        let mut tx = self.pool.begin_with("begin immediate").await?;
        let created = sqlx::query(
            "insert into stores (name, created_at, updated_at) values (?, ?, ?) on conflict (name) do nothing",
        )
        .bind(name)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if options.expected.is_some() {
            // The row is this transaction's now: the version read is the one replaced.
            let current: Option<i64> = sqlx::query_scalar("select current_version from stores where name = ?")
                .bind(name)
                .fetch_one(&mut *tx)
                .await?;
            Expected::check(options.expected, name, current)?;
        }
        if created {
            sqlx::query(UNMARK_DELETED).bind(name).execute(&mut *tx).await?;
        } else if options.unless_same_origin {
            // Dropping the transaction rolls it back.
            let row = sqlx::query(self.sql.current_origin.clone()).bind(name).fetch_optional(&mut *tx).await?;
            if let Some(written) = rows::unchanged(row.as_ref(), &options)? {
                return Ok(written);
            }
        }
        let head = insert_version(&mut tx, name, &store.summary, options, now).await?;
        insert_nodes(&mut tx, head.id, &store.nodes).await?;
        for batch in rows::block_batches(store, MAX_VARIABLES / 4) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        insert_sources(&mut tx, head.id, &SourceColumns::of_store(store)).await?;
        make_current(&mut tx, name, head.id, now).await?;
        tx.commit().await?;
        Ok(Written { head, created, unchanged: false })
    }

    async fn origin(&self, version: i64) -> Result<Option<String>, CatalogError> {
        let found: Option<Option<String>> = sqlx::query_scalar(ORIGIN).bind(version).fetch_optional(&self.pool).await?;
        Ok(found.flatten())
    }

    async fn origins(&self) -> Result<Vec<(String, String)>, CatalogError> {
        Ok(sqlx::query_as(ORIGINS).fetch_all(&self.pool).await?)
    }

    async fn write_derived(
        &self,
        name: &str,
        version: &DerivedVersion<'_>,
        options: VersionOptions,
    ) -> Result<Written, CatalogError> {
        let now = now_ms();
        let mut tx = self.pool.begin_with("begin immediate").await?;
        let current: Option<Option<i64>> = sqlx::query_scalar("select current_version from stores where name = ?")
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        Expected::check(options.expected, name, current.flatten())?;
        if current != Some(Some(version.base)) {
            return Err(CatalogError::Conflict(format!(
                "the current version of store {name:?}, which changed during this update"
            )));
        }
        let head = insert_version(&mut tx, name, &version.summary, options, now).await?;
        insert_nodes(&mut tx, head.id, version.nodes).await?;
        // Every base tile is shared, but for the arrays and tiles dropped.
        sqlx::query(
            "insert into tiles (version_id, node, tile, block_id) \
             select $1, node, tile, block_id from tiles where version_id = $2",
        )
        .bind(head.id)
        .bind(version.base)
        .execute(&mut *tx)
        .await?;
        drop_tiles(&mut tx, head.id, version).await?;
        for batch in rows::derived_block_batches(version, MAX_VARIABLES / 4) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        sqlx::query(COPY_SOURCES).bind(head.id).bind(version.base).execute(&mut *tx).await?;
        insert_sources(&mut tx, head.id, &SourceColumns::of_derived(version)).await?;
        make_current(&mut tx, name, head.id, now).await?;
        tx.commit().await?;
        Ok(Written { head, created: false, unchanged: false })
    }

    async fn prune(&self, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError> {
        let mut tx = self.pool.begin_with("begin immediate").await?;
        let pruned: Vec<i64> = sqlx::query_scalar(
            "delete from versions \
             where id in (select id from (select id, created_at, row_number() over (order by id desc) as rank \
                                          from versions where store = ?1) \
                          where rank > ?2 and created_at < ?3) \
               and id is not (select current_version from stores where name = ?1) \
             returning id",
        )
        .bind(name)
        .bind(i64::from(retention.keep_versions))
        .bind(now_ms() - retention.keep_ms)
        .fetch_all(&mut *tx)
        .await?;
        if !pruned.is_empty() {
            sqlx::query("delete from blocks where store = ? and not exists (select 1 from tiles t where t.block_id = blocks.id)")
                .bind(name)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(pruned)
    }

    async fn list_stores(&self, after: Option<&str>, limit: u32) -> Result<Vec<StoreRecord>, CatalogError> {
        let query = sqlx::query(self.sql.list_stores.clone()).bind(after.unwrap_or("")).bind(i64::from(limit));
        query.fetch_all(&self.pool).await?.iter().map(rows::store_record).collect()
    }

    async fn versions(&self, store: &str, limit: u32) -> Result<Vec<ListedVersion>, CatalogError> {
        let query = sqlx::query(self.sql.versions.clone()).bind(store).bind(i64::from(limit));
        Ok(query.fetch_all(&self.pool).await?.iter().map(rows::listed_version).collect::<Result<_, _>>()?)
    }

    async fn store(&self, name: &str) -> Result<Option<StoreRecord>, CatalogError> {
        let row = sqlx::query(self.sql.store.clone()).bind(name).fetch_optional(&self.pool).await?;
        row.as_ref().map(rows::store_record).transpose()
    }

    async fn delete_store(&self, name: &str) -> Result<bool, CatalogError> {
        let mut tx = self.pool.begin_with("begin immediate").await?;
        // The deletion mark is set in the transaction that removes the store (see UNMARK_DELETED).
        let deleted = sqlx::query(DELETE_STORE).bind(name).execute(&mut *tx).await?.rows_affected() == 1;
        if deleted {
            sqlx::query(
                "insert into deleted_stores (name, deleted_at) values (?1, ?2) \
                 on conflict (name) do update set deleted_at = excluded.deleted_at",
            )
            .bind(name)
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(deleted)
    }

    async fn deleted_at(&self, name: &str) -> Result<Option<i64>, CatalogError> {
        Ok(sqlx::query_scalar(self.sql.deleted_at.clone()).bind(name).fetch_optional(&self.pool).await?)
    }

    async fn stores_using(&self, prefix: &str) -> Result<Vec<String>, CatalogError> {
        let names = sqlx::query_scalar(
            "select distinct v.store from sources s join versions v on v.id = s.version_id \
             where substr(s.url, 1, length(?1)) = ?1 order by v.store",
        )
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        Ok(names)
    }

    async fn put_object_store(&self, record: &ObjectStoreRecord) -> Result<bool, CatalogError> {
        let now = now_ms();
        let options = serde_json::Value::Object(record.options.clone()).to_string();
        let mut tx = self.pool.begin_with("begin immediate").await?;
        let exists: Option<String> = sqlx::query_scalar("select name from object_stores where name = ?")
            .bind(&record.name)
            .fetch_optional(&mut *tx)
            .await?;
        sqlx::query(
            "insert into object_stores (name, url, options, created_at, updated_at) values (?1, ?2, ?3, ?4, ?4) \
             on conflict (name) do update set url = excluded.url, options = excluded.options, updated_at = excluded.updated_at",
        )
        .bind(&record.name)
        .bind(&record.url)
        .bind(options)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(unique_violation)?;
        tx.commit().await?;
        Ok(exists.is_none())
    }

    async fn object_stores(&self) -> Result<Vec<ObjectStoreRecord>, CatalogError> {
        let found = sqlx::query(self.sql.object_stores.clone()).fetch_all(&self.pool).await?;
        found.iter().map(rows::object_store).collect()
    }

    async fn delete_object_store(&self, name: &str) -> Result<bool, CatalogError> {
        let deleted = sqlx::query(DELETE_OBJECT_STORE).bind(name).execute(&self.pool).await?.rows_affected() == 1;
        Ok(deleted)
    }
}
