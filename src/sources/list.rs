//! Listing the objects under a URL prefix, through the object store the prefix lies under:
//! object_store's `list` for remote stores, a walk of the directory for `file://` stores that
//! never leaves the store's root (a link pointing out of it, or to a directory, is not followed).

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use url::Url;

use super::SourceError;
use super::error::classify;
use super::registry::{Base, ObjectStoreEntry, SourceRegistry};
use crate::zarr::source::SourceCheck;

/// One object found under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its URL (percent-encoded as a URL).
    pub url: String,
    /// Its key after the prefix (`2024/01.nc` under `s3://b/era5/`), as the object store names it.
    pub key: String,
    /// When it was last modified.
    pub modified: DateTime<Utc>,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag, when the object store gives one (as a read of it would: a `file://` store's
    /// is object_store's, of inode, modification time and size).
    pub etag: Option<String>,
}

impl SourceRegistry {
    /// The objects whose URL starts with `prefix` (a normalised URL under a registered object
    /// store) and whose key after it `keep` keeps, in key order; at most `most + 1` of them, so
    /// that a caller can tell there are more than `most`.
    ///
    /// `split` names URLs of objects likely to be there (a rescan's files of the version it
    /// compares with): a cloud store's listing is cut at them into ranges listed side by side,
    /// a page each where they are 1,000 apart, rather than one page after another.
    pub async fn list(
        &self,
        prefix: &str,
        keep: Keep,
        most: usize,
        split: &[String],
    ) -> Result<Vec<Listed>, SourceError> {
        let entry = self.resolve(prefix).ok_or_else(|| SourceError::Unregistered { url: prefix.to_owned() })?;
        let failed =
            |detail: String| SourceError::Upstream { url: prefix.to_owned(), store: entry.name.clone(), detail };
        // The prefix as a key of the object store's client, and the directory it lies in.
        let within = match &entry.base {
            Base::Bucket => bucket_key(&Url::parse(prefix).map_err(|e| failed(e.to_string()))?),
            Base::Local(_) | Base::Http => decoded(prefix.strip_prefix(&entry.prefix).unwrap_or_default()),
        };
        let dir = within.rfind('/').map_or("", |i| &within[..i]).to_owned();
        let mut found = match (&entry.base, &entry.client) {
            (Base::Local(files), _) => {
                let (root, walked, within, keep) = (files.root().to_owned(), dir.clone(), within.clone(), keep.clone());
                let keep = move |key: &str| key.strip_prefix(within.as_str()).is_some_and(|k| keep(k));
                tokio::task::spawn_blocking(move || walk(&root, &walked, &keep, most))
                    .await
                    .map_err(|e| failed(e.to_string()))?
                    .map_err(|e| failed(e.to_string()))?
            }
            (base, Some(client)) => {
                let timeout = entry.first_byte_timeout.unwrap_or(self.settings.timeout);
                let path = object_store::path::Path::from(dir.as_str());
                // Cloud stores list from a key on (S3 and GCS `start-after`, Azure `startFrom`):
                // the ranges between the keys known to be there are listed side by side.
                let splits = match base {
                    Base::Bucket => keys_of(split, &within),
                    Base::Local(_) | Base::Http => Vec::new(),
                };
                let ranges = ranges_between(splits);
                let range = |(after, through): (Option<String>, Option<String>)| {
                    let (client, path, within, keep) = (Arc::clone(client), path.clone(), within.clone(), keep.clone());
                    let (name, url) = (entry.name.clone(), prefix.to_owned());
                    async move {
                        let mut pages = match &after {
                            Some(key) => {
                                client.list_with_offset(Some(&path), &object_store::path::Path::from(key.as_str()))
                            }
                            None => client.list(Some(&path)),
                        };
                        let mut found = Vec::new();
                        while found.len() <= most {
                            let next = tokio::time::timeout(timeout, pages.next()).await.map_err(|_| {
                                SourceError::Timeout {
                                    url: url.clone(),
                                    store: name.clone(),
                                    seconds: timeout.as_secs(),
                                }
                            })?;
                            let Some(meta) = next else { break };
                            let meta = meta.map_err(|e| {
                                classify(&name, &url, &(0..0), &SourceCheck::Unchecked, timeout.as_secs(), e)
                            })?;
                            let key = meta.location.as_ref();
                            if after.as_deref().is_some_and(|after| key <= after) {
                                continue;
                            }
                            if through.as_deref().is_some_and(|through| key > through) {
                                break;
                            }
                            // The range's last key ends it: polling on would ask for a page more.
                            let last = through.as_deref() == Some(key);
                            if key.strip_prefix(within.as_str()).is_some_and(|k| keep(k)) {
                                found.push((
                                    meta.location.to_string(),
                                    Meta { modified: meta.last_modified, size: meta.size, etag: meta.e_tag },
                                ));
                            }
                            if last {
                                break;
                            }
                        }
                        Ok::<_, SourceError>(found)
                    }
                };
                let mut parts = futures::stream::iter(ranges).map(range).buffered(LIST_RANGES_AT_ONCE);
                let mut found = Vec::new();
                while let Some(part) = parts.next().await {
                    found.extend(part?);
                    if found.len() > most {
                        break;
                    }
                }
                found
            }
            (_, None) => return Err(failed("object store has no client".into())),
        };
        found.retain(|(key, _)| key.starts_with(within.as_str()));
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.truncate(most.saturating_add(1));
        found
            .into_iter()
            .map(|(key, Meta { modified, size, etag })| {
                let url = url_of(&entry, &key).ok_or_else(|| failed(format!("{key} makes no URL")))?;
                Ok(Listed { url, key: key[within.len()..].to_owned(), modified, size, etag })
            })
            .collect()
    }
}

