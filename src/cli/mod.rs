//! The operator's command line against a running server: `zarrgate stores ...` and
//! `zarrgate object-stores ...` over the control plane (`/api/v1`), with the admin token from
//! `ZARRGATE_TOKEN`. Text for a person by default, the server's JSON with `--json`; the exit
//! status is 0 on success, 1 on any failure (its problems on stderr, one per line).

mod client;
mod files;
mod show;
mod upload;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use futures::StreamExt;
use reqwest::{Method, StatusCode, header};
use serde_json::{Value, json};

use client::{Api, Failure};

/// The server `--server` names when it is not given: the server's own default address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

const AFTER_HELP: &str = "The admin token, when the server has some, is read from ZARRGATE_TOKEN.\n\
    Exit status: 0 on success, 1 when the server refuses or cannot be reached (why on stderr).";

/// Where the server is, and how answers are printed.
#[derive(clap::Args, Debug)]
pub struct Connection {
    /// The server's URL (also ZARRGATE_SERVER).
    #[arg(long, global = true, env = "ZARRGATE_SERVER", default_value = DEFAULT_SERVER)]
    server: String,
    /// Print the server's JSON answers (and refusals) on stdout instead of text, for scripts.
    #[arg(long, global = true)]
    json: bool,
}

/// `zarrgate stores ...`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Stores {
    #[command(flatten)]
    connection: Connection,
    #[command(subcommand)]
    command: StoresCommand,
}

