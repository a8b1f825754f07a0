//! What a version made from files keeps of where it comes from (its origin): each file read,
//! with its facts and what reading it cost, and the registration that named them, so that a
//! rescan can name them again and tell what changed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Files, PrefixRequest, Request, Target};
use crate::versions::error::Result;
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
    /// The files, in order.
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
}

impl Origin {
    /// As `GET /api/v1/stores/{store}` shows it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
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
