//! The read and write use cases of store versions, between the HTTP edge and the stores: the
//! [`Reader`] (the one lookup of what a read URL names: its version, view, block and chunk;
//! source reads; their caches), the [`Registrar`] (register, patch, delete, settle), [`Stores`]
//! (list, describe, versions, recorded sources, verify) and [`ObjectStores`] (register, remove,
//! load). Services take the parts they need and answer with their own [`Error`]; nothing here
//! knows about HTTP requests or responses.

mod assemble;
mod assembly_pool;
pub mod cache;
pub mod error;
pub mod facts;
pub mod files;
pub mod icechunk;
pub mod ingest;
pub mod lookup;
pub mod object_stores;
mod patch;
pub mod quicklook;
pub mod read;
pub mod register;
mod retention;
pub mod stores;
pub mod sync;
pub mod v2;
pub mod view;

pub use error::Error;
pub use ingest::Format;
pub use lookup::{Found, Keys, Lookup, Named, ReadUrl};
pub use object_stores::{ObjectStoreSettings, ObjectStores};
pub use read::{Chunk, Reader, VirtualChunk};
pub use register::{Registered, Registrar, Registration, Settings};
pub use stores::Stores;
pub use view::RenderedQuicklook;
pub use view::VersionView;