/// What to do with stores.
#[derive(Subcommand, Debug)]
pub enum StoresCommand {
    /// List the stores with their summaries.
    List,
    /// Show a store's summary: version, arrays, chunks, sources, bytes.
    Show {
        /// The store.
        name: String,
    },
    /// Register a store, or replace it, from a manifest file (native JSON, kerchunk JSON, or a
    /// tar of kerchunk parquet references), sent with a progress bar; or from data files the
    /// server reads itself (HDF5/netCDF4, netCDF3, FITS, or DMR++ sidecars), named by their URLs
    /// and joined into one store with --join.
    Put {
        /// The store.
        name: String,
        /// The manifest file; or the URLs of data files under a registered object store
        /// (`s3://bucket/air.nc`, `file:///data/air.nc`, `https://...`), read by the server; or
        /// one URL with a glob (`*`, `?`, `[`), quoted: every object under the prefix before it
        /// that matches, in key order (`'s3://bucket/era5/**/*.nc'`).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// For data files' URLs: which parser reads them (default auto: a DMR++ sidecar if one
        /// exists, else the format the first bytes show).
        #[arg(long, value_enum)]
        parser: Option<FileParser>,
        #[command(flatten)]
        options: files::Options,
        /// The document's format (detected when not given).
        #[arg(long, value_enum)]
        format: Option<DocumentFormat>,
        /// How missing chunks are answered: 404 (every Zarr client reads the fill value) or
        /// fill (a fill-value chunk, for caches that mishandle 404).
        #[arg(long, value_enum)]
        missing_chunks: Option<MissingChunks>,
        /// How arrays' codecs are served: portable (arrays whose codecs GDAL, zarrita.js, zarrs
        /// or zarr-python would need a plugin for are served as bytes + gzip, their chunks
        /// transcoded when read) or as-is (the files' own). Default: the store's current setting.
        #[arg(long, value_enum)]
        codecs: Option<Codecs>,
        /// Do not ask each source for its ETag and size at registration.
        #[arg(long)]
        no_verify: bool,
        /// Record each source's ETag and size as they are now, in place of those the manifest
        /// declares (after a source was rewritten in place with its bytes where the references
        /// say: the recovery from `502 source-modified`); every reference is checked again.
        #[arg(long, conflicts_with = "no_verify")]
        record_sources: bool,
        /// Replace the store only while its current version is this one (`12`, or its ETag
        /// `"v12"`, as `stores show` and every write report it); else nothing is changed and the
        /// command fails (HTTP 412).
        #[arg(long, value_name = "VERSION")]
        if_match: Option<String>,
    },
    /// Serve an Icechunk repository (its URL under a registered object store): the head of a
    /// branch (default main), a tag or a snapshot.
    Icechunk {
        /// The store.
        name: String,
        /// The repository's root URL (file://, s3://, gs://, az://, https://).
        repository: String,
        /// A branch (the store moves on sync).
        #[arg(long, conflicts_with_all = ["tag", "snapshot"])]
        branch: Option<String>,
        /// A tag (the store never moves).
        #[arg(long, conflicts_with = "snapshot")]
        tag: Option<String>,
        /// A snapshot id (the store never moves).
        #[arg(long)]
        snapshot: Option<String>,
        /// A branch store re-reads its branch this often (seconds).
        #[arg(long)]
        follow_seconds: Option<u64>,
        /// How missing chunks are answered: 404 or fill.
        #[arg(long, value_enum)]
        missing_chunks: Option<MissingChunks>,
    },
    /// Re-read an Icechunk branch store's branch, or rescan the files a store is made from: a
    /// new version only when the branch moved, or files were added, changed or removed.
    Sync {
        /// The store.
        name: String,
    },
    /// Update a store with a partial native document (new or replaced nodes, chunks, deletions).
    Patch {
        /// The store.
        name: String,
        /// The partial document.
        file: PathBuf,
        /// Do not ask the new sources for their ETag and size.
        #[arg(long)]
        no_verify: bool,
        /// Apply the update only while the store's current version is this one (`12`, or its
        /// ETag `"v12"`): with concurrent writers, read the store (`stores show`), make the
        /// document from that version and send it with `--if-match`; when another write came
        /// first the command fails (HTTP 412) and nothing is changed: read again and retry.
        #[arg(long, value_name = "VERSION")]
        if_match: Option<String>,
    },
    /// Delete a store.
    Delete {
        /// The store.
        name: String,
    },
    /// Ask each source of a store whether it still matches what was recorded (exit 1 when one
    /// is modified, missing or cannot be asked).
    Verify {
        /// The store.
        name: String,
    },
    /// Write a store's current version as a manifest document (registering it again gives the
    /// same store).
    Export {
        /// The store.
        name: String,
        /// The document's format.
        #[arg(long, value_enum, default_value = "native")]
        format: ExportFormat,
        /// Write it to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// `zarrgate object-stores ...`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ObjectStores {
    #[command(flatten)]
    connection: Connection,
    #[command(subcommand)]
    command: ObjectStoresCommand,
}

/// What to do with object stores.
#[derive(Subcommand, Debug)]
pub enum ObjectStoresCommand {
    /// List the object stores (secrets shown as ***).
    List,
    /// Show an object store.
    Show {
        /// The object store.
        name: String,
    },
    /// Register an object store, or replace it: where sources may be read from.
    Put {
        /// The object store.
        name: String,
        /// Its URL prefix: file:///data/, s3://bucket/prefix/, gs://..., az://..., https://...
        url: String,
        /// An object_store option, e.g. --option region=eu-west-1 (repeat for more).
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
    },
    /// Delete an object store (refused while a store uses it).
    Delete {
        /// The object store.
        name: String,
    },
}

/// Formats a manifest is sent in.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DocumentFormat {
    /// `{"nodes": ..., "sources": ...}`.
    Native,
    /// Kerchunk JSON references, version 0 or 1.
    Kerchunk,
    /// A tar of a kerchunk parquet reference directory.
    KerchunkParquet,
}

/// Parsers of data files the server reads itself.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FileParser {
    /// A DMR++ sidecar if one exists, else the format the file's first bytes show.
    Auto,
    /// HDF5 and netCDF4.
    Hdf5,
    /// netCDF classic, 64-bit offset and CDF-5.
    Netcdf3,
    /// The file's DMR++ sidecar (`<file>.dmrpp`).
    Dmrpp,
    /// TIFF, BigTIFF, GeoTIFF and COG.
    Tiff,
    /// FITS image HDUs.
    Fits,
    /// GRIB2 messages (with the file's `.idx` or `.index` sidecar when it has one).
    Grib,
}

/// Formats a store is exported in.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// zarrgate's own document.
    Native,
    /// Kerchunk JSON references, version 1.
    Kerchunk,
}

/// How missing chunks are answered.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MissingChunks {
    /// 404.
    #[value(name = "404")]
    NotFound,
    /// A fill-value chunk.
    Fill,
}

/// How arrays' codecs are served.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Codecs {
    /// Codecs every client decodes without a plugin, chunks transcoded where needed.
    Portable,
    /// The files' own codecs.
    AsIs,
}

