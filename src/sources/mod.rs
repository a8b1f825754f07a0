//! Source objects: the registry of object stores (URL prefix -> client, longest prefix wins)
//! and ranged, time-limited, length-checked, conditional fetches.

mod connector;
mod error;
mod fetch;
mod flight;
mod list;
mod local;
mod meter;
mod options;
mod readahead;
mod registry;
mod resume;

pub use error::{SourceConfigError, SourceError, error_chain};
pub use fetch::Fetched;
pub use list::{Keep, Listed};
pub use readahead::ReadAheadSettings;
pub use registry::{ObjectStoreEntry, Origin, SourceRegistry, SourceSettings};
