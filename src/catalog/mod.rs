//! Persistence of object stores, stores, versions, nodes and manifest blocks, behind one narrow
//! trait ([`Catalog`]) with a PostgreSQL and an SQLite implementation. Nothing here knows about
//! HTTP.
//!
//! [`SqlCatalog`] implements the trait once for both databases, with the statements they share;
//! each database's file (`postgres.rs`, `sqlite.rs`) holds only what it does its own way (the
//! writes, their transactions, its dialect). What the trait answers already (`current_version`,
//! `store`, `write_version`, ...) is said once in `convenience.rs`, for any catalog.

mod breaker;
mod convenience;
mod lock;
mod postgres;
mod rows;
mod sql;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::zarr::document::SourceFacts;
use crate::zarr::spill::SpillLog;
use crate::zarr::validate::{Summary, ValidNode, ValidatedStore};

pub use breaker::{Guarded, PROBE_INTERVAL};
pub use lock::LockGuard;
pub use postgres::PostgresCatalog;
pub use sql::SqlCatalog;
pub use sqlite::SqliteCatalog;

/// A catalog failure.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The database failed or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Migrations could not be applied.
    #[error("migrating the catalog failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A unique constraint refused the write; the constraint's name says which.
    #[error("conflict on {0}")]
    Conflict(String),
    /// A stored row cannot be read back.
    #[error("the catalog holds an unreadable row: {0}")]
    Corrupt(String),
    /// The blocks to write could not be read back from the registration's scratch space.
    #[error("reading the blocks to write from scratch space failed: {0}")]
    Scratch(#[from] std::io::Error),
    /// The database was found unreachable moments ago and was not asked again ([`Guarded`]).
    #[error("{0}")]
    Unavailable(String),
    /// The write expected another current version ([`Expected`]); nothing was written.
    #[error("{}", precondition_failed(.store, .expected, .current))]
    PreconditionFailed {
        /// The store written.
        store: String,
        /// What the write expected.
        expected: Expected,
        /// The store's current version when the write was refused.
        current: Option<i64>,
    },
}

/// What a write of a store expects its current version to be (`If-Match`, `If-None-Match: *`),
/// checked in the write's own transaction: of two writers who read the same version, one
/// writes and the other is told, never both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The current version is this one.
    Version(i64),
    /// The store has a current version (`If-Match: *`).
    Any,
    /// It has none: the write creates the store (`If-None-Match: *`).
    Absent,
}

impl Expected {
    /// Whether it holds when the current version is `current`.
    pub fn holds(self, current: Option<i64>) -> bool {
        match self {
            Self::Version(id) => current == Some(id),
            Self::Any => current.is_some(),
            Self::Absent => current.is_none(),
        }
    }

    /// `Ok` when it holds of `store`'s current version `current`, else
    /// [`CatalogError::PreconditionFailed`].
    pub fn check(expected: Option<Self>, store: &str, current: Option<i64>) -> Result<(), CatalogError> {
        match expected {
            Some(e) if !e.holds(current) => {
                Err(CatalogError::PreconditionFailed { store: store.to_owned(), expected: e, current })
            }
            _ => Ok(()),
        }
    }
}

/// The ETag of a store's version `id`, as the control plane gives it and `If-Match` takes it.
pub fn version_etag(id: i64) -> String {
    format!("\"v{id}\"")
}

fn precondition_failed(store: &str, expected: &Expected, current: &Option<i64>) -> String {
    let now = match current {
        Some(id) => format!("is at version {id} (ETag {})", version_etag(*id)),
        None => "does not exist".to_owned(),
    };
    let asked = match expected {
        Expected::Version(id) => format!("the request expected version {id} (If-Match: {})", version_etag(*id)),
        Expected::Any => "the request expected it to exist (If-Match: *)".to_owned(),
        Expected::Absent => "the request expected no store of that name (If-None-Match: *)".to_owned(),
    };
    format!(
        "store {store:?} {now}, but {asked}: another write came first; nothing was changed. Read the store again \
         (GET /api/v1/stores/{store}), make the change against what it holds now and send it with that ETag"
    )
}

