//! The PostgreSQL catalog, for deployments: many replicas share one database.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{Postgres, Row, Transaction};

use super::{
    Catalog, CatalogError, Change, DerivedVersion, EncodedBlock, ObjectStoreRecord, Retention, StoreRecord, StoredNode,
    VersionHead, VersionOptions, Written, batches, block_batches, node_json, parse_node, parse_options, parse_summary,
    tile_json, unique_violation,
};
use crate::zarr::document::SourceFacts;
use crate::zarr::validate::{Summary, ValidNode, ValidatedStore};

/// Rows per insert of nodes or sources. Their columns are bound as arrays (`unnest`), one
/// parameter each whatever the number of rows: the batch only bounds what one statement holds.
const ROWS_PER_STATEMENT: usize = 10_000;

const HEAD: &str = "v.store, v.id, v.fill_missing, (extract(epoch from v.created_at) * 1000)::bigint as created_at_ms";

/// A catalog in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PostgresCatalog {
    pool: PgPool,
}

impl PostgresCatalog {
    /// Connects and applies migrations.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, CatalogError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        Ok(Self { pool })
    }

    /// The pool, for `LISTEN` connections.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Follows `LISTEN zarrgate_versions, zarrgate_object_stores` until the receiver is dropped,
/// reconnecting after failures; every (re)connection and lost connection reports `Lost`.
async fn listen(pool: PgPool, tx: tokio::sync::mpsc::Sender<Change>) {
    while !tx.is_closed() {
        match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(e) = listener.listen_all(["zarrgate_versions", "zarrgate_object_stores"]).await {
                    tracing::warn!(error = %e, "cannot LISTEN for catalog changes; retrying");
                } else {
                    tracing::info!("following catalog changes (LISTEN/NOTIFY)");
                    if tx.send(Change::Lost).await.is_err() {
                        return;
                    }
                    loop {
                        let change = match listener.try_recv().await {
                            Ok(Some(n)) if n.channel() == "zarrgate_versions" => Change::Store(n.payload().to_owned()),
                            Ok(Some(_)) => Change::ObjectStores,
                            Ok(None) => {
                                // Reconnect here, not inside the listener: `Lost` must follow the
                                // new LISTEN, or a change made in between would go unseen.
                                tracing::warn!("lost the catalog change feed; reconnecting");
                                break;
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "catalog change feed failed; reconnecting");
                                break;
                            }
                        };
                        if tx.send(change).await.is_err() {
                            return;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot connect to follow catalog changes; retrying"),
        }
        let _ = tx.send(Change::Lost).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn head(row: &sqlx::postgres::PgRow) -> Result<VersionHead, sqlx::Error> {
    Ok(VersionHead {
        store: row.try_get("store")?,
        id: row.try_get("id")?,
        created_at_ms: row.try_get("created_at_ms")?,
        fill_missing: row.try_get("fill_missing")?,
    })
}

fn store_record(row: &sqlx::postgres::PgRow) -> Result<StoreRecord, CatalogError> {
    let summary: sqlx::types::Json<serde_json::Value> = row.try_get("summary")?;
    Ok(StoreRecord {
        head: head(row)?,
        store_created_at_ms: row.try_get("store_created_at_ms")?,
        summary: parse_summary(&summary.0.to_string())?,
    })
}

async fn insert_version(
    tx: &mut Transaction<'_, Postgres>,
    name: &str,
    summary: &Summary,
    options: VersionOptions,
) -> Result<VersionHead, CatalogError> {
    let summary = serde_json::to_value(summary).map_err(|e| CatalogError::Corrupt(e.to_string()))?;
    let sql = sqlx::AssertSqlSafe(format!(
        "insert into versions as v (store, summary, fill_missing) values ($1, $2, $3) returning {HEAD}"
    ));
    let row = sqlx::query(sql)
        .bind(name)
        .bind(sqlx::types::Json(summary))
        .bind(options.fill_missing)
        .fetch_one(&mut **tx)
        .await?;
    Ok(head(&row)?)
}

async fn insert_nodes(
    tx: &mut Transaction<'_, Postgres>,
    version: i64,
    nodes: &[ValidNode],
) -> Result<(), CatalogError> {
    for chunk in nodes.chunks(ROWS_PER_STATEMENT) {
        sqlx::query(
            "insert into nodes (version_id, path, metadata, tile_shape) \
             select $1, * from unnest($2::text[], $3::text[], $4::text[])",
        )
        .bind(version)
        .bind(chunk.iter().map(|n| n.path.as_str()).collect::<Vec<_>>())
        .bind(chunk.iter().map(|n| node_json(&n.metadata)).collect::<Vec<_>>())
        .bind(chunk.iter().map(|n| tile_json(&n.kind)).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Records source facts; a URL already recorded for the version gets the newer facts.
async fn insert_sources(
    tx: &mut Transaction<'_, Postgres>,
    version: i64,
    facts: &[(&String, SourceFacts)],
) -> Result<(), CatalogError> {
    for chunk in facts.chunks(ROWS_PER_STATEMENT) {
        sqlx::query(
            "insert into sources (version_id, url, etag, last_modified, size) \
             select $1, * from unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) \
             on conflict (version_id, url) do update set etag = excluded.etag, \
               last_modified = excluded.last_modified, size = excluded.size",
        )
        .bind(version)
        .bind(chunk.iter().map(|(url, _)| url.as_str()).collect::<Vec<_>>())
        .bind(chunk.iter().map(|(_, f)| f.etag.as_deref()).collect::<Vec<_>>())
        .bind(chunk.iter().map(|(_, f)| f.last_modified.as_deref()).collect::<Vec<_>>())
        .bind(chunk.iter().map(|(_, f)| f.size.map(|s| s as i64)).collect::<Vec<_>>())
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
        let sql = sqlx::AssertSqlSafe(format!(
            "select {HEAD} from stores s join versions v on v.id = s.current_version where s.name = $1"
        ));
        let row = sqlx::query(sql).bind(store).fetch_optional(&self.pool).await?;
        Ok(row.as_ref().map(head).transpose()?)
    }

    async fn version(&self, store: &str, id: i64) -> Result<Option<VersionHead>, CatalogError> {
        let sql = sqlx::AssertSqlSafe(format!("select {HEAD} from versions v where v.id = $1 and v.store = $2"));
        let row = sqlx::query(sql).bind(id).bind(store).fetch_optional(&self.pool).await?;
        Ok(row.as_ref().map(head).transpose()?)
    }

    async fn nodes(&self, version: i64) -> Result<Vec<StoredNode>, CatalogError> {
        let rows: Vec<(String, String, Option<String>)> =
            sqlx::query_as("select path, metadata, tile_shape from nodes where version_id = $1 order by path")
                .bind(version)
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter().map(|(path, metadata, tile)| parse_node(path, &metadata, tile.as_deref())).collect()
    }

    async fn block(&self, version: i64, node: &str, tile: u64) -> Result<Option<Vec<u8>>, CatalogError> {
        let data = sqlx::query_scalar(
            "select b.data from tiles t join blocks b on b.id = t.block_id \
             where t.version_id = $1 and t.node = $2 and t.tile = $3",
        )
        .bind(version)
        .bind(node)
        .bind(tile as i64)
        .fetch_optional(&self.pool)
        .await?;
        Ok(data)
    }

    async fn tiles(&self, version: i64) -> Result<Vec<(String, u64)>, CatalogError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("select node, tile from tiles where version_id = $1 order by node, tile")
                .bind(version)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(n, t)| (n, t as u64)).collect())
    }

    async fn sources(&self, version: i64) -> Result<Vec<(String, SourceFacts)>, CatalogError> {
        let rows: Vec<(String, Option<String>, Option<String>, Option<i64>)> =
            sqlx::query_as("select url, etag, last_modified, size from sources where version_id = $1 order by url")
                .bind(version)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(url, etag, last_modified, size)| {
                (url, SourceFacts { etag, last_modified, size: size.map(|s| s as u64) })
            })
            .collect())
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
        if created {
            sqlx::query("delete from deleted_stores where name = $1").bind(name).execute(&mut *tx).await?;
        }
        let head = insert_version(&mut tx, name, &store.summary, options).await?;
        insert_nodes(&mut tx, head.id, &store.nodes).await?;
        for batch in block_batches(store, usize::MAX) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        let facts: Vec<(&String, SourceFacts)> =
            store.urls().iter().map(|u| (u, store.sources.get(u).cloned().unwrap_or_default())).collect();
        insert_sources(&mut tx, head.id, &facts).await?;
        make_current(&mut tx, name, head.id).await?;
        tx.commit().await?;
        Ok(Written { head, created })
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
        if current != Some(Some(version.base)) {
            return Err(CatalogError::Conflict(format!(
                "the current version of store {name:?}, which changed during this update"
            )));
        }
        let head = insert_version(&mut tx, name, &version.summary, options).await?;
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
        let encoded = version
            .blocks
            .iter()
            .map(|(node, tile, data)| Ok(EncodedBlock { node: node.clone(), tile: *tile as i64, data: data.clone() }));
        for batch in batches(encoded, usize::MAX) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        sqlx::query(
            "insert into sources (version_id, url, etag, last_modified, size) \
             select $1, url, etag, last_modified, size from sources where version_id = $2",
        )
        .bind(head.id)
        .bind(version.base)
        .execute(&mut *tx)
        .await?;
        let facts: Vec<(&String, SourceFacts)> = version.sources.iter().map(|(u, f)| (u, f.clone())).collect();
        insert_sources(&mut tx, head.id, &facts).await?;
        make_current(&mut tx, name, head.id).await?;
        tx.commit().await?;
        Ok(Written { head, created: false })
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
        tokio::spawn(listen(self.pool.clone(), tx));
        Some(rx)
    }

    async fn list_stores(&self, after: Option<&str>, limit: u32) -> Result<Vec<StoreRecord>, CatalogError> {
        let sql = sqlx::AssertSqlSafe(format!(
            "select {HEAD}, v.summary, (extract(epoch from s.created_at) * 1000)::bigint as store_created_at_ms \
             from stores s join versions v on v.id = s.current_version \
             where s.name > $1 order by s.name limit $2"
        ));
        let rows = sqlx::query(sql).bind(after.unwrap_or("")).bind(i64::from(limit)).fetch_all(&self.pool).await?;
        rows.iter().map(store_record).collect()
    }

    async fn store(&self, name: &str) -> Result<Option<StoreRecord>, CatalogError> {
        let sql = sqlx::AssertSqlSafe(format!(
            "select {HEAD}, v.summary, (extract(epoch from s.created_at) * 1000)::bigint as store_created_at_ms \
             from stores s join versions v on v.id = s.current_version where s.name = $1"
        ));
        let row = sqlx::query(sql).bind(name).fetch_optional(&self.pool).await?;
        row.as_ref().map(store_record).transpose()
    }

    async fn delete_store(&self, name: &str) -> Result<bool, CatalogError> {
        let mut tx = self.pool.begin().await?;
        let deleted =
            sqlx::query("delete from stores where name = $1").bind(name).execute(&mut *tx).await?.rows_affected() == 1;
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
        let at = sqlx::query_scalar(
            "select (extract(epoch from deleted_at) * 1000)::bigint from deleted_stores where name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        Ok(at)
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
        let rows: Vec<(String, String, sqlx::types::Json<serde_json::Value>)> =
            sqlx::query_as("select name, url, options from object_stores order by name").fetch_all(&self.pool).await?;
        rows.into_iter()
            .map(|(name, url, options)| {
                Ok(ObjectStoreRecord { name, url, options: parse_options(&options.0.to_string())? })
            })
            .collect()
    }

    async fn delete_object_store(&self, name: &str) -> Result<bool, CatalogError> {
        let deleted = sqlx::query("delete from object_stores where name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1;
        sqlx::query("select pg_notify('zarrgate_object_stores', $1)").bind(name).execute(&self.pool).await?;
        Ok(deleted)
    }
}
