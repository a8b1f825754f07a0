//! The PostgreSQL catalog, for deployments: many replicas share one database.

mod listen;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, SqlSafeStr, Transaction};

use super::rows::{
    self, BLOCK, COPY_SOURCES, DELETE_OBJECT_STORE, DELETE_STORE, Dialect, EncodedBlock, NODES, NodeColumns, ORIGIN,
    ORIGINS, SOURCES, SOURCES_CONFLICT, SourceColumns, Statements, TILES, UNMARK_DELETED,
};
use super::{
    Catalog, CatalogError, Change, DerivedVersion, Expected, ListedVersion, ObjectStoreRecord, Retention, StoreHead,
    StoreRecord, StoredNode, VersionHead, VersionOptions, Written, unique_violation,
};
use crate::zarr::document::SourceFacts;
use crate::zarr::validate::{Summary, ValidNode, ValidatedStore};

/// Rows per insert of nodes or sources. Their columns are bound as arrays (`unnest`), one
/// parameter each whatever the number of rows: the batch only bounds what one statement holds.
const ROWS_PER_STATEMENT: usize = 10_000;

/// Timestamps are `timestamptz`, JSON is `jsonb`.
const DIALECT: Dialect = Dialect {
    millis: |column| format!("(extract(epoch from {column}) * 1000)::bigint"),
    json_text: |column| format!("{column}::text"),
};

/// A catalog in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PostgresCatalog {
    pool: PgPool,
    sql: Statements,
}

impl PostgresCatalog {
    /// Connects and applies migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, CatalogError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            // Short: a database that refuses connections makes acquire retry until this passes,
            // and the request waits as long (the breaker, catalog/breaker.rs, spares the others).
            .acquire_timeout(Duration::from_secs(2))
            .connect(url)
            .await?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        Ok(Self { pool, sql: Statements::new(&DIALECT) })
    }

    /// The pool, for `LISTEN` connections.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

async fn insert_version(
    tx: &mut Transaction<'_, Postgres>,
    sql: &Statements,
    name: &str,
    summary: &Summary,
    options: VersionOptions,
) -> Result<VersionHead, CatalogError> {
    let summary = serde_json::to_value(summary).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
    let head = &sql.head_columns;
    let sql = sqlx::AssertSqlSafe(format!(
        "insert into versions as v (store, summary, fill_missing, origin) values ($1, $2, $3, $4) returning {head}"
    ));
    let row = sqlx::query(sql)
        .bind(name)
        .bind(sqlx::types::Json(summary))
        .bind(options.fill_missing)
        .bind(options.origin)
        .fetch_one(&mut **tx)
        .await?;
    Ok(rows::version_head(&row)?)
}