impl CatalogError {
    /// True when the database cannot be reached (refused or closed connections, no connection
    /// within the acquire timeout, a server shutting down), as opposed to a failed statement.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Self::Unavailable(_) => true,
            Self::Database(
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::WorkerCrashed,
            ) => true,
            // PostgreSQL: connection exceptions (class 08), an administrator or crash shutdown,
            // a server starting up (57P01-57P03), too many connections (53300).
            Self::Database(sqlx::Error::Database(db)) => db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some_and(|pg| pg.code().starts_with("08") || pg.code().starts_with("57P") || pg.code() == "53300"),
            _ => false,
        }
    }
}

/// The identity of one store version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionHead {
    /// The store's name.
    pub store: String,
    /// The version's id, unique in the catalog and never reused.
    pub id: i64,
    /// When the version was registered, unix milliseconds.
    pub created_at_ms: i64,
    /// Missing chunks are answered with a fill-value chunk, not 404.
    pub fill_missing: bool,
    /// Arrays whose codecs are not portable are served transcoded (`?codecs=portable`).
    pub portable: bool,
}

/// What the data plane finds under a store name (or a pinned `name@version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHead {
    /// The version to serve.
    Version(VersionHead),
    /// The store was deleted at this time (unix milliseconds) and not registered again.
    Deleted(i64),
    /// No such store, or no such version of it.
    Unknown,
}

/// How a new version is to be served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionOptions {
    /// Answer missing chunks with a fill-value chunk instead of 404.
    pub fill_missing: bool,
    /// Serve arrays whose codecs are not portable transcoded (`?codecs=portable`).
    pub portable: bool,
    /// Where the version comes from when not from a document sent (an Icechunk store's
    /// repository, reference and snapshot), as JSON text.
    pub origin: Option<String>,
    /// Write nothing when the current version has this same origin: replicas syncing the same
    /// branch at once make one version, not one each.
    pub unless_same_origin: bool,
    /// Write only if the store's current version is as expected ([`CatalogError::PreconditionFailed`]
    /// otherwise).
    pub expected: Option<Expected>,
    /// The files the version was made from, written as rows of their own ([`Catalog::version_files`]).
    pub files: Option<FileRows>,
}

/// The files a version made from files was read from, in order: each its record, one line of
/// JSON text in a registration's scratch log (in memory up to its budget, on disk past it), so
/// that a registration of any number of files writes them a batch at a time, never all at once.
#[derive(Debug, Clone)]
pub struct FileRows(Arc<SpillLog>);

impl FileRows {
    /// The records of `log`, one a line.
    pub fn new(log: SpillLog) -> Self {
        Self(Arc::new(log))
    }

    /// The records in order, at most `max_rows` at a time.
    pub fn batches(&self, max_rows: usize) -> impl Iterator<Item = Result<Vec<String>, CatalogError>> + Send + '_ {
        use std::io::BufRead;
        let mut lines = self.0.reader().lines();
        std::iter::from_fn(move || {
            let batch: Result<Vec<String>, _> = lines.by_ref().take(max_rows.max(1)).collect();
            match batch {
                Ok(batch) if batch.is_empty() => None,
                Ok(batch) => Some(Ok(batch)),
                Err(e) => Some(Err(CatalogError::Scratch(e))),
            }
        })
    }
}

/// Two are the same when they are the same log.
impl PartialEq for FileRows {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FileRows {}

/// What retention keeps of a store's versions (the current one always stays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The newest versions kept whatever their age.
    pub keep_versions: u32,
    /// Versions younger than this (milliseconds) are kept whatever their number.
    pub keep_ms: i64,
}

