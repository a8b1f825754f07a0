//! The files a scan finds: a registration's list as it is (each file asked for its facts when
//! they are needed: `older_than_seconds`, a rescan), or the objects under its prefix (listed
//! through the object store the prefix lies under, with their facts) whose key after the prefix
//! matches its glob, in key order; those modified too recently left out and named.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use globset::{GlobBuilder, GlobMatcher};

use super::{Target, invalid, several_need_combine};
use crate::config::FilesConfig;
use crate::sources::{Keep, Listed, SourceError, SourceRegistry};
use crate::versions::error::{Error, Result};
use crate::zarr::source::SourceFacts;

/// `"files": {"prefix": URL, "glob": GLOB}`, checked.
#[derive(Debug, Clone)]
pub struct Prefix {
    /// The normalised URL prefix.
    pub url: String,
    /// The glob as given, and its matcher (None: every object).
    pub glob: Option<(String, GlobMatcher)>,
}

/// What a scan found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// The files, in order, with their facts when the scan asked for them.
    pub files: Vec<(String, Option<SourceFacts>)>,
    /// The files left out because they were modified too recently, each with a warning.
    pub skipped: Vec<(String, String)>,
}

impl Prefix {
    /// The prefix form of a registration, or what is wrong with it (a 400).
    pub fn new(url: String, glob: Option<String>) -> Result<Self> {
        let glob = match glob {
            None => None,
            Some(text) => {
                // `*` stays within one path segment, `**/` crosses any number, as in a shell.
                let matcher = GlobBuilder::new(&text)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| {
                        Error::BadRequest(format!("\"glob\" {text:?} is not a glob: {e}; nothing was changed"))
                    })?
                    .compile_matcher();
                Some((text, matcher))
            }
        };
        Ok(Self { url, glob })
    }

    fn glob_text(&self) -> &str {
        self.glob.as_ref().map_or("(every object)", |(text, _)| text.as_str())
    }

    /// The objects this prefix and glob name now, in key order, at most `files.max_files`; the
    /// listing cut at `split` (see [`SourceRegistry::list`]).
    async fn list(&self, sources: &SourceRegistry, config: &FilesConfig, split: &[String]) -> Result<Vec<Listed>> {
        if sources.resolve(&self.url).is_none() {
            return Err(invalid(format!(
                "prefix {} is not under any registered object store: register one whose URL is a prefix of it",
                self.url
            )));
        }
        let most = config.max_files;
        let matcher = self.glob.as_ref().map(|(_, m)| m.clone());
        let keep: Keep = Arc::new(move |key: &str| matcher.as_ref().is_none_or(|m| m.is_match(key)));
        let matching = sources.list(&self.url, keep, most, split).await?;
        if matching.len() > most {
            return Err(invalid(format!(
                "prefix {} with glob {} names more than {most} files (files.max_files): narrow the glob",
                self.url,
                self.glob_text()
            )));
        }
        Ok(matching)
    }
}

impl Target {
    /// The files this target names now, those modified less than `older_than_seconds` ago left
    /// out; with their facts when `facts` asks (a rescan compares them) or the age check needs
    /// them. At most `files.max_files`; none is a 422. A prefix's listing is cut at `split`, URLs
    /// of objects likely to be there (a rescan's), into ranges listed side by side.
    pub(super) async fn scan(
        &self,
        sources: &Arc<SourceRegistry>,
        config: &FilesConfig,
        facts: bool,
        split: &[String],
    ) -> Result<Scan> {
        let found: Vec<(String, Option<SourceFacts>)> = match &self.prefix {
            Some(prefix) => {
                let listed = prefix.list(sources, config, split).await?;
                listed
                    .into_iter()
                    .map(|o| {
                        let facts = SourceFacts::observed(o.size, o.etag, Some(o.modified.to_rfc3339()));
                        (o.url, Some(facts))
                    })
                    .collect()
            }
            None if facts || self.older_than_seconds.is_some() => heads(sources, config, &self.files).await?,
            None => self.files.iter().map(|url| (url.clone(), None)).collect(),
        };
        if found.len() > config.max_files {
            return Err(invalid(format!(
                "{} files were named, more than files.max_files ({}) allows",
                found.len(),
                config.max_files
            )));
        }
        let scan = young_left_out(found, self.older_than_seconds, Utc::now());
        if scan.files.is_empty() {
            let young = self.older_than_seconds.map_or(String::new(), |s| {
                format!(" modified at least {s} s ago (older_than_seconds); {} were more recent", scan.skipped.len())
            });
            return Err(invalid(match &self.prefix {
                Some(p) => format!("no object under prefix {} matches glob {}{young}", p.url, p.glob_text()),
                None => format!("none of the {} files listed is{young}", self.files.len()),
            }));
        }
        several_need_combine(scan.files.len(), self.combine.is_some())?;
        Ok(scan)
    }
}

