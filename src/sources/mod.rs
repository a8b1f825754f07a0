//! Source objects: the registry of object stores (URL prefix -> client, longest prefix wins)
//! and ranged, time-limited, length-checked, conditional fetches.

mod fetch;
mod local;
mod registry;

pub use fetch::{Fetched, ObjectFacts, SourceError};
pub use registry::{ObjectStoreEntry, Origin, SourceConfigError, SourceRegistry, SourceSettings, redact_options};
