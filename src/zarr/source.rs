//! What is known about a source object: the facts recorded for it (declared in a manifest,
//! or observed from its object store) and the check a read makes against them, so that bytes of
//! an object rewritten since registration are never served.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Recorded facts about a source object, used to detect that it changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceFacts {
    /// The object's ETag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The object's last modification time, as the store reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    /// The object's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl SourceFacts {
    /// What reads of this object check: its ETag when known, else its size.
    pub fn read_check(&self) -> SourceCheck<'_> {
        SourceCheck::from_facts(self.etag.as_deref(), self.size)
    }
}

impl SourceFacts {
    /// What is wrong with declared facts: the ETag becomes an `If-Match` header and both strings
    /// are stored as text, so they must be printable.
    pub fn check(&self) -> Result<(), String> {
        let printable = |s: &str| s.len() <= 1024 && s.bytes().all(|b| (0x20..0x7f).contains(&b));
        if let Some(etag) = self.etag.as_deref().filter(|e| e.is_empty() || !printable(e)) {
            return Err(format!("etag {etag:?} must be 1 to 1024 printable ASCII characters"));
        }
        if let Some(when) = self.last_modified.as_deref().filter(|w| !printable(w)) {
            return Err(format!("last_modified {when:?} must be at most 1024 printable ASCII characters"));
        }
        Ok(())
    }
}

impl SourceFacts {
    /// Facts as an object store reports them (its size is always known).
    pub fn observed(size: u64, etag: Option<String>, last_modified: Option<String>) -> Self {
        Self { etag, last_modified, size: Some(size) }
    }

    /// True when `now` contradicts these facts: a different ETag or size where both are known.
    pub fn contradicted_by(&self, now: &SourceFacts) -> bool {
        let etag = self.etag.is_some() && now.etag.is_some() && self.etag != now.etag;
        let size = self.size.is_some() && now.size.is_some() && self.size != now.size;
        etag || size
    }

    /// True when nothing that a read could check was recorded.
    pub fn is_unchecked(&self) -> bool {
        self.etag.is_none() && self.size.is_none()
    }

    /// `ETag ..., N bytes`, or `nothing`, for messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = &self.etag {
            parts.push(format!("ETag {e}"));
        }
        if let Some(s) = self.size {
            parts.push(format!("{s} bytes"));
        }
        if parts.is_empty() { "nothing".into() } else { parts.join(", ") }
    }
}

/// What a read checks a source object against, so that it never serves bytes of an object
/// rewritten since registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceCheck<'a> {
    /// Nothing was recorded: the object is read as it is.
    Unchecked,
    /// The ETag recorded at registration.
    ETag(Cow<'a, str>),
    /// The size recorded at registration, for an object store that gives no ETag.
    Size(u64),
    /// The 64-bit digest ([`etag_digest`]) of the ETag recorded at registration: how a cached
    /// block holds an ETag that would take more room (an S3 MD5 takes 16 bytes). A read cannot
    /// send it as `If-Match`; it compares the answer's ETag instead, before any byte is served.
    Digest(u64),
}

/// The digest a [`SourceCheck::Digest`] holds of an ETag: XXH3-64 of its text, quotes included
/// (a fixed algorithm: every replica and release computes the same one).
pub fn etag_digest(etag: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(etag.as_bytes())
}

impl<'a> SourceCheck<'a> {
    /// The check for an object with these recorded facts: its ETag when known, else its size.
    pub fn from_facts(etag: Option<&'a str>, size: Option<u64>) -> Self {
        match (etag, size) {
            (Some(e), _) => Self::ETag(Cow::Borrowed(e)),
            (None, Some(n)) => Self::Size(n),
            (None, None) => Self::Unchecked,
        }
    }

    /// The same check, borrowing its ETag from this one (no copy).
    pub fn as_borrowed(&self) -> SourceCheck<'_> {
        match self {
            Self::Unchecked => SourceCheck::Unchecked,
            Self::ETag(e) => SourceCheck::ETag(Cow::Borrowed(e)),
            Self::Size(n) => SourceCheck::Size(*n),
            Self::Digest(d) => SourceCheck::Digest(*d),
        }
    }

    /// The same check with an ETag that packs into more than 8 bytes held as its digest.
    pub fn digested(self) -> Self {
        match self {
            Self::ETag(e) if e.len() > 8 => Self::Digest(etag_digest(&e)),
            other => other,
        }
    }

    /// Whether an object that answers with `etag` and `size` is not the one recorded. An answer
    /// without an ETag contradicts a recorded one only when `strict`.
    pub fn contradicted_by(&self, etag: Option<&str>, size: u64, strict: bool) -> bool {
        match self {
            Self::ETag(expected) if strict => etag != Some(expected.as_ref()),
            Self::ETag(expected) => etag.is_some_and(|e| e != expected.as_ref()),
            Self::Digest(expected) if strict => etag.map(etag_digest) != Some(*expected),
            Self::Digest(expected) => etag.is_some_and(|e| etag_digest(e) != *expected),
            Self::Size(recorded) => size != *recorded,
            Self::Unchecked => false,
        }
    }

    /// The same check, owning its ETag.
    pub fn into_owned(self) -> SourceCheck<'static> {
        match self {
            Self::Unchecked => SourceCheck::Unchecked,
            Self::ETag(e) => SourceCheck::ETag(Cow::Owned(e.into_owned())),
            Self::Size(n) => SourceCheck::Size(n),
            Self::Digest(d) => SourceCheck::Digest(d),
        }
    }
}

impl std::fmt::Display for SourceCheck<'_> {
    /// What was recorded, for messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ETag(e) => write!(f, "ETag {e}"),
            Self::Digest(d) => write!(f, "an ETag whose XXH3-64 is {d:016x}"),
            Self::Size(n) => write!(f, "size {n} bytes"),
            Self::Unchecked => f.write_str("nothing"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_contradict_only_where_both_are_known() {
        let then = SourceFacts { etag: Some("\"a\"".into()), size: Some(10), last_modified: None };
        assert!(!then.contradicted_by(&SourceFacts::observed(10, Some("\"a\"".into()), None)));
        assert!(then.contradicted_by(&SourceFacts::observed(10, Some("\"b\"".into()), None)));
        assert!(then.contradicted_by(&SourceFacts::observed(11, None, None)));
        assert!(!SourceFacts::default().contradicted_by(&SourceFacts::observed(11, None, None)));
        assert_eq!(then.describe(), "ETag \"a\", 10 bytes");
        assert_eq!(then.read_check().to_string(), "ETag \"a\"");
    }
}
