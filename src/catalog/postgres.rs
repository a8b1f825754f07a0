//! The PostgreSQL catalog, for deployments: many replicas share one database.

mod listen;

use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, SqlSafeStr, Transaction};

use super::lock::{Across, LockSession};
use super::rows::{
    self, COPY_SOURCES, DELETE_OBJECT_STORE, DELETE_STORE, Dialect, EncodedBlock, NodeColumns, Opened,
    SOURCES_CONFLICT, SourceColumns, Statements,
};
use super::sql::{self, Backend, SqlCatalog};
use super::{
    CatalogError, Change, DerivedVersion, FileRows, NewVersion, ObjectStoreRecord, Retention, VersionHead,
    VersionOptions, Written, unique_violation,
};
use crate::zarr::validate::{Summary, ValidNode};

/// Rows per insert of nodes or sources. Their columns are bound as arrays (`unnest`), one
/// parameter each whatever the number of rows: the batch only bounds what one statement holds.
const ROWS_PER_STATEMENT: usize = 10_000;

/// Timestamps are `timestamptz`, JSON is `jsonb`.
const DIALECT: Dialect = Dialect {
    millis: |column| format!("(extract(epoch from {column}) * 1000)::bigint"),
    json_text: |column| format!("{column}::text"),
    starts_with: |column, prefix| format!("starts_with({column}, {prefix})"),
};

/// A catalog in PostgreSQL.
pub type PostgresCatalog = SqlCatalog<Postgres>;

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
        Ok(Self { pool, sql: Statements::new(&DIALECT), held: Default::default() })
    }

    /// The pool, for `LISTEN` connections.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A session advisory lock on a hash of a name: held until unlocked or the session ends.
const TRY_LOCK: &str = "select pg_try_advisory_lock(hashtextextended($1, 0))";
const UNLOCK: &str = "select pg_advisory_unlock(hashtextextended($1, 0))";

/// The connection that holds an advisory lock, kept out of the pool's hands until it is
/// unlocked: a connection given back still holding it would hold it for whoever takes it next.
struct Session(PoolConnection<Postgres>);

#[async_trait]
impl LockSession for Session {
    async fn unlock(self: Box<Self>, name: &str) {
        let mut session = self.0;
        if let Err(e) = sqlx::query(UNLOCK).bind(name).execute(&mut *session).await {
            tracing::warn!(lock = name, error = %e, "releasing an advisory lock failed: closing its connection");
            drop(session.detach());
        }
    }

    fn abandon(self: Box<Self>) {
        // Closing the session releases its advisory locks; the pool opens another in its place.
        drop(self.0.detach());
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
        "insert into versions as v (store, summary, fill_missing, origin, portable) values ($1, $2, $3, $4, $5) \
         returning {head}"
    ));
    let row = sqlx::query(sql)
        .bind(name)
        .bind(sqlx::types::Json(summary))
        .bind(options.fill_missing)
        .bind(options.origin)
        .bind(options.portable)
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

