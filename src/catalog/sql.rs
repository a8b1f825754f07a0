//! The catalog over SQL, written once for both databases: every read, whose statements the two
//! dialects share (spelled once per catalog in [`Statements`]), the opening of a write that both
//! run alike ([`opened`]), and the hand-over of every write to the database's [`Backend`], whose
//! statements and transactions differ.

use async_trait::async_trait;
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Type};

use super::lock::{self, Across, LockGuard};
use super::rows::{
    self, BLOCK, CURRENT_VERSION, CatalogRow, NODES, ORIGIN, ORIGINS, Opened, SOURCES, Statements, TILES,
    UNMARK_DELETED,
};
use super::{
    Catalog, CatalogError, Change, Expected, ListedVersion, NewVersion, ObjectStoreRecord, Origins, ParsedKey,
    Retention, StoreHead, StoreRecord, StoredNode, Stores, VersionOptions, Written,
};
use crate::zarr::document::SourceFacts;

/// A page of the files a version was made from.
const VERSION_FILES: &str =
    "select record from version_files where version_id = $1 and seq >= $2 order by seq limit $3";
/// A file's parse, remembered.
const PARSED_FILE: &str = "select data from parsed_files where url = $1 and validator = $2 and parse_key = $3";
/// URLs looked up in one query by [`Catalog::parsed_files`] (well under SQLite's and
/// PostgreSQL's bound on parameters).
const PARSED_FILES_BATCH: usize = 500;
/// A rewritten file's parses are of no use: writing one under a new validator forgets them.
const FORGET_PARSED_FILE: &str = "delete from parsed_files where url = $1 and validator <> $2";
const PUT_PARSED_FILE: &str = "insert into parsed_files (url, validator, parse_key, data) values ($1, $2, $3, $4) \
     on conflict (url, validator, parse_key) do update set data = excluded.data, written_at = excluded.written_at";

/// A catalog in a database `B` (PostgreSQL or SQLite): its connections and its statements.
#[derive(Debug)]
pub struct SqlCatalog<B: Database> {
    pub(super) pool: Pool<B>,
    pub(super) sql: Statements,
    /// The lock names held in this process ([`Catalog::try_lock`]).
    pub(super) held: lock::Held,
}

/// What one database does its own way: the writes, with the statements, the transactions and
/// the notifications it needs.
#[async_trait]
pub(super) trait Backend: Database<Row: CatalogRow, Arguments: IntoArguments<Self>> {
    /// `"postgres"` or `"sqlite"`, for logs and metrics.
    const LABEL: &'static str;
    /// [`Catalog::write`].
    async fn write(
        catalog: &SqlCatalog<Self>,
        name: &str,
        content: NewVersion<'_>,
        options: VersionOptions,
    ) -> Result<Written, CatalogError>;
    /// [`Catalog::prune`].
    async fn prune(catalog: &SqlCatalog<Self>, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError>;
    /// [`Catalog::delete_store`].
    async fn delete_store(catalog: &SqlCatalog<Self>, name: &str) -> Result<bool, CatalogError>;
    /// [`Catalog::put_object_store`].
    async fn put_object_store(catalog: &SqlCatalog<Self>, record: &ObjectStoreRecord) -> Result<bool, CatalogError>;
    /// [`Catalog::delete_object_store`].
    async fn delete_object_store(catalog: &SqlCatalog<Self>, name: &str) -> Result<bool, CatalogError>;
    /// [`Catalog::changes`].
    async fn changes(_catalog: &SqlCatalog<Self>) -> Option<tokio::sync::mpsc::Receiver<Change>> {
        None
    }
    /// Takes lock `name` across replicas, once this process holds it: a database that only one
    /// replica opens (SQLite) has nothing more to do.
    async fn lock_across(_catalog: &SqlCatalog<Self>, _name: &str) -> Result<Across, CatalogError> {
        Ok(Across::Taken(None))
    }
}

#[async_trait]
impl<B> Catalog for SqlCatalog<B>
where
    B: Backend,
    for<'c> &'c mut B::Connection: Executor<'c, Database = B>,
    for<'q> i64: Encode<'q, B> + Type<B>,
    for<'q> Option<i64>: Encode<'q, B> + Type<B>,
    for<'q> &'q str: Encode<'q, B> + Type<B>,
    for<'q> &'q [u8]: Encode<'q, B> + Type<B>,
{
    fn backend(&self) -> &'static str {
        B::LABEL
    }

