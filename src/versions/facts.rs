//! Source facts: what every source of a document is now (ETag, size, modification time),
//! recorded at registration so that reads can refuse a source rewritten since; the lengths of
//! kerchunk `[url]` references; and the comparison of recorded facts with the sources now.

use std::collections::BTreeMap;

use futures::StreamExt;
use serde::Serialize;

use crate::sources::{SourceError, SourceRegistry};
use crate::zarr::document::Document;
use crate::zarr::source::SourceFacts;

/// Asks every source the document references (under a registered object store) for its facts,
/// checks them against the facts the document declares, and records them. A source that is
/// missing, or that differs from what the document declares, is a problem; with `rerecord`,
/// what the document declares is replaced by what is found (`?record_sources=true`: a source
/// rewritten in place, its references checked again against the size found).
pub async fn record(sources: &SourceRegistry, concurrency: usize, doc: &mut Document, rerecord: bool) {
    let urls: Vec<String> = doc
        .urls
        .all()
        .iter()
        .enumerate()
        .filter(|(i, u)| !doc.immutable.contains(&(*i as u32)) && sources.resolve(u).is_some())
        .map(|(_, u)| u.to_string())
        .collect();
    if urls.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    let observed: Vec<(String, Result<SourceFacts, SourceError>)> = futures::stream::iter(urls)
        .map(|url| async move { (url.clone(), sources.head(&url).await) })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let count = observed.len();
    for (url, result) in observed {
        let declared = doc.facts(&url).cloned().unwrap_or_default();
        match result {
            Ok(now) => {
                // An entity tag with or without its quotes is the same tag (Icechunk keeps what its
                // writer was given).
                let unquoted = |e: &str| e.trim_start_matches("W/").trim_matches('"').to_owned();
                let etag_differs =
                    declared.etag.as_deref().is_some_and(|e| now.etag.as_deref().map(unquoted) != Some(unquoted(e)));
                let size_differs = declared.size.is_some_and(|s| Some(s) != now.size);
                if (etag_differs || size_differs) && !rerecord {
                    doc.problems.push(format!(
                        "{url} changed since the manifest was made: it declares {}, the object store reports {} \
                         (if its bytes are where the references say, register with ?record_sources=true, \
                         `zarrgate stores put --record-sources`, to record it as it is now)",
                        declared.describe(),
                        now.describe()
                    ));
                }
                doc.set_facts(url, now);
            }
            Err(e) => doc.problems.push(format!(
                "{url} cannot be read: {} (register with ?verify=false to skip this check)",
                e.explain()
            )),
        }
    }
    tracing::info!(sources = count, seconds = started.elapsed().as_secs_f64(), "source facts recorded");
}

/// Learns the length of every object a `[url]` reference names whole: the size recorded when
/// the sources were verified (`verified`), else asked of its object store. URLs no object store
/// serves, and sources verification already reported, are left for validation to report.
pub async fn resolve_whole_objects(sources: &SourceRegistry, doc: &mut Document, verified: bool) {
    let wanted: Vec<u32> = doc.whole_objects.iter().copied().collect();
    let mut sizes: BTreeMap<u32, Result<u64, String>> = BTreeMap::new();
    let mut ask = Vec::new();
    for u in wanted {
        let url = doc.urls.get(u).to_owned();
        match doc.facts(&url).and_then(|f| f.size) {
            Some(size) => {
                sizes.insert(u, Ok(size));
            }
            None if verified || sources.resolve(&url).is_none() => {}
            None => ask.push((u, url)),
        }
    }
    let asked: Vec<(u32, Result<u64, String>)> = futures::stream::iter(ask)
        .map(|(u, url)| async move {
            let size = match sources.head(&url).await {
                Ok(facts) => facts.size.ok_or_else(|| format!("the object store gives no length for {url}")),
                Err(e) => Err(format!("cannot learn the length of {url} for its [url] reference: {}", e.explain())),
            };
            (u, size)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    sizes.extend(asked);
    for size in sizes.values() {
        if let Err(problem) = size {
            doc.problems.push(problem.clone());
        }
    }
    doc.object_sizes.extend(sizes.into_iter().filter_map(|(u, size)| size.ok().map(|s| (u, s))));
}

/// How a recorded source compares with the object now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceStatus {
    /// It matches what was recorded.
    Ok,
    /// Its ETag or size differs from what was recorded.
    Modified,
    /// It is gone.
    Missing,
    /// It could not be asked.
    Error,
    /// Nothing was recorded to compare with.
    Unverified,
}

/// One recorded source, checked.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedSource {
    /// Its URL.
    pub url: String,
    /// The verdict.
    pub status: SourceStatus,
    /// What was recorded at registration.
    pub recorded: SourceFacts,
    /// What its object store says now, when it answered.
    pub current: Option<SourceFacts>,
    /// Why it could not be asked.
    pub detail: Option<String>,
}

/// Compares each `recorded` source with what its object store says now, in order.
pub async fn compare(
    sources: &SourceRegistry,
    concurrency: usize,
    recorded: Vec<(String, SourceFacts)>,
) -> Vec<CheckedSource> {
    futures::stream::iter(recorded)
        .map(|(url, then)| async move {
            let (status, current, detail) = match sources.head(&url).await {
                Ok(now) => {
                    let changed = then.etag.as_ref().is_some_and(|e| now.etag.as_ref() != Some(e))
                        || then.size.is_some_and(|s| Some(s) != now.size);
                    let status = if changed {
                        SourceStatus::Modified
                    } else if then.is_unchecked() {
                        SourceStatus::Unverified
                    } else {
                        SourceStatus::Ok
                    };
                    (status, Some(now), None)
                }
                Err(SourceError::NotFound { .. }) => (SourceStatus::Missing, None, None),
                Err(e) => (SourceStatus::Error, None, Some(e.explain())),
            };
            CheckedSource { url, status, recorded: then, current, detail }
        })
        .buffered(concurrency.max(1))
        .collect()
        .await
}
