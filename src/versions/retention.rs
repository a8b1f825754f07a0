//! After a new version is written: the versions retention does not keep are deleted, and this
//! replica forgets what it cached about the store (other replicas hear of it through the
//! catalog's change feed).

use super::register::Registrar;
use crate::catalog::Retention;

/// PostgreSQL intervals end after 178 million years; a century is "forever" enough.
const CENTURY_MS: u64 = 100 * 365 * 86_400 * 1000;

impl Registrar {
    /// Deletes the versions of `store` that retention does not keep (a failure only delays that
    /// to the next registration) and forgets what this replica cached about its versions.
    pub async fn settle(&self, store: &str) {
        let config = &self.settings.retention;
        let retention = Retention {
            keep_versions: config.keep_versions.max(1),
            keep_ms: i64::try_from(config.keep_seconds.saturating_mul(1000).min(CENTURY_MS)).unwrap_or(i64::MAX),
        };
        match self.catalog.prune(store, retention).await {
            Ok(pruned) if !pruned.is_empty() => tracing::info!(store, ?pruned, "old versions deleted by retention"),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(store, error = %e, "retention failed; old versions kept until the next registration")
            }
        }
        self.reader.forget_store(store).await;
    }
}
