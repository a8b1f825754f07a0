//! Source objects: the registry of object stores (URL prefix -> client, longest prefix wins)
//! and ranged, time-limited, length-checked, conditional fetches.

mod connector;
mod fetch;
mod local;
mod options;
mod registry;

pub use fetch::{Fetched, ObjectFacts, SourceError};
pub use options::redact_options;
pub use registry::{ObjectStoreEntry, Origin, SourceConfigError, SourceRegistry, SourceSettings};