/// How many key ranges of a listing are asked for at once.
const LIST_RANGES_AT_ONCE: usize = 16;

/// The keys of the objects `urls` name (under a bucket) that lie under `within`, in key order,
/// once each.
fn keys_of(urls: &[String], within: &str) -> Vec<String> {
    let mut keys: Vec<String> = urls
        .iter()
        .filter_map(|url| Url::parse(url).ok())
        .map(|url| bucket_key(&url))
        .filter(|key| key.starts_with(within))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The key of the object `url` names in its bucket: its path, percent-decoded.
fn bucket_key(url: &Url) -> String {
    decoded(url.path().trim_start_matches('/'))
}

/// `text` percent-decoded.
fn decoded(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// The key ranges that `splits` (in order) cut a listing into: each the keys after its first
/// bound (from the start: `None`) through its second (to the end: `None`).
fn ranges_between(splits: Vec<String>) -> Vec<(Option<String>, Option<String>)> {
    let mut ranges = Vec::with_capacity(splits.len() + 1);
    let mut after = None;
    for key in splits {
        ranges.push((after, Some(key.clone())));
        after = Some(key);
    }
    ranges.push((after, None));
    ranges
}

/// The URL of the object the store's client names `key`.
fn url_of(entry: &ObjectStoreEntry, key: &str) -> Option<String> {
    let mut url = Url::parse(&entry.prefix).ok()?;
    {
        let mut segments = url.path_segments_mut().ok()?;
        match entry.base {
            Base::Bucket => segments.clear(),
            Base::Local(_) | Base::Http => segments.pop_if_empty(),
        };
        segments.extend(key.split('/'));
    }
    Some(url.to_string())
}

/// What a listing tells of one object.
#[derive(Debug)]
struct Meta {
    modified: DateTime<Utc>,
    size: u64,
    etag: Option<String>,
}

/// Which keys (after the prefix) a listing keeps.
pub type Keep = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The regular files under `root/dir` (blocking) that `keep` keeps, as keys relative to `root`
/// with their modification times, sizes and ETags; at most `most + 1`. Links are followed only to a file inside
/// `root`.
fn walk(root: &Path, dir: &str, keep: &dyn Fn(&str) -> bool, most: usize) -> std::io::Result<Vec<(String, Meta)>> {
    let mut found = Vec::new();
    let start = root.join(dir);
    match std::fs::canonicalize(&start) {
        Ok(start) if start.starts_with(root) && start.is_dir() => {}
        _ => return Ok(found),
    }
    let mut pending = vec![(start, dir.to_owned())];
    while let Some((path, key)) = pending.pop() {
        for item in std::fs::read_dir(&path)? {
            let item = item?;
            let Some(name) = item.file_name().to_str().map(str::to_owned) else { continue };
            let child = if key.is_empty() { name } else { format!("{key}/{name}") };
            let kind = item.file_type()?;
            let meta = if kind.is_symlink() {
                match std::fs::canonicalize(item.path()) {
                    Ok(target) if target.starts_with(root) && target.is_file() && keep(&child) => {
                        std::fs::metadata(&target)?
                    }
                    _ => continue,
                }
            } else if kind.is_dir() {
                pending.push((item.path(), child));
                continue;
            } else if kind.is_file() && keep(&child) {
                item.metadata()?
            } else {
                continue;
            };
            let modified = meta.modified()?;
            let etag = Some(super::local::etag(&meta, modified));
            found.push((child, Meta { modified: DateTime::<Utc>::from(modified), size: meta.len(), etag }));
            if found.len() > most {
                return Ok(found);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Map;

    use super::*;
    use crate::sources::{Origin, ReadAheadSettings, SourceSettings};

    fn registry(dir: &Path) -> SourceRegistry {
        let settings = SourceSettings {
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            retries: 1,
            max_concurrent: 4,
            buffer_bytes: 1 << 20,
            api_ambient_credentials: false,
            readahead: ReadAheadSettings::default(),
        };
        let url = Url::from_directory_path(dir).unwrap();
        let entry = ObjectStoreEntry::build("local", url.as_str(), &Map::new(), Origin::Api, &settings).unwrap();
        let registry = SourceRegistry::new(settings);
        registry.replace(vec![Arc::new(entry)]);
        registry
    }

    #[tokio::test]
    async fn a_local_store_is_walked_in_key_order_without_leaving_its_root() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.nc"), b"x").unwrap();
        let root = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(dir.join("era/2024")).unwrap();
        for key in ["era/b.nc", "era/2024/a b.nc", "era/a.nc", "era/notes.txt", "other.nc"] {
            std::fs::write(dir.join(key), b"x").unwrap();
        }
        std::os::unix::fs::symlink(outside.path().join("secret.nc"), dir.join("era/out.nc")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.join("era/away")).unwrap();
        std::os::unix::fs::symlink(dir.join("era/a.nc"), dir.join("era/in.nc")).unwrap();
        let registry = registry(&dir);
        let prefix = format!("{}era/", Url::from_directory_path(&dir).unwrap());
        let nc: Keep = Arc::new(|key: &str| key.ends_with(".nc"));
        let found = registry.list(&prefix, nc.clone(), 100, &[]).await.unwrap();
        let keys: Vec<&str> = found.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["2024/a b.nc", "a.nc", "b.nc", "in.nc"]);
        assert_eq!(found[0].url, format!("{prefix}2024/a%20b.nc"));
        let partial = registry.list(&format!("{prefix}b"), nc.clone(), 100, &[]).await.unwrap();
        assert_eq!(partial.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), [".nc"]);
        assert_eq!(registry.list(&prefix, nc, 2, &[]).await.unwrap().len(), 3, "one past the bound, then no more");
    }
}
