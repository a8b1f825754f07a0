//! The PostgreSQL change feed: `LISTEN/NOTIFY`, through which replicas learn of changes made
//! through any of them.

use std::time::Duration;

use sqlx::postgres::PgPool;

use crate::catalog::Change;

/// Follows `LISTEN zarrgate_versions, zarrgate_object_stores` until the receiver is dropped,
/// reconnecting after failures; every (re)connection reports `Following`, every loss `Lost`.
pub(super) async fn listen(pool: PgPool, tx: tokio::sync::mpsc::Sender<Change>) {
    while !tx.is_closed() {
        match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(e) = listener.listen_all(["zarrgate_versions", "zarrgate_object_stores"]).await {
                    tracing::warn!(error = %e, "cannot LISTEN for catalog changes; retrying");
                } else {
                    tracing::info!("following catalog changes (LISTEN/NOTIFY)");
                    if tx.send(Change::Following).await.is_err() {
                        return;
                    }
                    loop {
                        let change = match listener.try_recv().await {
                            Ok(Some(n)) if n.channel() == "zarrgate_versions" => Change::Store(n.payload().to_owned()),
                            Ok(Some(_)) => Change::ObjectStores,
                            Ok(None) => {
                                // Reconnect here, not inside the listener: `Following` must come
                                // after the new LISTEN, or a change made in between would go unseen.
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