fn name_of<T: ValueEnum>(value: T) -> String {
    value.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default()
}

/// Runs `zarrgate stores ...`.
pub async fn stores(command: Stores) -> ExitCode {
    let json = command.connection.json;
    let result = match connect(&command.connection) {
        Ok(api) => run_stores(&api, command.command, json).await,
        Err(e) => Err(e),
    };
    finish(result, json)
}

/// Runs `zarrgate object-stores ...`.
pub async fn object_stores(command: ObjectStores) -> ExitCode {
    let json = command.connection.json;
    let result = match connect(&command.connection) {
        Ok(api) => run_object_stores(&api, command.command, json).await,
        Err(e) => Err(e),
    };
    finish(result, json)
}

fn connect(connection: &Connection) -> Result<Api, Failure> {
    Api::new(&connection.server, std::env::var("ZARRGATE_TOKEN").ok())
}

/// What a command printed, and whether it succeeded.
fn finish(result: Result<bool, Failure>, json: bool) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(failure) => {
            if json && let Failure::Refused { body, .. } = &failure {
                println!("{body}");
            }
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "error: {failure}");
            if let Failure::Refused { problems, .. } = &failure {
                for problem in problems {
                    let _ = writeln!(err, "  - {problem}");
                }
            }
            if let Some(hint) = failure.hint() {
                let _ = writeln!(err, "hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Prints `value` as JSON, or `text` for a person.
fn print(json: bool, value: &Value, text: impl FnOnce() -> String) {
    if json {
        println!("{value}");
    } else {
        print!("{}", text());
    }
}

/// `path?k=v&...`, the values percent-encoded.
fn with_query(path: &str, query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return path.to_owned();
    }
    let mut encoded = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in query {
        encoded.append_pair(key, value);
    }
    format!("{path}?{}", encoded.finish())
}

fn store_path(name: &str) -> String {
    format!("/api/v1/stores/{}", encode(name))
}

/// A name as one path segment (the server refuses names that need encoding, and says why).
fn encode(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

async fn run_stores(api: &Api, command: StoresCommand, json: bool) -> Result<bool, Failure> {
    match command {
        StoresCommand::List => {
            let mut all = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let mut query = vec![("limit", "1000".to_owned())];
                query.extend(after.take().map(|after| ("after", after)));
                let page = api.json(api.request(Method::GET, &with_query("/api/v1/stores", &query))).await?;
                all.extend(page["stores"].as_array().cloned().unwrap_or_default());
                match page["next"].as_str() {
                    Some(next) => after = Some(next.to_owned()),
                    None => break,
                }
            }
            print(json, &json!({ "stores": all }), || show::stores(&all));
        }
        StoresCommand::Show { name } => {
            let s = api.json(api.request(Method::GET, &store_path(&name))).await?;
            print(json, &s, || show::summary(&format!("store {name}"), &s, api.server()));
        }
        StoresCommand::Put {
            name,
            files,
            parser,
            options,
            format,
            missing_chunks,
            codecs,
            no_verify,
            record_sources,
            if_match,
        } => {
            let given: Vec<String> = files.iter().map(|f| f.to_string_lossy().into_owned()).collect();
            if given.iter().any(|g| files::is_url(g)) {
                if let Some(manifest) = given.iter().find(|g| !files::is_url(g)) {
                    return Err(Failure::Usage(format!(
                        "{manifest} is not a data file's URL (s3://..., file:///...): give data files' URLs, or one \
                         manifest file alone, not both"
                    )));
                }
                let parser = parser.map_or_else(|| "auto".to_owned(), name_of);
                let body = files::body(&given, &parser, &options).map_err(Failure::Usage)?;
                let mut query = vec![("format", "files".to_owned())];
                if let Some(missing) = missing_chunks {
                    query.push(("missing_chunks", name_of(missing)));
                }
                if let Some(codecs) = codecs {
                    query.push(("codecs", name_of(codecs)));
                }
                let path = with_query(&store_path(&name), &query);
                let mut request = api
                    .request(Method::PUT, &path)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string());
                if let Some(tag) = if_match.as_deref().map(version_etag).transpose()? {
                    request = request.header(reqwest::header::IF_MATCH, tag);
                }
                let s = files::with_progress(api, &name, api.json(request)).await?;
                let from = match given.as_slice() {
                    [one] => one.clone(),
                    several => format!("{} files", several.len()),
                };
                print(json, &s, || show::summary(&format!("registered {name} from {from}"), &s, api.server()));
                return Ok(true);
            }
            let [file] = files.as_slice() else {
                return Err(Failure::Usage(format!(
                    "{} manifest files given: register one manifest file at a time (several files joined are data \
                     files' URLs)",
                    files.len()
                )));
            };
            let url = file.to_string_lossy();
            if let Some(flag) = options.given() {
                return Err(Failure::Usage(format!(
                    "{flag} applies to data files' URLs (s3://..., file:///...), not to the manifest file {url}"
                )));
            }
            if parser.is_some() {
                return Err(Failure::Usage(format!(
                    "--parser applies to a data file's URL (s3://..., file:///...), not to the manifest file {url}"
                )));
            }
            let mut query = Vec::new();
            if let Some(format) = format {
                query.push(("format", name_of(format)));
            }
            if let Some(missing) = missing_chunks {
                query.push(("missing_chunks", name_of(missing)));
            }
            if let Some(codecs) = codecs {
                query.push(("codecs", name_of(codecs)));
            }
            if no_verify {
                query.push(("verify", "false".to_owned()));
            }
            if record_sources {
                query.push(("record_sources", "true".to_owned()));
            }
            let tar = matches!(format, Some(DocumentFormat::KerchunkParquet))
                || file.extension().is_some_and(|e| e.eq_ignore_ascii_case("tar"));
            let if_match = if_match.as_deref().map(version_etag).transpose()?;
            let (status, s) = send_file(api, Method::PUT, &name, file, &query, tar, if_match.as_deref()).await?;
            let what = if status == StatusCode::CREATED { "new store" } else { "replaced" };
            print(json, &s, || show::summary(&format!("registered {name} ({what})"), &s, api.server()));
        }
        StoresCommand::Icechunk { name, repository, branch, tag, snapshot, follow_seconds, missing_chunks } => {
            let mut body = json!({ "repository": repository });
            for (key, value) in [("branch", branch), ("tag", tag), ("snapshot", snapshot)] {
                if let Some(value) = value {
                    body[key] = json!(value);
                }
            }
            if let Some(seconds) = follow_seconds {
                body["follow_seconds"] = json!(seconds);
            }
            let mut query = vec![("format", "icechunk".to_owned())];
            if let Some(missing) = missing_chunks {
                query.push(("missing_chunks", name_of(missing)));
            }
            let path = with_query(&store_path(&name), &query);
            let request = api
                .request(Method::PUT, &path)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
            let s = api.json(request).await?;
            print(json, &s, || show::summary(&format!("registered {name} from Icechunk"), &s, api.server()));
        }
        StoresCommand::Sync { name } => {
            let path = format!("{}/sync", store_path(&name));
            let v = api.json(api.request(Method::POST, &path)).await?;
            print(json, &v, || files::sync_summary(&name, &v));
        }
        StoresCommand::Patch { name, file, no_verify, if_match } => {
            let query = if no_verify { vec![("verify", "false".to_owned())] } else { Vec::new() };
            let if_match = if_match.as_deref().map(version_etag).transpose()?;
            let (_, s) = send_file(api, Method::PATCH, &name, &file, &query, false, if_match.as_deref()).await?;
            print(json, &s, || show::summary(&format!("patched {name}"), &s, api.server()));
        }
        StoresCommand::Delete { name } => {
            api.send(api.request(Method::DELETE, &store_path(&name))).await?;
            print(json, &json!({ "deleted": name }), || format!("deleted store {name}\n"));
        }
        StoresCommand::Verify { name } => {
            let path = format!("{}/verify", store_path(&name));
            let v = api.json(api.request(Method::POST, &path)).await?;
            print(json, &v, || show::verdict(&v));
            return Ok(!show::verdict_failed(&v));
        }
        StoresCommand::Export { name, format, output } => {
            let path = format!("{}/manifest", store_path(&name));
            let request = api.request(Method::GET, &with_query(&path, &[("format", name_of(format))]));
            let response = api.send(request).await?;
            save(api, response, output.as_deref()).await?;
        }
    }
    Ok(true)
}

