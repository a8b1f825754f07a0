//! What a version made from files keeps of where it comes from (its origin): each file read,
//! with its facts and what reading it cost, and the registration that named them, so that a
//! rescan can name them again and tell what changed.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Files, PrefixRequest, Request, Target};
use crate::catalog::Catalog;
use crate::versions::error::{Error, Result};
use crate::zarr::source::SourceFacts;

/// One file of a version, as kept with it and shown by `GET /api/v1/stores/{store}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The file's URL.
    pub url: String,
    /// The parser that read it.
    pub parser: String,
    /// The DMR++ sidecar read in its place, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<String>,
    /// The file's facts when it was read.
    #[serde(flatten)]
    pub facts: SourceFacts,
    /// Bytes read to parse it.
    pub bytes_read: u64,
    /// Ranged reads made to parse it (the sidecar's and the file's HEAD included).
    pub requests: u64,
    /// True when its parse was not made again but found in the catalog (the same URL and
    /// content parsed before, by any registration or replica): only its first bytes were read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
}

/// Where a version made from files comes from, kept with the version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The files, in order (those of one page, when read a page at a time). Kept as rows of
    /// their own (`file_rows`), they are not in the text kept.
    #[serde(default)]
    pub files: Vec<FileRecord>,
    /// The parser asked for (`auto` or a parser's name).
    pub parser: String,
    /// How the files were combined, as the registration said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combine: Option<Value>,
    /// The prefix and glob the files were found under (none: they were listed by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<PrefixRequest>,
    /// The files listed by name, when some of them were left out (`older_than_seconds`): a
    /// rescan looks at them all again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed: Option<Vec<String>>,
    /// The prefix is rescanned every this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_seconds: Option<u64>,
    /// Files modified less than this many seconds ago are left out of every scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_seconds: Option<u64>,
    /// How many files there are, kept as rows of their own ([`Catalog::version_files`]), not in
    /// `files`; absent from origins kept before there were such rows, whose `files` hold them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_rows: Option<u64>,
}

/// What tells the origin of a version made from files from an Icechunk store's.
#[derive(Deserialize)]
struct FilesKind {
    #[serde(rename = "parser")]
    _parser: serde::de::IgnoredAny,
}

/// An origin as kept, its files still their JSON text (a 100,000-file origin read whole took
/// 260 MB to answer one summary).
#[derive(Deserialize)]
struct RawOrigin<'a> {
    #[serde(borrow, default)]
    files: Vec<&'a RawValue>,
    parser: String,
    #[serde(default)]
    combine: Option<Value>,
    #[serde(default)]
    prefix: Option<PrefixRequest>,
    #[serde(default)]
    listed: Option<Vec<String>>,
    #[serde(default)]
    follow_seconds: Option<u64>,
    #[serde(default)]
    older_than_seconds: Option<u64>,
    #[serde(default)]
    file_rows: Option<u64>,
}

/// Files `offset..offset + limit` of an origin, with how many it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPage {
    /// The origin, its `files` only those of the page.
    pub origin: Origin,
    /// The index of the page's first file.
    pub offset: usize,
    /// How many files the origin has.
    pub total: usize,
}

impl OriginPage {
    /// As `GET /api/v1/stores/{store}` shows it: the origin, with `files_total` and
    /// `files_offset` beside the page of `files` when the page is not all of them.
    pub fn to_json(&self) -> Value {
        let mut json = self.origin.to_json();
        if let Some(object) = json.as_object_mut()
            && (self.offset > 0 || self.origin.files.len() < self.total)
        {
            object.insert("files_total".into(), self.total.into());
            object.insert("files_offset".into(), self.offset.into());
        }
        json
    }
}

impl Origin {
    /// As `GET /api/v1/stores/{store}` shows it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// True when `text`, an origin kept, is that of a version made from files (its files not
    /// read).
    pub fn is_files(text: &str) -> bool {
        serde_json::from_str::<FilesKind>(text).is_ok()
    }

