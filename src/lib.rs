//! zarrgate: archival files served as a Zarr v3 store over HTTP, from persisted virtual manifests.

#![forbid(unsafe_code)]

pub mod app;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod error;
pub mod formats;
pub mod http;
pub mod logs;
pub mod metrics;
pub mod redact;
pub mod server;
pub mod sources;
pub mod versions;
pub mod zarr;
