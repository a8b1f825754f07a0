//! The files a registration names: its list as it is, or the objects under its prefix (listed
//! through the object store the prefix lies under) whose key after the prefix matches its glob,
//! in key order, those modified too recently left out.

use std::sync::Arc;

use chrono::Utc;
use globset::{GlobBuilder, GlobMatcher};

use super::invalid;
use crate::config::FilesConfig;
use crate::sources::{Keep, SourceRegistry};
use crate::versions::error::{Error, Result};

/// `"files": {"prefix": URL, "glob": GLOB}`, checked.
#[derive(Debug, Clone)]
pub struct Prefix {
    /// The normalised URL prefix.
    pub url: String,
    /// The glob as given, and its matcher (None: every object).
    pub glob: Option<(String, GlobMatcher)>,
    /// Objects modified less than this many seconds ago are left out.
    pub older_than_seconds: Option<u64>,
}

impl Prefix {
    /// The prefix form of a registration, or what is wrong with it (a 400).
    pub fn new(url: String, glob: Option<String>, older_than_seconds: Option<u64>) -> Result<Self> {
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
        Ok(Self { url, glob, older_than_seconds })
    }

    /// The URLs of the objects this prefix and glob name now, in key order.
    pub async fn files(&self, sources: &SourceRegistry, config: &FilesConfig) -> Result<Vec<String>> {
        if sources.resolve(&self.url).is_none() {
            return Err(invalid(format!(
                "prefix {} is not under any registered object store: register one whose URL is a prefix of it",
                self.url
            )));
        }
        let most = config.max_files;
        let matcher = self.glob.as_ref().map(|(_, m)| m.clone());
        let keep: Keep = Arc::new(move |key: &str| matcher.as_ref().is_none_or(|m| m.is_match(key)));
        let matching = sources.list(&self.url, keep, most).await?;
        let glob = self.glob.as_ref().map_or("(every object)", |(text, _)| text.as_str());
        if matching.len() > most {
            return Err(invalid(format!(
                "prefix {} with glob {glob} names more than {most} files (files.max_files): narrow the glob",
                self.url
            )));
        }
        let now = Utc::now();
        let old_enough = |modified: chrono::DateTime<Utc>| {
            self.older_than_seconds
                .is_none_or(|s| (now - modified).num_seconds() >= i64::try_from(s).unwrap_or(i64::MAX))
        };
        let files: Vec<String> = matching.into_iter().filter(|o| old_enough(o.modified)).map(|o| o.url).collect();
        if files.is_empty() {
            let skipped = self
                .older_than_seconds
                .map_or(String::new(), |s| format!(" modified at least {s} s ago (older_than_seconds)"));
            return Err(invalid(format!("no object under prefix {} matches glob {glob}{skipped}", self.url)));
        }
        Ok(files)
    }
}
