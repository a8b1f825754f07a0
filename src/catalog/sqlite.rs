//! The SQLite catalog: the embedded default, one file, no server to run.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::query_builder::Separated;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Sqlite, SqliteConnection, Transaction};

use super::rows::{
    self, COPY_SOURCES, CURRENT_VERSION, DELETE_OBJECT_STORE, DELETE_STORE, Dialect, EncodedBlock, NodeColumns, Opened,
    SOURCES_CONFLICT, SourceColumns, Statements,
};
use super::sql::{self, Backend, SqlCatalog};
use super::{
    CatalogError, DerivedVersion, FileRows, NewVersion, ObjectStoreRecord, Retention, VersionHead, VersionOptions,
    Written, unique_violation,
};
use crate::zarr::validate::{Summary, ValidNode};

/// The most values one statement binds: SQLITE_MAX_VARIABLE_NUMBER of the bundled SQLite.
const MAX_VARIABLES: usize = 32_766;

/// Timestamps are unix milliseconds already, JSON is text.
const DIALECT: Dialect = Dialect {
    millis: |column| column.to_owned(),
    json_text: |column| column.to_owned(),
    starts_with: |column, prefix| format!("substr({column}, 1, length({prefix})) = {prefix}"),
};

/// A catalog in an SQLite file.
pub type SqliteCatalog = SqlCatalog<Sqlite>;

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
        Ok(Self { pool, sql: Statements::new(&DIALECT), held: Default::default() })
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
        "insert into versions (store, created_at, summary, fill_missing, origin, portable) \
         values ($1, $2, $3, $4, $5, $6) returning store, id, created_at as created_at_ms, fill_missing, portable",
    )
    .bind(name)
    .bind(now)
    .bind(summary)
    .bind(options.fill_missing)
    .bind(options.origin)
    .bind(options.portable)
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

/// Writes the files version `version` was made from, a batch at a time.
async fn insert_files(tx: &mut SqliteConnection, version: i64, files: &FileRows) -> Result<(), CatalogError> {
    let mut seq = 0;
    for batch in files.batches(MAX_VARIABLES / 3) {
        let batch = batch?;
        insert_rows(tx, "insert into version_files (version_id, seq, record) ", "", 3, batch.len(), |b, i| {
            b.push_bind(version).push_bind(seq + i as i64).push_bind(&batch[i]);
        })
        .await?;
        seq += batch.len() as i64;
    }
    Ok(())
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

/// Gives derived version `version` every tile and source of its base, then removes the tiles
/// of the arrays and tiles dropped.
async fn share_base(tx: &mut SqliteConnection, version: i64, derived: &DerivedVersion<'_>) -> Result<(), CatalogError> {
    sqlx::query(
        "insert into tiles (version_id, node, tile, block_id) \
         select $1, node, tile, block_id from tiles where version_id = $2",
    )
    .bind(version)
    .bind(derived.base)
    .execute(&mut *tx)
    .await?;
    sqlx::query(COPY_SOURCES).bind(version).bind(derived.base).execute(&mut *tx).await?;
    drop_tiles(tx, version, derived).await
}

/// Creates store `name` if it does not exist, then checks what the write expects of it.
/// (`begin immediate` has serialised the writers already.)
async fn open_store(
    tx: &mut SqliteConnection,
    sql: &Statements,
    name: &str,
    options: &VersionOptions,
    now: i64,
) -> Result<Opened, CatalogError> {
    let created =
        sqlx::query("insert into stores (name, created_at, updated_at) values (?, ?, ?) on conflict (name) do nothing")
            .bind(name)
            .bind(now)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
    sql::opened::<Sqlite>(&mut *tx, sql, name, created, options).await
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
impl Backend for Sqlite {
    const LABEL: &'static str = "sqlite";

    async fn write(
        catalog: &SqliteCatalog,
        name: &str,
        content: NewVersion<'_>,
        options: VersionOptions,
    ) -> Result<Written, CatalogError> {
        let now = now_ms();
        let files = options.files.clone();
        let mut tx = catalog.pool.begin_with("begin immediate").await?;
        let created = match content {
            NewVersion::Whole(_) => match open_store(&mut tx, &catalog.sql, name, &options, now).await? {
                Opened::Store { created } => created,
                // Dropping the transaction rolls it back.
                Opened::Unchanged(written) => return Ok(written),
            },
            NewVersion::Derived(version) => {
                let current: Option<Option<i64>> =
                    sqlx::query_scalar(CURRENT_VERSION).bind(name).fetch_optional(&mut *tx).await?;
                rows::check_base(name, version.base, current.flatten(), &options)?;
                false
            }
        };
        let head = insert_version(&mut tx, name, content.summary(), options, now).await?;
        insert_nodes(&mut tx, head.id, content.nodes()).await?;
        if let NewVersion::Derived(version) = content {
            share_base(&mut tx, head.id, version).await?;
        }
        for batch in content.block_batches(MAX_VARIABLES / 4) {
            insert_blocks(&mut tx, name, head.id, batch?).await?;
        }
        insert_sources(&mut tx, head.id, &SourceColumns::of(content)).await?;
        if let Some(files) = &files {
            insert_files(&mut tx, head.id, files).await?;
        }
        make_current(&mut tx, name, head.id, now).await?;
        tx.commit().await?;
        Ok(Written { head, created, unchanged: false })
    }

    async fn prune(catalog: &SqliteCatalog, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError> {
        let mut tx = catalog.pool.begin_with("begin immediate").await?;
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

    async fn delete_store(catalog: &SqliteCatalog, name: &str) -> Result<bool, CatalogError> {
        let mut tx = catalog.pool.begin_with("begin immediate").await?;
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

    async fn put_object_store(catalog: &SqliteCatalog, record: &ObjectStoreRecord) -> Result<bool, CatalogError> {
        let now = now_ms();
        let options = serde_json::Value::Object(record.options.clone()).to_string();
        let mut tx = catalog.pool.begin_with("begin immediate").await?;
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

    async fn delete_object_store(catalog: &SqliteCatalog, name: &str) -> Result<bool, CatalogError> {
        let deleted = sqlx::query(DELETE_OBJECT_STORE).bind(name).execute(&catalog.pool).await?.rows_affected() == 1;
        Ok(deleted)
    }
}