/// Writes the files version `version` was made from, a batch at a time.
async fn insert_files(tx: &mut Transaction<'_, Postgres>, version: i64, files: &FileRows) -> Result<(), CatalogError> {
    let mut seq = 0;
    for batch in files.batches(ROWS_PER_STATEMENT) {
        let records = batch?;
        let seqs: Vec<i64> = (seq..seq + records.len() as i64).collect();
        seq += records.len() as i64;
        sqlx::query(
            "insert into version_files (version_id, seq, record) select $1, * from unnest($2::bigint[], $3::text[])",
        )
        .bind(version)
        .bind(seqs)
        .bind(records)
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

/// Creates store `name` or locks its row, in one statement: concurrent registrations of the
/// same store take turns, and a DELETE committed meanwhile is not a foreign-key failure. Then
/// checks what the write expects of it.
async fn open_store(
    tx: &mut Transaction<'_, Postgres>,
    sql: &Statements,
    name: &str,
    options: &VersionOptions,
) -> Result<Opened, CatalogError> {
    let created: bool = sqlx::query_scalar(
        "insert into stores (name) values ($1) on conflict (name) do update set name = excluded.name \
         returning (xmax = 0)",
    )
    .bind(name)
    .fetch_one(&mut **tx)
    .await?;
    sql::opened::<Postgres>(&mut **tx, sql, name, created, options).await
}

/// Locks store `name`'s row and checks that its current version is still `base` (and what the
/// write expects of it).
async fn lock_base(
    tx: &mut Transaction<'_, Postgres>,
    name: &str,
    base: i64,
    options: &VersionOptions,
) -> Result<(), CatalogError> {
    let current: Option<Option<i64>> =
        sqlx::query_scalar("select current_version from stores where name = $1 for update")
            .bind(name)
            .fetch_optional(&mut **tx)
            .await?;
    rows::check_base(name, base, current.flatten(), options)
}

/// Gives derived version `version` every tile of its base but for the arrays and tiles dropped
/// (anti-joins: hashed whatever the number dropped, where `not in` a list past work_mem
/// compares every pair), and every source of its base.
async fn share_base(
    tx: &mut Transaction<'_, Postgres>,
    version: i64,
    derived: &DerivedVersion<'_>,
) -> Result<(), CatalogError> {
    sqlx::query(
        "insert into tiles (version_id, node, tile, block_id) \
         select $1, t.node, t.tile, t.block_id from tiles t \
         where t.version_id = $2 \
           and not exists (select 1 from unnest($3::text[]) d (node) where d.node = t.node) \
           and not exists (select 1 from unnest($4::text[], $5::bigint[]) d (node, tile) \
                           where d.node = t.node and d.tile = t.tile)",
    )
    .bind(version)
    .bind(derived.base)
    .bind(&derived.dropped_nodes)
    .bind(derived.dropped_tiles.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
    .bind(derived.dropped_tiles.iter().map(|(_, t)| *t as i64).collect::<Vec<_>>())
    .execute(&mut **tx)
    .await?;
    sqlx::query(COPY_SOURCES).bind(version).bind(derived.base).execute(&mut **tx).await?;
    Ok(())
}

#[async_trait]
impl Backend for Postgres {
    const LABEL: &'static str = "postgres";

    async fn write(
        catalog: &PostgresCatalog,
        name: &str,
        content: NewVersion<'_>,
        options: VersionOptions,
    ) -> Result<Written, CatalogError> {
        let files = options.files.clone();
        let mut tx = catalog.pool.begin().await?;
        let created = match content {
            NewVersion::Whole(_) => match open_store(&mut tx, &catalog.sql, name, &options).await? {
                Opened::Store { created } => created,
                // Dropping the transaction rolls it back.
                Opened::Unchanged(written) => return Ok(written),
            },
            NewVersion::Derived(version) => {
                lock_base(&mut tx, name, version.base, &options).await?;
                false
            }
        };
        let head = insert_version(&mut tx, &catalog.sql, name, content.summary(), options).await?;
        insert_nodes(&mut tx, head.id, content.nodes()).await?;
        if let NewVersion::Derived(version) = content {
            share_base(&mut tx, head.id, version).await?;
        }
        for batch in content.block_batches(usize::MAX) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        insert_sources(&mut tx, head.id, &SourceColumns::of(content)).await?;
        if let Some(files) = &files {
            insert_files(&mut tx, head.id, files).await?;
        }
        make_current(&mut tx, name, head.id).await?;
        tx.commit().await?;
        Ok(Written { head, created, unchanged: false })
    }

    async fn prune(catalog: &PostgresCatalog, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError> {
        let mut tx = catalog.pool.begin().await?;
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

    async fn lock_across(catalog: &PostgresCatalog, name: &str) -> Result<Across, CatalogError> {
        let mut session = catalog.pool.acquire().await?;
        let query = sqlx::query_scalar::<_, bool>(TRY_LOCK).bind(name);
        if query.fetch_one(&mut *session).await? {
            Ok(Across::Taken(Some(Box::new(Session(session)))))
        } else {
            Ok(Across::Busy)
        }
    }

    async fn changes(catalog: &PostgresCatalog) -> Option<tokio::sync::mpsc::Receiver<Change>> {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(listen::listen(catalog.pool.clone(), tx));
        Some(rx)
    }

    async fn delete_store(catalog: &PostgresCatalog, name: &str) -> Result<bool, CatalogError> {
        let mut tx = catalog.pool.begin().await?;
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

    async fn put_object_store(catalog: &PostgresCatalog, record: &ObjectStoreRecord) -> Result<bool, CatalogError> {
        let options = serde_json::Value::Object(record.options.clone());
        let inserted: bool = sqlx::query_scalar(
            "insert into object_stores (name, url, options) values ($1, $2, $3) \
             on conflict (name) do update set url = excluded.url, options = excluded.options, updated_at = now() \
             returning (xmax = 0)",
        )
        .bind(&record.name)
        .bind(&record.url)
        .bind(sqlx::types::Json(options))
        .fetch_one(&catalog.pool)
        .await
        .map_err(unique_violation)?;
        sqlx::query("select pg_notify('zarrgate_object_stores', $1)").bind(&record.name).execute(&catalog.pool).await?;
        Ok(inserted)
    }

    async fn delete_object_store(catalog: &PostgresCatalog, name: &str) -> Result<bool, CatalogError> {
        let deleted = sqlx::query(DELETE_OBJECT_STORE).bind(name).execute(&catalog.pool).await?.rows_affected() == 1;
        sqlx::query("select pg_notify('zarrgate_object_stores', $1)").bind(name).execute(&catalog.pool).await?;
        Ok(deleted)
    }
}