/// A change made through any replica, as the catalog's change feed reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A store was registered, replaced, pruned or deleted.
    Store(String),
    /// The object stores changed.
    ObjectStores,
    /// The feed was interrupted: changes made meanwhile go unseen until it follows again.
    Lost,
    /// The feed follows changes (again): any made while it was lost were missed.
    Following,
}

/// A store with its current version's summary.
#[derive(Debug, Clone)]
pub struct StoreRecord {
    /// The current version.
    pub head: VersionHead,
    /// When the store was first registered, unix milliseconds.
    pub store_created_at_ms: i64,
    /// Counts of the current version.
    pub summary: Summary,
}

/// One version of a store as [`Catalog::versions`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedVersion {
    /// The version.
    pub head: VersionHead,
    /// Whether it is the store's current version.
    pub current: bool,
}

/// A node as stored.
#[derive(Debug, Clone)]
pub struct StoredNode {
    /// Its path (`""` for the root).
    pub path: String,
    /// Its metadata, as the JSON text of an object (read by the view one node at a time: a
    /// version of 100,000 arrays parsed at once took 700 MB).
    pub metadata: String,
    /// For arrays, the shape of their tiles in chunks.
    pub tile_shape: Option<Vec<u64>>,
}

impl StoredNode {
    /// Its metadata, parsed.
    pub fn parse_metadata(&self) -> Result<Map<String, Value>, CatalogError> {
        parse_metadata(&self.path, &self.metadata)
    }
}

/// The metadata text of node `path`, parsed: a JSON object.
pub fn parse_metadata(path: &str, text: &str) -> Result<Map<String, Value>, CatalogError> {
    match serde_json::from_str(text) {
        Ok(Value::Object(metadata)) => Ok(metadata),
        _ => Err(CatalogError::Corrupt(format!("metadata of node {path:?}"))),
    }
}

/// An object store registered over the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStoreRecord {
    /// Its name.
    pub name: String,
    /// Its URL prefix.
    pub url: String,
    /// Builder options (may hold secrets).
    pub options: Map<String, Value>,
}

/// A version derived from the current one by an incremental update (PATCH).
#[derive(Debug)]
pub struct DerivedVersion<'a> {
    /// The version it derives from; writing fails with a conflict if it is no longer current.
    pub base: i64,
    /// Every node of the new version.
    pub nodes: &'a [ValidNode],
    /// Arrays whose base tiles are not carried over (removed, or rebuilt).
    pub dropped_nodes: Vec<String>,
    /// Base tiles not carried over (replaced by new blocks, or emptied).
    pub dropped_tiles: Vec<(String, u64)>,
    /// New blocks: array, tile, encoded block.
    pub blocks: Vec<(String, u64, Vec<u8>)>,
    /// Facts of sources new to this version (the base version's are carried over).
    pub sources: &'a std::collections::BTreeMap<String, SourceFacts>,
    /// Counts of the new version.
    pub summary: Summary,
}

/// The result of writing a version.
#[derive(Debug, Clone)]
pub struct Written {
    /// The new, now current, version.
    pub head: VersionHead,
    /// True when the store did not exist before.
    pub created: bool,
    /// True when nothing was written: the current version already had the origin asked for
    /// ([`VersionOptions::unless_same_origin`]); `head` is that version.
    pub unchanged: bool,
}

/// Which stores [`Catalog::stores`] reads, each with its current version's summary, in name order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stores<'a> {
    /// The store of this name (none or one).
    Named(&'a str),
    /// A page: the stores named after `after` (from the first when `None`), at most `limit`.
    After {
        /// The last name of the page before.
        after: Option<&'a str>,
        /// The most stores read.
        limit: u32,
    },
    /// The stores with a version (current or not) referencing a URL under this prefix.
    Using(&'a str),
}

/// Whose origins [`Catalog::origins_of`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origins {
    /// The origin of this version, if it has one.
    Version(i64),
    /// The origin of every store's current version that has one.
    Current,
}

