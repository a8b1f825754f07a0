//! The object stores sources live in, as a use case: registering one over the API (checked
//! against the configuration's policies and the stores that read from it), removing one, and
//! loading them all, from the configuration file and the catalog, into the source registry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::error::{Error, Result};
use super::register::Registrar;
use crate::catalog::{Catalog, CatalogError, ObjectStoreRecord};
use crate::config::ObjectStoreConfig;
use crate::sources::{ObjectStoreEntry, Origin, SourceConfigError, SourceRegistry, error_chain};

/// What the configuration says of object stores.
#[derive(Debug, Clone, Default)]
pub struct ObjectStoreSettings {
    /// The object stores of the configuration file: always there, never changed over the API.
    pub declared: Vec<ObjectStoreConfig>,
    /// Whether `file://` object stores may be registered over the API (`allow_file_object_stores`).
    pub allow_files: bool,
    /// zarrgate's own files (its SQLite catalog, its configuration file), which no `file://`
    /// object store may expose.
    pub own_files: Vec<PathBuf>,
}

/// The object stores service.
pub struct ObjectStores {
    catalog: Arc<dyn Catalog>,
    sources: Arc<SourceRegistry>,
    registrar: Arc<Registrar>,
    settings: ObjectStoreSettings,
    /// The catalog's object stores as last loaded into the registry.
    loaded: tokio::sync::Mutex<Vec<ObjectStoreRecord>>,
}

/// Why the object stores could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The catalog could not list them.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// An object store of the configuration file cannot be built.
    #[error("object store {name} in the configuration file")]
    Declared {
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: SourceConfigError,
    },
}

/// An object store registered over the API.
pub struct RegisteredObjectStore {
    /// It, as built.
    pub entry: ObjectStoreEntry,
    /// True when no object store of that name was registered before.
    pub created: bool,
}

impl ObjectStores {
    /// The object stores of `catalog` and the configuration, served by `sources`; a change waits
    /// for `registrar`'s registrations to leave the object stores alone.
    pub fn new(
        catalog: Arc<dyn Catalog>,
        sources: Arc<SourceRegistry>,
        registrar: Arc<Registrar>,
        settings: ObjectStoreSettings,
    ) -> Self {
        Self { catalog, sources, registrar, settings, loaded: tokio::sync::Mutex::new(Vec::new()) }
    }

    /// Every object store, by name.
    pub fn list(&self) -> Vec<Arc<ObjectStoreEntry>> {
        let mut entries: Vec<Arc<ObjectStoreEntry>> = self.sources.entries().iter().cloned().collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        entries
    }