    /// Files `offset..offset + limit` of version `version`'s origin kept as `text`, the others
    /// not read (from the catalog's rows of them, or from `text` if it was kept with them);
    /// `None` when `text` is not an origin of files.
    pub async fn page(
        catalog: &dyn Catalog,
        version: i64,
        text: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Option<OriginPage>> {
        let Some(mut page) = Self::page_in_text(text, offset, limit) else { return Ok(None) };
        let Some(rows) = page.origin.file_rows.take() else { return Ok(Some(page)) };
        page.total = usize::try_from(rows).unwrap_or(usize::MAX);
        if limit > 0 && offset < page.total {
            let records = catalog.version_files(version, offset as u64, limit as u64).await?;
            let read = records.iter().map(|r| serde_json::from_str::<FileRecord>(r)).collect::<Result<Vec<_>, _>>();
            page.origin.files = read.map_err(|e| {
                Error::Internal(format!("the catalog holds an unreadable file record of version {version}: {e}"))
            })?;
        }
        Ok(Some(page))
    }

    /// Files `offset..offset + limit` of the origin kept as `text`, those the text holds (all of
    /// them, or none when they are kept as rows: `file_rows` says how many), the others skipped
    /// unread; `None` when `text` is not an origin of files.
    fn page_in_text(text: &str, offset: usize, limit: usize) -> Option<OriginPage> {
        let raw: RawOrigin<'_> = serde_json::from_str(text).ok()?;
        let total = raw.files.len();
        let files = raw
            .files
            .iter()
            .skip(offset)
            .take(limit)
            .map(|f| serde_json::from_str::<FileRecord>(f.get()))
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        let origin = Origin {
            files,
            parser: raw.parser,
            combine: raw.combine,
            prefix: raw.prefix,
            listed: raw.listed,
            follow_seconds: raw.follow_seconds,
            older_than_seconds: raw.older_than_seconds,
            file_rows: raw.file_rows,
        };
        Some(OriginPage { origin, offset, total })
    }

    /// The registration that made this version, to scan again.
    pub fn target(&self) -> Result<Target> {
        let files = match (&self.prefix, &self.listed) {
            (Some(prefix), _) => Files::Prefix(prefix.clone()),
            (None, Some(listed)) => Files::List(listed.clone()),
            (None, None) => Files::List(self.files.iter().map(|f| f.url.clone()).collect()),
        };
        Request {
            files,
            parser: Some(self.parser.clone()),
            combine: self.combine.clone(),
            follow_seconds: self.follow_seconds,
            older_than_seconds: self.older_than_seconds,
            // A rescan serves codecs as the current version does.
            codecs: None,
        }
        .target()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize) -> FileRecord {
        FileRecord {
            url: format!("s3://b/f{i}.nc"),
            parser: "hdf5".into(),
            sidecar: None,
            facts: SourceFacts::observed(100, Some(format!("\"e{i}\"")), None),
            bytes_read: 10,
            requests: 1,
            cached: false,
        }
    }

    #[test]
    fn a_page_of_files_is_read_without_the_others() {
        let origin = Origin {
            files: (0..250).map(record).collect(),
            parser: "auto".into(),
            combine: Some(serde_json::json!({"join": "existing", "dim": "time"})),
            prefix: None,
            listed: None,
            follow_seconds: Some(600),
            older_than_seconds: None,
            file_rows: None,
        };
        let text = serde_json::to_string(&origin).unwrap();
        let page = Origin::page_in_text(&text, 100, 100).unwrap();
        assert_eq!((page.total, page.offset), (250, 100));
        assert_eq!(page.origin.files, origin.files[100..200]);
        assert_eq!((page.origin.follow_seconds, &page.origin.combine), (Some(600), &origin.combine));
        let json = page.to_json();
        assert_eq!((json["files_total"].as_u64(), json["files_offset"].as_u64()), (Some(250), Some(100)));
        // A page past the end is empty; all of them in one page reads as the origin itself.
        assert!(Origin::page_in_text(&text, 300, 100).unwrap().origin.files.is_empty());
        let whole = Origin::page_in_text(&text, 0, 1000).unwrap();
        assert_eq!(whole.origin, origin);
        assert_eq!(whole.to_json(), origin.to_json(), "no paging fields when every file is shown");
        assert!(Origin::page_in_text("{\"repository\": \"s3://b/repo\"}", 0, 10).is_none());
    }
}
