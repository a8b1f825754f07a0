//! Source objects: the registry of object stores (URL prefix -> client, longest prefix wins)
//! and ranged, time-limited, length-checked, conditional fetches.

mod connector;
mod error;
mod fetch;
mod local;
mod meter;
mod options;
mod registry;
mod resume;

pub use error::{SourceConfigError, SourceError};
pub use fetch::Fetched;
pub use options::redact_options;
pub use registry::{ObjectStoreEntry, Origin, SourceRegistry, SourceSettings};