/// The store ETag `--if-match` names: `12`, `v12` or `"v12"` are version 12's, `"v12"`.
fn version_etag(given: &str) -> Result<String, Failure> {
    let digits = given.trim().trim_matches('"').trim_start_matches('v');
    match digits.parse::<u64>() {
        Ok(version) if !digits.starts_with('+') => Ok(format!("\"v{version}\"")),
        _ => Err(Failure::Usage(format!(
            "--if-match {given:?} is not a version: give the store's current version, 12 or \"v12\", as `stores show` \
             reports it"
        ))),
    }
}

/// Sends `file` as the body of a store's PUT or PATCH (`If-Match: if_match` when given), with a
/// progress bar: the answer's status and JSON.
async fn send_file(
    api: &Api,
    method: Method,
    name: &str,
    file: &Path,
    query: &[(&str, String)],
    tar: bool,
    if_match: Option<&str>,
) -> Result<(StatusCode, Value), Failure> {
    let (body, upload) = upload::open(file).await?;
    let content_type = if tar { "application/x-tar" } else { "application/json" };
    let mut request = api
        .request(method, &with_query(&store_path(name), query))
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, upload.length);
    if let Some(tag) = if_match {
        request = request.header(header::IF_MATCH, tag);
    }
    let request = request.body(body);
    let answer = api.send(request).await;
    upload.done();
    let response = answer?;
    let status = response.status();
    Ok((status, api.read_json(response).await?))
}