/// Each file of a list with its facts (a HEAD each, `files.concurrency` at a time); a file that
/// does not exist is a 422 naming it.
async fn heads(
    sources: &Arc<SourceRegistry>,
    config: &FilesConfig,
    files: &[String],
) -> Result<Vec<(String, Option<SourceFacts>)>> {
    let heads = files.iter().cloned().map(|url| {
        let sources = Arc::clone(sources);
        async move {
            if sources.resolve(&url).is_none() {
                return Err(invalid(format!(
                    "file {url} is not under any registered object store: register one whose URL is a prefix of it"
                )));
            }
            match sources.head(&url).await {
                Ok(facts) => Ok((url, Some(facts))),
                Err(SourceError::NotFound { .. }) => Err(invalid(format!("file {url} does not exist"))),
                Err(e) => Err(e.into()),
            }
        }
    });
    futures::stream::iter(heads).buffered(config.concurrency.max(1)).collect::<Vec<_>>().await.into_iter().collect()
}

/// `found` less the files modified less than `older_than_seconds` before `now` (a file whose
/// modification time is unknown is kept), those named with a warning.
fn young_left_out(
    found: Vec<(String, Option<SourceFacts>)>,
    older_than_seconds: Option<u64>,
    now: DateTime<Utc>,
) -> Scan {
    let Some(seconds) = older_than_seconds else { return Scan { files: found, skipped: Vec::new() } };
    let least = i64::try_from(seconds).unwrap_or(i64::MAX);
    let mut scan = Scan::default();
    for (url, facts) in found {
        let modified =
            facts.as_ref().and_then(|f| f.last_modified.as_deref()).and_then(|t| DateTime::parse_from_rfc3339(t).ok());
        match modified.map(|m| (now - m.with_timezone(&Utc)).num_seconds()) {
            Some(age) if age < least => {
                let warning = format!(
                    "{url} was modified {age} s ago, less than older_than_seconds ({seconds}): left out until a \
                     later scan"
                );
                scan.skipped.push((url, warning));
            }
            _ => scan.files.push((url, facts)),
        }
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(url: &str, modified: &str) -> (String, Option<SourceFacts>) {
        (url.to_owned(), Some(SourceFacts::observed(1, None, Some(modified.to_owned()))))
    }

    #[test]
    fn files_modified_too_recently_are_left_out_and_named() {
        let now = DateTime::parse_from_rfc3339("2024-01-01T00:10:00Z").unwrap().with_timezone(&Utc);
        let found = vec![
            at("s3://b/old.nc", "2024-01-01T00:00:00+00:00"),
            at("s3://b/new.nc", "2024-01-01T00:09:30+00:00"),
            ("s3://b/unknown.nc".to_owned(), None),
        ];
        let scan = young_left_out(found.clone(), Some(60), now);
        let kept: Vec<_> = scan.files.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(kept, ["s3://b/old.nc", "s3://b/unknown.nc"]);
        assert_eq!(scan.skipped.len(), 1);
        assert!(scan.skipped[0].1.contains("s3://b/new.nc was modified 30 s ago"), "{:?}", scan.skipped);
        assert_eq!(young_left_out(found, None, now).files.len(), 3);
    }
}