/// What a new version written by [`Catalog::write`] holds.
#[derive(Debug, Clone, Copy)]
pub enum NewVersion<'a> {
    /// A whole store, validated; the write creates the store if it does not exist.
    Whole(&'a ValidatedStore),
    /// An incremental update of the current version, which must still be its base.
    Derived(&'a DerivedVersion<'a>),
}

/// Which parse of which file [`Catalog::parsed_file`] and [`Catalog::put_parsed_files`] name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The URL read (a file's, or its DMR++ sidecar's).
    pub url: &'a str,
    /// Which content of it: `etag:<ETag>`, else `size:<n>:<last_modified>`.
    pub validator: &'a str,
    /// The parser used or asked for, and the settings that change a parse's output.
    pub parse_key: &'a str,
}

/// The catalog: the narrow interface the rest of the server needs, implemented by
/// [`SqlCatalog`] for both databases and wrapped by the breaker ([`Guarded`]). The questions it
/// answers already (`current_version`, `store`, `write_version`, ...) are methods of
/// `dyn Catalog` (`convenience.rs`).
#[async_trait]
pub trait Catalog: Send + Sync + 'static {
    /// `"postgres"` or `"sqlite"`, for logs and metrics.
    fn backend(&self) -> &'static str;
    /// Checks that the database answers.
    async fn ping(&self) -> Result<(), CatalogError>;
    /// What a read of `store` (its current version, or version `pinned` of it) finds, read in one
    /// statement: while another writer deletes the store and registers it again, a reader sees
    /// the old version, the deletion or the new version, never a transient [`StoreHead::Unknown`].
    async fn head(&self, store: &str, pinned: Option<i64>) -> Result<StoreHead, CatalogError>;
    /// Every node of a version.
    async fn nodes(&self, version: i64) -> Result<Vec<StoredNode>, CatalogError>;
    /// The encoded block of `tile` of array `node` in a version, `None` for an empty tile.
    async fn block(&self, version: i64, node: &str, tile: u64) -> Result<Option<Vec<u8>>, CatalogError>;
    /// The non-empty tiles of a version, by node then tile.
    async fn tiles(&self, version: i64) -> Result<Vec<(String, u64)>, CatalogError>;
    /// The sources a version references, with their recorded facts.
    async fn sources(&self, version: i64) -> Result<Vec<(String, SourceFacts)>, CatalogError>;
    /// The stores `which` names, with their current summaries, in name order.
    async fn stores(&self, which: Stores<'_>) -> Result<Vec<StoreRecord>, CatalogError>;
    /// The newest versions of `store`, at most `limit`, newest first (retention bounds how many
    /// there are); empty when there is no such store.
    async fn versions(&self, store: &str, limit: u32) -> Result<Vec<ListedVersion>, CatalogError>;
    /// The origins `which` names, each with its store's name, in name order.
    async fn origins_of(&self, which: Origins) -> Result<Vec<(String, String)>, CatalogError>;
    /// Records `offset..offset + limit` of the files version `version` was made from, in
    /// order (as [`VersionOptions::files`] gave them); empty past the end, or when it has none.
    async fn version_files(&self, version: i64, offset: u64, limit: u64) -> Result<Vec<String>, CatalogError>;
    /// Writes version `new` of store `name` and makes it current, atomically.
    async fn write(&self, name: &str, new: NewVersion<'_>, options: VersionOptions) -> Result<Written, CatalogError>;
    /// Deletes the versions of `name` that `retention` does not keep (never the current one) and
    /// the blocks no remaining version uses; the ids of the versions deleted.
    async fn prune(&self, name: &str, retention: Retention) -> Result<Vec<i64>, CatalogError>;
    /// Deletes a store with all its versions and remembers when (until a store of that name is
    /// registered again); false if there was none.
    async fn delete_store(&self, name: &str) -> Result<bool, CatalogError>;
    /// Every object store registered over the API.
    async fn object_stores(&self) -> Result<Vec<ObjectStoreRecord>, CatalogError>;
    /// Registers or replaces an object store; true if it is new.
    async fn put_object_store(&self, record: &ObjectStoreRecord) -> Result<bool, CatalogError>;
    /// Removes an object store; false if there was none.
    async fn delete_object_store(&self, name: &str) -> Result<bool, CatalogError>;
    /// The parse remembered under `key` (opaque bytes, as [`Catalog::put_parsed_files`] was given
    /// them), if there is one.
    async fn parsed_file(&self, key: ParsedKey<'_>) -> Result<Option<Vec<u8>>, CatalogError>;
    /// The parses remembered under `keys`, in their order (`None` where there is none): a
    /// rescan's unchanged files looked up in a few queries, not one each.
    async fn parsed_files(&self, keys: &[ParsedKey<'_>]) -> Result<Vec<Option<Vec<u8>>>, CatalogError>;
    /// Remembers parses, each under its key, in one transaction (a registration's files at
    /// once: a transaction each cost a 200-file registration a sixth of its time), forgetting
    /// the parses of the same URLs under other validators (a rewritten file's old parse is of
    /// no use).
    async fn put_parsed_files(&self, entries: &[(ParsedKey<'_>, &[u8])]) -> Result<(), CatalogError>;
    /// Changes made through other replicas, when the backend can tell (PostgreSQL
    /// `LISTEN/NOTIFY`); `None` when it cannot, and replicas rely on cache expiry.
    async fn changes(&self) -> Option<tokio::sync::mpsc::Receiver<Change>> {
        None
    }
    /// Takes the lock `name`, held by one task of one replica at a time (PostgreSQL: a session
    /// advisory lock on a hash of the name; SQLite, one replica's: within the process), until
    /// the guard is released or dropped; `None` when another holds it.
    async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>, CatalogError>;
}

/// Opens the catalog named by `url` (`postgres://...` or `sqlite://...`) and migrates it.
pub async fn connect(url: &str, max_connections: u32) -> Result<Arc<dyn Catalog>, CatalogError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresCatalog::connect(url, max_connections).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteCatalog::connect(url, max_connections).await?))
    } else {
        Err(CatalogError::Database(sqlx::Error::Configuration(
            format!("DATABASE_URL must start with postgres:// or sqlite:, got {}", crate::redact::redact_url(url))
                .into(),
        )))
    }
}

/// Maps a unique-constraint violation to [`CatalogError::Conflict`] naming the constraint.
fn unique_violation(e: sqlx::Error) -> CatalogError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            CatalogError::Conflict(db.constraint().unwrap_or("a unique constraint").to_owned())
        }
        _ => CatalogError::Database(e),
    }
}

#[cfg(test)]
mod tests {
    use super::CatalogError;

    #[test]
    fn every_failure_to_talk_to_the_database_is_unreachable_and_a_refusal_is_not() {
        use std::io::{Error, ErrorKind};
        let unreachable = [
            sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".into()),
            sqlx::Error::Io(Error::from(ErrorKind::ConnectionRefused)),
            sqlx::Error::Io(Error::from(ErrorKind::ConnectionReset)),
            sqlx::Error::Io(Error::from(ErrorKind::UnexpectedEof)),
            sqlx::Error::Tls("handshake eof".into()),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
        ];
        for e in unreachable {
            let shown = e.to_string();
            assert!(CatalogError::Database(e).is_unreachable(), "{shown}");
        }
        assert!(CatalogError::Unavailable("down".into()).is_unreachable());
        for e in [sqlx::Error::RowNotFound, sqlx::Error::ColumnNotFound("id".into())] {
            assert!(!CatalogError::Database(e).is_unreachable());
        }
        assert!(!CatalogError::Conflict("stores_pkey".into()).is_unreachable());
    }
}
