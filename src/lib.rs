//! zarrgate: archival files served as a Zarr v3 store over HTTP, from persisted virtual manifests.

pub mod zarr;
