//! The questions the server asks of any catalog that the narrow [`Catalog`] trait answers
//! already: a current version is a [`head`](Catalog::head) without a pin, one store is a
//! selection of [`stores`](Catalog::stores), a registration is a [`write`](Catalog::write) of a
//! whole store. They are said once here, for every backend and behind the breaker alike.
//!
//! They are methods of `dyn Catalog` itself, so that every holder of an `Arc<dyn Catalog>` or a
//! `&dyn Catalog` calls them as before, without importing anything.

use super::{
    Catalog, CatalogError, DerivedVersion, NewVersion, Origins, StoreHead, StoreRecord, Stores, VersionHead,
    VersionOptions, Written,
};
use crate::zarr::validate::ValidatedStore;

impl dyn Catalog {
    /// The current version of `store`.
    pub async fn current_version(&self, store: &str) -> Result<Option<VersionHead>, CatalogError> {
        Ok(served(self.head(store, None).await?))
    }

    /// Version `id` of `store`, if it exists and belongs to that store.
    pub async fn version(&self, store: &str, id: i64) -> Result<Option<VersionHead>, CatalogError> {
        Ok(served(self.head(store, Some(id)).await?))
    }

    /// When `name` was deleted (unix milliseconds), if it was and has not been registered again.
    pub async fn deleted_at(&self, name: &str) -> Result<Option<i64>, CatalogError> {
        // A registration that creates a store ends its deletion mark in the same transaction,
        // so a store that exists has none.
        Ok(match self.head(name, None).await? {
            StoreHead::Deleted(at) => Some(at),
            StoreHead::Version(_) | StoreHead::Unknown => None,
        })
    }

    /// One store with its current summary.
    pub async fn store(&self, name: &str) -> Result<Option<StoreRecord>, CatalogError> {
        Ok(self.stores(Stores::Named(name)).await?.pop())
    }

    /// Stores in name order after `after`, at most `limit`.
    pub async fn list_stores(&self, after: Option<&str>, limit: u32) -> Result<Vec<StoreRecord>, CatalogError> {
        self.stores(Stores::After { after, limit }).await
    }

    /// Names of the stores with a version referencing a URL under `prefix`.
    pub async fn stores_using(&self, prefix: &str) -> Result<Vec<String>, CatalogError> {
        Ok(self.stores(Stores::Using(prefix)).await?.into_iter().map(|s| s.head.store).collect())
    }

    /// The origin recorded with version `version`, if any.
    pub async fn origin(&self, version: i64) -> Result<Option<String>, CatalogError> {
        Ok(self.origins_of(Origins::Version(version)).await?.pop().map(|(_, origin)| origin))
    }

    /// Every store whose current version has an origin, with it, in name order.
    pub async fn origins(&self) -> Result<Vec<(String, String)>, CatalogError> {
        self.origins_of(Origins::Current).await
    }

    /// Writes `store` as a new version of `name` and makes it current, atomically.
    pub async fn write_version(
        &self,
        name: &str,
        store: &ValidatedStore,
        options: VersionOptions,
    ) -> Result<Written, CatalogError> {
        self.write(name, NewVersion::Whole(store), options).await
    }

    /// Writes a version derived from `version.base` (which must still be current), sharing the
    /// base's blocks but for the tiles dropped.
    pub async fn write_derived(
        &self,
        name: &str,
        version: &DerivedVersion<'_>,
        options: VersionOptions,
    ) -> Result<Written, CatalogError> {
        self.write(name, NewVersion::Derived(version), options).await
    }
}

/// The version a head names, if it names one.
fn served(head: StoreHead) -> Option<VersionHead> {
    match head {
        StoreHead::Version(head) => Some(head),
        StoreHead::Deleted(_) | StoreHead::Unknown => None,
    }
}