/// Streams an answer's body to `output`, or to stdout.
async fn save(api: &Api, response: reqwest::Response, output: Option<&Path>) -> Result<(), Failure> {
    use tokio::io::AsyncWriteExt;
    let cannot = |e: std::io::Error| {
        Failure::File(format!(
            "cannot write {}: {e}",
            output.map_or_else(|| "stdout".into(), |p| p.display().to_string())
        ))
    };
    let mut sink: Box<dyn tokio::io::AsyncWrite + Unpin> = match output {
        Some(path) => Box::new(tokio::fs::File::create(path).await.map_err(cannot)?),
        None => Box::new(tokio::io::stdout()),
    };
    let mut body = response.bytes_stream();
    while let Some(piece) = body.next().await {
        let piece = piece.map_err(|e| api.unreachable(&e))?;
        sink.write_all(&piece).await.map_err(cannot)?;
    }
    sink.flush().await.map_err(cannot)?;
    Ok(())
}

async fn run_object_stores(api: &Api, command: ObjectStoresCommand, json: bool) -> Result<bool, Failure> {
    let path = |name: &str| format!("/api/v1/object-stores/{}", encode(name));
    match command {
        ObjectStoresCommand::List => {
            let list = api.json(api.request(Method::GET, "/api/v1/object-stores")).await?;
            let entries = list["object_stores"].as_array().cloned().unwrap_or_default();
            print(json, &list, || show::object_stores(&entries));
        }
        ObjectStoresCommand::Show { name } => {
            let o = api.json(api.request(Method::GET, &path(&name))).await?;
            print(json, &o, || show::object_store(&format!("object store {name}"), &o));
        }
        ObjectStoresCommand::Put { name, url, options } => {
            let mut map = serde_json::Map::new();
            for option in options {
                let (key, value) = option.split_once('=').ok_or_else(|| {
                    Failure::Usage(format!("--option {option:?} is not KEY=VALUE (e.g. --option region=eu-west-1)"))
                })?;
                map.insert(key.trim().to_owned(), Value::from(value));
            }
            let body = json!({ "url": url, "options": map });
            let request = api
                .request(Method::PUT, &path(&name))
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
            let response = api.send(request).await?;
            let created = response.status() == StatusCode::CREATED;
            let o = api.read_json(response).await?;
            let what = if created { "new" } else { "replaced" };
            print(json, &o, || show::object_store(&format!("registered object store {name} ({what})"), &o));
        }
        ObjectStoresCommand::Delete { name } => {
            api.send(api.request(Method::DELETE, &path(&name))).await?;
            print(json, &json!({ "deleted": name }), || format!("deleted object store {name}\n"));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_server_is_where_the_server_listens_by_default() {
        let listen = crate::config::Config::default().listen;
        assert_eq!(DEFAULT_SERVER, format!("http://{listen}"));
    }
}