async fn insert_nodes(
    tx: &mut Transaction<'_, Postgres>,
    version: i64,
    nodes: &[ValidNode],
) -> Result<(), CatalogError> {
    for chunk in nodes.chunks(ROWS_PER_STATEMENT) {
        let c = NodeColumns::new(chunk);
        sqlx::query(
            "insert into nodes (version_id, path, metadata, tile_shape) \
             select $1, * from unnest($2::text[], $3::text[], $4::text[])",
        )
        .bind(version)
        .bind(c.paths)
        .bind(c.metadata)
        .bind(c.tile_shapes)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Records source facts; a URL already recorded for the version gets the newer facts.
async fn insert_sources(
    tx: &mut Transaction<'_, Postgres>,
    version: i64,
    sources: &SourceColumns<'_>,
) -> Result<(), CatalogError> {
    let sql = sqlx::AssertSqlSafe(format!(
        "insert into sources (version_id, url, etag, last_modified, size) \
         select $1, * from unnest($2::text[], $3::text[], $4::text[], $5::bigint[]){SOURCES_CONFLICT}"
    ))
    .into_sql_str();
    for start in (0..sources.len()).step_by(ROWS_PER_STATEMENT) {
        let end = (start + ROWS_PER_STATEMENT).min(sources.len());
        sqlx::query(sql.clone())
            .bind(version)
            .bind(&sources.urls[start..end])
            .bind(&sources.etags[start..end])
            .bind(&sources.last_modified[start..end])
            .bind(&sources.sizes[start..end])
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

async fn make_current(tx: &mut Transaction<'_, Postgres>, name: &str, version: i64) -> Result<(), CatalogError> {
    sqlx::query("update stores set current_version = $1, updated_at = now() where name = $2")
        .bind(version)
        .bind(name)
        .execute(&mut **tx)
        .await?;
    sqlx::query("select pg_notify('zarrgate_versions', $1)").bind(name).execute(&mut **tx).await?;
    Ok(())
}

/// Inserts a batch of blocks and the tiles pointing at them, in one statement.
async fn insert_blocks(
    tx: &mut Transaction<'_, Postgres>,
    store: &str,
    version: i64,
    batch: Vec<EncodedBlock>,
) -> Result<(), CatalogError> {
    let mut nodes = Vec::with_capacity(batch.len());
    let mut tiles = Vec::with_capacity(batch.len());
    let mut data = Vec::with_capacity(batch.len());
    for b in batch {
        nodes.push(b.node);
        tiles.push(b.tile);
        data.push(b.data);
    }
    // `new` calls nextval, so it is computed once and both inserts see the same ids.
    sqlx::query(
        "with new as (select nextval('blocks_id_seq') as id, node, tile, data \
                      from unnest($3::text[], $4::bigint[], $5::bytea[]) as b (node, tile, data)), \
              stored as (insert into blocks (id, store, data) select id, $2, data from new) \
         insert into tiles (version_id, node, tile, block_id) select $1, node, tile, id from new",
    )
    .bind(version)
    .bind(store)
    .bind(nodes)
    .bind(tiles)
    .bind(data)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[async_trait]
impl Catalog for PostgresCatalog {
    fn backend(&self) -> &'static str {
        "postgres"
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
        let mut tx = self.pool.begin().await?;
        // Creates the store or locks its row, in one statement: concurrent registrations of the
        // same store take turns, and a DELETE committed meanwhile is not a foreign-key failure.
        let created: bool = sqlx::query_scalar(
            "insert into stores (name) values ($1) on conflict (name) do update set name = excluded.name \
             returning (xmax = 0)",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        if options.expected.is_some() {
            // The row is this transaction's now: the version read is the one replaced.
            let current: Option<i64> = sqlx::query_scalar("select current_version from stores where name = $1")
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
        let head = insert_version(&mut tx, &self.sql, name, &store.summary, options).await?;
        insert_nodes(&mut tx, head.id, &store.nodes).await?;
        for batch in rows::block_batches(store, usize::MAX) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        insert_sources(&mut tx, head.id, &SourceColumns::of_store(store)).await?;
        make_current(&mut tx, name, head.id).await?;
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
        let mut tx = self.pool.begin().await?;
        let current: Option<Option<i64>> =
            sqlx::query_scalar("select current_version from stores where name = $1 for update")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
        Expected::check(options.expected, name, current.flatten())?;
        if current != Some(Some(version.base)) {
            return Err(CatalogError::Conflict(format!(
                "the current version of store {name:?}, which changed during this update"
            )));
        }
        let head = insert_version(&mut tx, &self.sql, name, &version.summary, options).await?;
        insert_nodes(&mut tx, head.id, version.nodes).await?;
        // Every base tile is shared, but for the arrays and tiles dropped (anti-joins: hashed
        // whatever the number dropped, where `not in` a list past work_mem compares every pair).
        sqlx::query(
            "insert into tiles (version_id, node, tile, block_id) \
             select $1, t.node, t.tile, t.block_id from tiles t \
             where t.version_id = $2 \
               and not exists (select 1 from unnest($3::text[]) d (node) where d.node = t.node) \
               and not exists (select 1 from unnest($4::text[], $5::bigint[]) d (node, tile) \
                               where d.node = t.node and d.tile = t.tile)",
        )
        .bind(head.id)
        .bind(version.base)
        .bind(&version.dropped_nodes)
        .bind(version.dropped_tiles.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
        .bind(version.dropped_tiles.iter().map(|(_, t)| *t as i64).collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
        for batch in rows::derived_block_batches(version, usize::MAX) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        sqlx::query(COPY_SOURCES).bind(head.id).bind(version.base).execute(&mut *tx).await?;
        insert_sources(&mut tx, head.id, &SourceColumns::of_derived(version)).await?;
        make_current(&mut tx, name, head.id).await?;
        tx.commit().await?;
        Ok(Written { head, created: false, unchanged: false })
    }

    async fn prune(&self, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError> {
        let mut tx = self.pool.begin().await?;
        // Serialises with registrations of the same store.
        sqlx::query("select name from stores where name = $1 for update").bind(name).execute(&mut *tx).await?;
        let pruned: Vec<i64> = sqlx::query_scalar(
            "delete from versions v \
             using (select id, created_at, row_number() over (order by id desc) as rank from versions where store = $1) r \
             where v.id = r.id and r.rank > $2 and r.created_at < now() - $3 * interval '1 millisecond' \
               and v.id is distinct from (select current_version from stores where name = $1) \
             returning v.id",
        )
        .bind(name)
        .bind(i64::from(retention.keep_versions))
        .bind(retention.keep_ms as f64)
        .fetch_all(&mut *tx)
        .await?;
        if !pruned.is_empty() {
            sqlx::query("delete from blocks b where b.store = $1 and not exists (select 1 from tiles t where t.block_id = b.id)")
                .bind(name)
                .execute(&mut *tx)
                .await?;
            sqlx::query("select pg_notify('zarrgate_versions', $1)").bind(name).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(pruned)
    }

    async fn changes(&self) -> Option<tokio::sync::mpsc::Receiver<Change>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(listen::listen(self.pool.clone(), tx));
        Some(rx)
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
        let mut tx = self.pool.begin().await?;
        // The deletion mark is set in the transaction that removes the store (see UNMARK_DELETED).
        let deleted = sqlx::query(DELETE_STORE).bind(name).execute(&mut *tx).await?.rows_affected() == 1;
        if deleted {
            sqlx::query(
                "insert into deleted_stores (name) values ($1) on conflict (name) do update set deleted_at = now()",
            )
            .bind(name)
            .execute(&mut *tx)
            .await?;
            sqlx::query("select pg_notify('zarrgate_versions', $1)").bind(name).execute(&mut *tx).await?;
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
             where starts_with(s.url, $1) order by v.store",
        )
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        Ok(names)
    }

    async fn put_object_store(&self, record: &ObjectStoreRecord) -> Result<bool, CatalogError> {
        let options = serde_json::Value::Object(record.options.clone());
        let inserted: bool = sqlx::query_scalar(
            "insert into object_stores (name, url, options) values ($1, $2, $3) \
             on conflict (name) do update set url = excluded.url, options = excluded.options, updated_at = now() \
             returning (xmax = 0)",
        )
        .bind(&record.name)
        .bind(&record.url)
        .bind(sqlx::types::Json(options))
        .fetch_one(&self.pool)
        .await
        .map_err(unique_violation)?;
        sqlx::query("select pg_notify('zarrgate_object_stores', $1)").bind(&record.name).execute(&self.pool).await?;
        Ok(inserted)
    }

    async fn object_stores(&self) -> Result<Vec<ObjectStoreRecord>, CatalogError> {
        let found = sqlx::query(self.sql.object_stores.clone()).fetch_all(&self.pool).await?;
        found.iter().map(rows::object_store).collect()
    }

    async fn delete_object_store(&self, name: &str) -> Result<bool, CatalogError> {
        let deleted = sqlx::query(DELETE_OBJECT_STORE).bind(name).execute(&self.pool).await?.rows_affected() == 1;
        sqlx::query("select pg_notify('zarrgate_object_stores', $1)").bind(name).execute(&self.pool).await?;
        Ok(deleted)
    }
}