    async fn ping(&self) -> Result<(), CatalogError> {
        sqlx::query("select 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn head(&self, store: &str, pinned: Option<i64>) -> Result<StoreHead, CatalogError> {
        let row = sqlx::query(self.sql.head.clone()).bind(store).bind(pinned).fetch_one(&self.pool).await?;
        Ok(rows::store_head(&row)?)
    }

    async fn nodes(&self, version: i64) -> Result<Vec<StoredNode>, CatalogError> {
        rows::collect_yielding(sqlx::query(NODES).bind(version).fetch(&self.pool), rows::node).await
    }

    async fn block(&self, version: i64, node: &str, tile: u64) -> Result<Option<Vec<u8>>, CatalogError> {
        let query = sqlx::query(BLOCK).bind(version).bind(node).bind(tile as i64);
        let row = query.fetch_optional(&self.pool).await?;
        Ok(row.map(|row| row.field("data")).transpose()?)
    }

    async fn tiles(&self, version: i64) -> Result<Vec<(String, u64)>, CatalogError> {
        let found = sqlx::query(TILES).bind(version).fetch_all(&self.pool).await?;
        Ok(found.iter().map(rows::tile).collect::<Result<_, _>>()?)
    }

    async fn sources(&self, version: i64) -> Result<Vec<(String, SourceFacts)>, CatalogError> {
        let found = sqlx::query(SOURCES).bind(version).fetch_all(&self.pool).await?;
        Ok(found.iter().map(rows::source).collect::<Result<_, _>>()?)
    }

    async fn stores(&self, which: Stores<'_>) -> Result<Vec<StoreRecord>, CatalogError> {
        let query = match which {
            Stores::Named(name) => sqlx::query(self.sql.store.clone()).bind(name),
            Stores::After { after, limit } => {
                sqlx::query(self.sql.list_stores.clone()).bind(after.unwrap_or("")).bind(i64::from(limit))
            }
            Stores::Using(prefix) => sqlx::query(self.sql.stores_using.clone()).bind(prefix),
        };
        query.fetch_all(&self.pool).await?.iter().map(rows::store_record).collect()
    }

    async fn versions(&self, store: &str, limit: u32) -> Result<Vec<ListedVersion>, CatalogError> {
        let query = sqlx::query(self.sql.versions.clone()).bind(store).bind(i64::from(limit));
        Ok(query.fetch_all(&self.pool).await?.iter().map(rows::listed_version).collect::<Result<_, _>>()?)
    }

    async fn origins_of(&self, which: Origins) -> Result<Vec<(String, String)>, CatalogError> {
        let query = match which {
            Origins::Version(id) => sqlx::query(ORIGIN).bind(id),
            Origins::Current => sqlx::query(ORIGINS),
        };
        Ok(query.fetch_all(&self.pool).await?.iter().map(rows::origin).collect::<Result<_, _>>()?)
    }

    async fn version_files(&self, version: i64, offset: u64, limit: u64) -> Result<Vec<String>, CatalogError> {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let query = sqlx::query(VERSION_FILES).bind(version).bind(clamp(offset)).bind(clamp(limit));
        Ok(query.fetch_all(&self.pool).await?.iter().map(|row| row.field("record")).collect::<Result<_, _>>()?)
    }

    async fn write(&self, name: &str, new: NewVersion<'_>, options: VersionOptions) -> Result<Written, CatalogError> {
        B::write(self, name, new, options).await
    }

    async fn prune(&self, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError> {
        B::prune(self, name, retention).await
    }

    async fn delete_store(&self, name: &str) -> Result<bool, CatalogError> {
        B::delete_store(self, name).await
    }

    async fn object_stores(&self) -> Result<Vec<ObjectStoreRecord>, CatalogError> {
        let found = sqlx::query(self.sql.object_stores.clone()).fetch_all(&self.pool).await?;
        found.iter().map(rows::object_store).collect()
    }

    async fn put_object_store(&self, record: &ObjectStoreRecord) -> Result<bool, CatalogError> {
        B::put_object_store(self, record).await
    }

    async fn delete_object_store(&self, name: &str) -> Result<bool, CatalogError> {
        B::delete_object_store(self, name).await
    }

    async fn parsed_file(&self, key: ParsedKey<'_>) -> Result<Option<Vec<u8>>, CatalogError> {
        let query = sqlx::query(PARSED_FILE).bind(key.url).bind(key.validator).bind(key.parse_key);
        let row = query.fetch_optional(&self.pool).await?;
        Ok(row.map(|row| row.field("data")).transpose()?)
    }

    async fn parsed_files(&self, keys: &[ParsedKey<'_>]) -> Result<Vec<Option<Vec<u8>>>, CatalogError> {
        let mut found: std::collections::HashMap<(String, String, String), Vec<u8>> = std::collections::HashMap::new();
        // Every parse of a batch's URLs (a URL has a few at most: one per parser asked for and
        // inline bound), in one query, matched to the keys here.
        for batch in keys.chunks(PARSED_FILES_BATCH) {
            let placeholders: Vec<String> = (1..=batch.len()).map(|i| format!("${i}")).collect();
            // Only placeholders are formatted in: the URLs are bound.
            let sql = sqlx::AssertSqlSafe(format!(
                "select url, validator, parse_key, data from parsed_files where url in ({})",
                placeholders.join(", ")
            ));
            let mut query = sqlx::query(sql);
            for key in batch {
                query = query.bind(key.url);
            }
            for row in query.fetch_all(&self.pool).await? {
                let url: String = row.field("url")?;
                let validator: String = row.field("validator")?;
                let parse_key: String = row.field("parse_key")?;
                found.insert((url, validator, parse_key), row.field("data")?);
            }
        }
        Ok(keys
            .iter()
            .map(|k| found.remove(&(k.url.to_owned(), k.validator.to_owned(), k.parse_key.to_owned())))
            .collect())
    }

    async fn put_parsed_files(&self, entries: &[(ParsedKey<'_>, &[u8])]) -> Result<(), CatalogError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for (key, data) in entries {
            sqlx::query(FORGET_PARSED_FILE).bind(key.url).bind(key.validator).execute(&mut *tx).await?;
            let query = sqlx::query(PUT_PARSED_FILE).bind(key.url).bind(key.validator).bind(key.parse_key).bind(*data);
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn changes(&self) -> Option<tokio::sync::mpsc::Receiver<Change>> {
        B::changes(self).await
    }

    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>, CatalogError> {
        let Some(guard) = lock::take_local(&self.held, name) else { return Ok(None) };
        match B::lock_across(self, name).await? {
            Across::Taken(session) => Ok(Some(lock::with_session(guard, session))),
            Across::Busy => Ok(None),
        }
    }
}

/// Ends the opening of a write of a whole store, once its transaction holds the store's row
/// (`created` when it made it): checks what the write expects of the current version, and
/// ends the deletion mark of a store created, or answers [`Opened::Unchanged`] when the
/// current version already has the origin asked for.
pub(super) async fn opened<B>(
    tx: &mut B::Connection,
    sql: &Statements,
    name: &str,
    created: bool,
    options: &VersionOptions,
) -> Result<Opened, CatalogError>
where
    B: Backend,
    for<'c> &'c mut B::Connection: Executor<'c, Database = B>,
    for<'q> &'q str: Encode<'q, B> + Type<B>,
{
    if options.expected.is_some() {
        // The row is this transaction's now: the version read is the one replaced.
        let row = sqlx::query(CURRENT_VERSION).bind(name).fetch_one(&mut *tx).await?;
        Expected::check(options.expected, name, row.field("current_version")?)?;
    }
    if created {
        sqlx::query(UNMARK_DELETED).bind(name).execute(&mut *tx).await?;
    } else if options.unless_same_origin {
        let row = sqlx::query(sql.current_origin.clone()).bind(name).fetch_optional(&mut *tx).await?;
        if let Some(written) = rows::unchanged(row.as_ref(), options)? {
            return Ok(Opened::Unchanged(written));
        }
    }
    Ok(Opened::Store { created })
}
