//! One file read for a registration: its DMR++ sidecar looked for, its first bytes and facts
//! fetched in one request, its structure parsed on a blocking thread by the parser its first
//! bytes (or the request) call for, unless the catalog remembers that very parse
//! (`parsed.rs`), and what that cost counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::combine::{is_coordinate, time};
use super::parsed::ParseKey;
use super::{Choice, FileRecord, RemoteFile, invalid};
use crate::catalog::Catalog;
use crate::config::FilesConfig;
use crate::formats::{self, ByteRanges, Chunk, FormatError, Parsed, Parser};
use crate::metrics::Metrics;
use crate::sources::{SourceError, SourceRegistry};
use crate::versions::error::Result;
use crate::zarr::source::SourceCheck;

/// One file read: its hierarchy and how it was read.
pub(super) struct ReadFile {
    pub parsed: Parsed,
    pub record: FileRecord,
    /// A new parse to remember in the catalog, with the registration's others.
    pub remember: Option<(ParseKey, Vec<u8>)>,
}

/// Reads one file's structure with the parser `choice` calls for, counting what it cost.
pub(super) async fn read_file(
    catalog: &dyn Catalog,
    sources: &Arc<SourceRegistry>,
    metrics: &Metrics,
    config: &FilesConfig,
    url: &str,
    choice: Choice,
) -> Result<ReadFile> {
    if sources.resolve(url).is_none() {
        return Err(invalid(format!(
            "file {url} is not under any registered object store: register one whose URL is a prefix of it"
        )));
    }
    let started = Instant::now();
    let first_read = config.first_read_bytes.max(formats::DETECT_BYTES);
    // Requests made here; the parse counts its own, its first bytes (read here) included.
    let mut requests = 0;
    let mut found = None;
    let mut warnings = Vec::new();
    // A sidecar is looked for with a GET of its first bytes, not a HEAD: where there is one,
    // the answer holds all or most of it, and where there is none it costs the same.
    if choice == Choice::Auto || choice == Choice::Only(Parser::Dmrpp) {
        let candidate = format!("{url}.dmrpp");
        // A sidecar found is counted as its parse's first read; one not found, here.
        requests += 1;
        match sources.open_prefix(&candidate, first_read).await {
            Ok((facts, head)) if facts.size.unwrap_or(0) > 0 => {
                requests -= 1;
                found = Some((candidate, facts, head));
            }
            Ok(_) => warnings.push(format!("its DMR++ sidecar {candidate} is empty: the file itself was read")),
            Err(SourceError::NotFound { .. }) if choice == Choice::Auto => {}
            Err(e) if choice == Choice::Auto => {
                warnings.push(format!("its DMR++ sidecar {candidate} cannot be read ({e}): the file itself was read"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let not_found = |e| match e {
        SourceError::NotFound { .. } => invalid(format!("file {url} does not exist")),
        e => e.into(),
    };
    // The file's facts (kept, and checked by every chunk read) come with its first bytes when
    // the file itself is parsed, and from a HEAD when its sidecar is.
    let mut sidecar = None;
    let (facts, read_url, read_facts, head, parser) = match found {
        Some((sidecar_url, sidecar_facts, head)) => {
            requests += 1;
            let facts = sources.head(url).await.map_err(not_found)?;
            sidecar = Some(sidecar_url.clone());
            (facts, sidecar_url, sidecar_facts, head, Some(Parser::Dmrpp))
        }
        None => {
            let parser = match choice {
                Choice::Only(Parser::Dmrpp) => {
                    return Err(invalid(format!("file {url} has no DMR++ sidecar ({url}.dmrpp)")));
                }
                Choice::Only(p) => Some(p),
                Choice::Auto => None,
            };
            let (facts, head) = sources.open_prefix(url, first_read).await.map_err(not_found)?;
            (facts.clone(), url.to_owned(), facts, head, parser)
        }
    };
    // A GRIB file's sidecar index, looked for once the file is known to be GRIB.
    let mut index = None;
    if sidecar.is_none() && parser.or_else(|| Parser::detect(&head)) == Some(Parser::Grib) {
        for candidate in formats::grib::index_candidates(url) {
            requests += 1;
            match sources.open_prefix(&candidate, first_read).await {
                Ok((facts, text)) if facts.size.is_some_and(|size| size > text.len() as u64) => {
                    warnings.push(format!(
                        "its index {candidate} is longer than files.first_read_bytes: the file was read from its start"
                    ));
                }
                Ok((_, text)) if !text.is_empty() => match String::from_utf8(text.to_vec()) {
                    Ok(text) => {
                        sidecar = Some(candidate);
                        index = Some(text);
                        break;
                    }
                    Err(_) => {
                        warnings.push(format!("its index {candidate} is not text: the file was read from its start"))
                    }
                },
                Ok(_) => {}
                Err(SourceError::NotFound { .. }) => {}
                Err(e) => warnings
                    .push(format!("its index {candidate} cannot be read ({e}): the file was read from its start")),
            }
        }
    }
    // The parse is remembered under the URL read (the sidecar's, when one is) and its content.
    let asked = match choice {
        _ if read_url != url => Parser::Dmrpp.name(),
        Choice::Only(p) => p.name(),
        Choice::Auto => "auto",
    };
    let key = ParseKey::new(&read_url, &read_facts, asked, config.max_inline_bytes);
    if let Some(key) = &key
        && let Some((label, mut parsed)) = key.get(catalog).await
    {
        let bytes = head.len() as u64;
        requests += 1;
        let label = Parser::from_name(&label).map_or("unknown", Parser::name);
        metrics.parse_files_total.with_label_values(&[label, "cached"]).inc();
        metrics.parse_bytes_total.with_label_values(&[label]).inc_by(bytes);
        metrics.parse_requests_total.with_label_values(&[label]).inc_by(requests);
        parsed.warnings.splice(0..0, warnings);
        let record = FileRecord {
            url: url.to_owned(),
            parser: label.to_owned(),
            sidecar,
            facts,
            bytes_read: bytes,
            requests,
            cached: true,
        };
        tracing::info!(file = %url, parser = label, bytes, requests, "file already parsed: its parse reused");
        return Ok(ReadFile { parsed, record, remember: None });
    }
    let check = SourceCheck::from_facts(read_facts.etag.as_deref(), read_facts.size).into_owned();
    let file = Arc::new(
        RemoteFile::new(
            Arc::clone(sources),
            read_url.clone(),
            check,
            read_facts.size.unwrap_or(0),
            config,
            started + Duration::from_secs(config.parse_seconds),
            tokio::runtime::Handle::current(),
        )
        .holding(0, head),
    );
    let limits = formats::Limits {
        max_inline_bytes: config.max_inline_bytes,
        deadline: Some(started + Duration::from_secs(config.parse_seconds)),
        ..formats::Limits::default()
    };
    let (parsed, parser, file) = tokio::task::spawn_blocking(move || {
        let outcome = parse(&file, parser, &limits, first_read, index.as_deref());
        (outcome, file)
    })
    .await
    .map(|(outcome, file)| match outcome {
        Ok((parsed, parser)) => (Ok(parsed), Some(parser), file),
        Err((e, parser)) => (Err(e), parser, file),
    })?;
    let cost = file.cost();
    let label = parser.map_or("unknown", Parser::name);
    metrics.parse_bytes_total.with_label_values(&[label]).inc_by(cost.bytes);
    metrics.parse_requests_total.with_label_values(&[label]).inc_by(cost.requests + requests);
    metrics.parse_duration_seconds.with_label_values(&[label]).observe(started.elapsed().as_secs_f64());
    let mut parsed = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let upstream = file.take_failure();
            let outcome = if upstream.is_some() { "upstream" } else { "invalid" };
            metrics.parse_files_total.with_label_values(&[label, outcome]).inc();
            if let Some(failure) = upstream {
                tracing::warn!(file = %read_url, cause = %failure, "reading a file to parse failed upstream");
                return Err(failure.into());
            }
            let what = if read_url != url { format!("DMR++ sidecar {read_url}") } else { format!("file {read_url}") };
            let as_what = parser.map_or(String::new(), |p| format!(" as {}", p.name()));
            tracing::info!(file = %read_url, parser = label, problem = %e, "a file was refused");
            return Err(invalid(format!("{what} cannot be read{as_what}: {e}")));
        }
    };
    metrics.parse_files_total.with_label_values(&[label, "ok"]).inc();
    if read_url == url {
        hold(&file, &mut parsed);
    }
    let remember = key.and_then(|key| key.entry(label, &parsed));
    parsed.warnings.splice(0..0, warnings);
    let record = FileRecord {
        url: url.to_owned(),
        parser: label.to_owned(),
        sidecar,
        facts,
        bytes_read: cost.bytes,
        requests: cost.requests + requests,
        cached: false,
    };
    tracing::info!(file = %url, parser = label, bytes = cost.bytes, requests = record.requests,
        seconds = started.elapsed().as_secs_f64(), nodes = parsed.nodes.len(), "file parsed");
    Ok(ReadFile { parsed, record, remember })
}

/// Where the parse of a file a rescan found unchanged (the listing shows the content its record
/// was read from) is remembered; `None` when it must be read (its parse came from a DMR++
/// sidecar, whose content a listing of the files does not show, or its facts cannot tell one
/// content from another).
pub(super) fn reuse_key(config: &FilesConfig, record: &FileRecord, choice: Choice) -> Option<ParseKey> {
    // A GRIB file's index only tells where its messages are: its parse is the file's.
    if record.sidecar.is_some() && record.parser != Parser::Grib.name() {
        return None;
    }
    let asked = match choice {
        Choice::Only(p) => p.name(),
        Choice::Auto => "auto",
    };
    ParseKey::new(&record.url, &record.facts, asked, config.max_inline_bytes)
}

/// The file of `record` served from its remembered parse (by `label`), with no request.
pub(super) fn reused(metrics: &Metrics, record: &FileRecord, label: &str, parsed: Parsed) -> ReadFile {
    let label = Parser::from_name(label).map_or("unknown", Parser::name);
    metrics.parse_files_total.with_label_values(&[label, "cached"]).inc();
    let record = FileRecord { parser: label.to_owned(), bytes_read: 0, requests: 0, cached: true, ..record.clone() };
    ReadFile { parsed, record, remember: None }
}

/// Parses `file` (on a blocking thread) with `parser`, or the one its first bytes show.
fn parse(
    file: &Arc<RemoteFile>,
    parser: Option<Parser>,
    limits: &formats::Limits,
    first_read: u64,
    grib_index: Option<&str>,
) -> std::result::Result<(Parsed, Parser), (FormatError, Option<Parser>)> {
    let head = file.first(first_read).map_err(|e| (e, parser))?;
    let parser = match parser {
        Some(p) => p,
        None => Parser::detect(&head).ok_or_else(|| {
            let shown: String = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
            (
                FormatError::Invalid(format!(
                    "it is not a format this server reads (HDF5, netCDF4, netCDF3, TIFF, FITS, GRIB2; its first bytes are {shown})"
                )),
                None,
            )
        })?,
    };
    let parsed = match parser {
        Parser::Grib => formats::grib::parse(&**file, limits, grib_index),
        _ => parser.parse(Arc::clone(file) as Arc<dyn ByteRanges>, limits),
    }
    .map_err(|e| (e, Some(parser)))?;
    Ok((parsed, parser))
}

/// Chunks a file's coordinate may have to be read (here, and by a join).
pub(super) const MAX_CHUNKS: usize = 4096;

/// Encoded bytes of one coordinate's chunks that a parse decodes for a join ([`hold`]).
const HOLD_BYTES: u64 = 64 << 10;

/// Values of one coordinate a parse keeps for a join ([`hold`]): 64 KiB as float64.
const HOLD_VALUES: u64 = 8192;

/// Keeps in `parsed.held` the values of its small 1-d coordinates whose chunks `file` already
/// holds (read with the metadata around them), decoded, so that a join along one of them reads
/// them with no request: 100,000 GOES files joined along time would otherwise cost 100,000 more
/// GETs, or 100,000 pieces of assembled chunks for a client opening the store. Their values,
/// not their bytes, are kept: an uncompressed netCDF4 time chunk is 4 KiB for one value. A
/// coordinate whose chunks are not all held, or cannot be decoded, is left to be read if a
/// join needs it. `file` must be the file the chunks' ranges are in (not a DMR++ sidecar).
pub(super) fn hold(file: &RemoteFile, parsed: &mut Parsed) {
    let Parsed { nodes, held, .. } = parsed;
    for (path, node) in nodes.iter() {
        // Bounded by its values too, not only its encoded bytes: 64 KiB of zlib can declare
        // millions of values, and each parse in flight would hold them.
        let length = node.metadata.get("shape").and_then(|s| s.get(0)).and_then(serde_json::Value::as_u64);
        if !is_coordinate(path, node) || node.chunks.len() > MAX_CHUNKS || length.is_none_or(|n| n > HOLD_VALUES) {
            continue;
        }
        let mut total = 0u64;
        let mut chunks = Vec::with_capacity(node.chunks.len());
        for (index, chunk) in &node.chunks {
            let (Some(j), Chunk::Range { offset, length }) = (index.first(), chunk) else { break };
            total = total.saturating_add(*length);
            match file.already_read(*offset, *length).filter(|_| total <= HOLD_BYTES) {
                Some(bytes) => chunks.push((*j, Some(bytes.to_vec()))),
                None => break,
            }
        }
        if chunks.len() == node.chunks.len()
            && let Ok(values) = time::decode_values(node, &chunks)
        {
            held.push((path.clone(), values));
        }
    }
}