    /// The object store named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<ObjectStoreEntry>> {
        self.sources.get(name)
    }

    /// Registers (or changes) object store `name` at `url` with `options`. Refused: a name the
    /// configuration file declares, a `file://` store where they are not allowed or one that
    /// would expose zarrgate's own files, a URL another object store serves, and a new URL for
    /// an object store whose sources stores read.
    pub async fn register(&self, name: &str, url: &str, options: &Map<String, Value>) -> Result<RegisteredObjectStore> {
        let entry = self.build(name, url, options)?;
        let _change = self.registrar.object_store_change().await?;
        if let Some(other) = self.sources.entries().iter().find(|e| e.prefix == entry.prefix && e.name != name) {
            return Err(Error::Conflict(format!("object store {:?} already serves {}", other.name, entry.prefix)));
        }
        if let Some(old) = self.sources.get(name).filter(|old| old.prefix != entry.prefix) {
            let users = self.catalog.stores_using(&old.prefix).await?;
            if !users.is_empty() {
                return Err(Error::Conflict(format!(
                    "object store {name:?} serves sources of stores {}: changing its URL from {} would break them; delete those stores or register a new object store",
                    users.join(", "),
                    old.prefix
                )));
            }
        }
        let record = ObjectStoreRecord { name: name.to_owned(), url: entry.prefix.clone(), options: options.clone() };
        let created = self.catalog.put_object_store(&record).await?;
        self.reload().await?;
        tracing::info!(object_store = %name, url = %entry.prefix, created, "object store registered");
        Ok(RegisteredObjectStore { entry, created })
    }

    /// The client of a registration over the API, once the configuration's policies allow it.
    fn build(&self, name: &str, url: &str, options: &Map<String, Value>) -> Result<ObjectStoreEntry> {
        if self.settings.declared.iter().any(|o| o.name == name) {
            return Err(Error::Conflict(format!(
                "object store {name:?} is declared in the configuration file and cannot be changed over the API"
            )));
        }
        // Decided on the parsed URL, as the builder reads it (the parser drops tabs, newlines and
        // leading control characters that a test of the text would miss), before the builder looks
        // at the file system.
        let local = url::Url::parse(url).is_ok_and(|u| u.scheme() == "file");
        if local && !self.settings.allow_files {
            return Err(Error::Conflict(
                "file:// object stores may not be registered over the API here (allow_file_object_stores = false)"
                    .into(),
            ));
        }
        let entry = ObjectStoreEntry::build(name, url, options, Origin::Api, &self.sources.settings).map_err(|e| {
            Error::Invalid {
                title: format!("object store {name:?} cannot be registered: {e}"),
                problems: vec![e.to_string()],
            }
        })?;
        if let Some(root) = entry.local_root()
            && let Some(own) = self.settings.own_files.iter().find(|f| exposes(root, f))
        {
            return Err(Error::Invalid {
                title: format!("object store {name:?} cannot be registered: it would expose zarrgate's own files"),
                problems: vec![format!(
                    "{} holds {}, which is zarrgate's own (its catalog or configuration) and must never be served; \
                     register a directory that holds only source files",
                    root.display(),
                    own.display()
                )],
            });
        }
        Ok(entry)
    }

    /// Removes object store `name`, registered over the API, unless stores read sources from it.
    pub async fn remove(&self, name: &str) -> Result<()> {
        let _change = self.registrar.object_store_change().await?;
        let Some(entry) = self.sources.get(name) else {
            return Err(Error::NotFound(format!("no object store is named {name:?}")));
        };
        if entry.origin == Origin::Config {
            return Err(Error::Conflict(format!(
                "object store {name:?} is declared in the configuration file and cannot be removed over the API"
            )));
        }
        let users = self.catalog.stores_using(&entry.prefix).await?;
        if !users.is_empty() {
            return Err(Error::Conflict(format!(
                "object store {name:?} serves sources of stores {}: delete those stores first",
                users.join(", ")
            )));
        }
        self.catalog.delete_object_store(name).await?;
        self.reload().await?;
        tracing::info!(object_store = %name, "object store removed");
        Ok(())
    }

    /// Rebuilds the registry after a change made here; a failure is a bug of the server's.
    async fn reload(&self) -> Result<()> {
        self.load(true).await.map_err(|e| Error::Internal(error_chain(&e)))
    }

    /// Rebuilds the source registry from the configuration file and the catalog. Unless `force`,
    /// nothing is rebuilt when the catalog's object stores have not changed.
    pub async fn load(&self, force: bool) -> std::result::Result<(), LoadError> {
        // Read under the lock: a periodic load that read the list before a registration and
        // replaced the registry after it dropped the object store just registered (its next
        // file registration was a 422 "not under any registered object store").
        let mut loaded = self.loaded.lock().await;
        let records = self.catalog.object_stores().await?;
        if !force && *loaded == records {
            return Ok(());
        }
        let settings = &self.sources.settings;
        let mut entries = Vec::new();
        for o in &self.settings.declared {
            let entry = ObjectStoreEntry::build(&o.name, &o.url, &o.options, Origin::Config, settings)
                .map_err(|source| LoadError::Declared { name: o.name.clone(), source })?;
            entries.push(Arc::new(entry));
        }
        for r in &records {
            if entries.iter().any(|e| e.name == r.name) {
                tracing::warn!(name = %r.name, "object store registered over the API is shadowed by the configuration file");
                continue;
            }
            match ObjectStoreEntry::build(&r.name, &r.url, &r.options, Origin::Api, settings) {
                Ok(entry) => entries.push(Arc::new(entry)),
                Err(e) => {
                    tracing::error!(name = %r.name, url = %r.url, error = %e, "cannot build a registered object store; its sources will fail")
                }
            }
        }
        self.sources.replace(entries);
        *loaded = records;
        Ok(())
    }
}

/// True when `file` (or, if it does not exist yet, its directory) lies under `root`.
fn exposes(root: &Path, file: &Path) -> bool {
    let canonical = std::fs::canonicalize(file).or_else(|_| {
        std::fs::canonicalize(file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(".".as_ref()))
    });
    canonical.is_ok_and(|c| c.starts_with(root))
}
