//! Rescanning a store made from files (`follow_seconds`, `POST /api/v1/stores/{store}/sync`):
//! its prefix listed again (or its list's files asked for their facts), compared with the files
//! of its current version; nothing added, changed or removed writes nothing, else the files
//! found are registered as a new version (unchanged files' parses come from the catalog, with
//! no request to their object store). One
//! task of one replica rescans a store at a time (`Catalog::try_lock`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{FileRecord, Folder, Origin};
use crate::catalog::{Catalog, Expected, LockGuard};
use crate::versions::error::{Error, Result};
use crate::versions::register::{Registered, Registrar, Registration};
use crate::zarr::source::SourceFacts;

/// How often a rescan that waits for another to end asks for the lock again.
const LOCK_POLL: Duration = Duration::from_millis(100);

/// The files added, changed and removed between two scans, by URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Files found now that were not before, in the order found.
    pub added: Vec<String>,
    /// Files found before and now whose content is not the same (another ETag, or another
    /// size or modification time where there is no ETag).
    pub changed: Vec<String>,
    /// Files found before and not now.
    pub removed: Vec<String>,
}

impl Changes {
    /// True when no file was added, changed or removed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// What a rescan did.
#[derive(Debug, Clone)]
pub struct Rescanned {
    /// The new version written, when files were added, changed or removed.
    pub registered: Option<Registered>,
    /// The current version's id.
    pub version: i64,
    /// True when a new version was written.
    pub moved: bool,
    /// What changed since the version rescanned.
    pub changes: Changes,
    /// The files left out because they were modified too recently (`older_than_seconds`).
    pub skipped: Vec<String>,
}

/// The files a rescan compares the version's records with (the listing, or the files read), by
/// index.
pub(super) trait Now {
    /// How many indices there are.
    fn len(&self) -> usize;
    /// The index of file `url`, if it is one of them.
    fn find(&self, url: &str) -> Option<usize>;
    /// Whether index `i` is a file (the folder's URL numbers include chunks' other URLs).
    fn is_file(&self, i: usize) -> bool;
    /// The facts of file `i`, when known.
    fn facts(&self, i: usize) -> Option<&SourceFacts>;
    /// The URL of file `i`.
    fn url(&self, i: usize) -> String;
}

/// A listing as a [`Now`].
struct Listing<'a> {
    files: &'a [(String, Option<SourceFacts>)],
    index: HashMap<&'a str, usize>,
}

impl<'a> Listing<'a> {
    fn new(files: &'a [(String, Option<SourceFacts>)]) -> Self {
        Self { files, index: files.iter().enumerate().map(|(i, (url, _))| (url.as_str(), i)).collect() }
    }
}

impl Now for Listing<'_> {
    fn len(&self) -> usize {
        self.files.len()
    }
    fn find(&self, url: &str) -> Option<usize> {
        self.index.get(url).copied()
    }
    fn is_file(&self, _: usize) -> bool {
        true
    }
    fn facts(&self, i: usize) -> Option<&SourceFacts> {
        self.files[i].1.as_ref()
    }
    fn url(&self, i: usize) -> String {
        self.files[i].0.clone()
    }
}

/// The files of a [`Now`] added, changed or removed since the records given to
/// [`Comparison::before`] one at a time (none held). A file whose facts are not known now counts
/// as changed (it is read again, and what its read finds settles it).
struct Comparison<'a, N: Now> {
    now: &'a N,
    found: Vec<bool>,
    changed: Vec<usize>,
    removed: Vec<String>,
}

impl<'a, N: Now> Comparison<'a, N> {
    fn new(now: &'a N) -> Self {
        Self { now, found: vec![false; now.len()], changed: Vec::new(), removed: Vec::new() }
    }

    /// One file of the version: its URL and its facts then; the index in `now` of the file when
    /// it is there unchanged.
    fn before(&mut self, url: &str, facts: &SourceFacts) -> Option<usize> {
        let Some(i) = self.now.find(url) else {
            self.removed.push(url.to_owned());
            return None;
        };
        self.found[i] = true;
        if self.now.facts(i).is_some_and(|now| same_content(facts, now)) {
            return Some(i);
        }
        self.changed.push(i);
        None
    }

    /// What changed: added and changed in the order of `now`, removed in the version's.
    fn finish(mut self) -> Changes {
        self.changed.sort_unstable();
        let now = self.now;
        let added = (0..now.len()).filter(|i| now.is_file(*i) && !self.found[*i]).map(|i| now.url(i)).collect();
        Changes { added, changed: self.changed.into_iter().map(|i| now.url(i)).collect(), removed: self.removed }
    }
}

/// Records of a version read at once when a rescan compares them with its files.
const RECORD_PAGE: usize = 1000;

/// Every record of `version` (its origin kept as `text`), in order, handed to `each`, read a page
/// at a time: a rescan of 100,000 files read them all at once, with the rows they came from
/// (77 MiB).
async fn each_record(
    catalog: &dyn Catalog,
    version: i64,
    text: &str,
    mut each: impl FnMut(FileRecord) + Send,
) -> Result<()> {
    let mut offset = 0;
    while let Some(page) = Origin::page(catalog, version, text, offset, RECORD_PAGE).await? {
        let count = page.origin.files.len();
        page.origin.files.into_iter().for_each(&mut each);
        offset += count;
        if count == 0 || offset >= page.total {
            break;
        }
    }
    Ok(())
}

/// How many of a version's files a range of a rescan's listing spans, at least: a page of a
/// cloud store's listing.
const LISTED_PER_RANGE: usize = 1000;

/// How many ranges a rescan's listing is cut into, at most.
const MOST_RANGES: usize = 64;

/// The URLs of files of `version` (of `total`) spread through them, where a rescan's listing is
/// cut into ranges listed side by side: a page of a cloud store's listing each (up to
/// [`MOST_RANGES`]), so that listing 10,000 files takes about one page's time, not ten.
async fn splits(catalog: &dyn Catalog, version: i64, text: &str, total: usize) -> Result<Vec<String>> {
    let ranges = total.div_ceil(LISTED_PER_RANGE).clamp(1, MOST_RANGES);
    let mut urls = Vec::with_capacity(ranges - 1);
    for k in 1..ranges {
        let at = k * total / ranges - 1;
        if let Some(page) = Origin::page(catalog, version, text, at, 1).await? {
            urls.extend(page.origin.files.into_iter().map(|record| record.url));
        }
    }
    Ok(urls)
}

/// The files of `now` added, changed or removed since those of `version`, the version's
/// records read a page at a time.
pub(super) async fn changes_since(
    catalog: &dyn Catalog,
    version: i64,
    text: &str,
    now: &(impl Now + Sync),
) -> Result<Changes> {
    let mut comparison = Comparison::new(now);
    each_record(catalog, version, text, |record| {
        comparison.before(&record.url, &record.facts);
    })
    .await?;
    Ok(comparison.finish())
}

/// What one pass over a version's records against a listing finds.
struct Compared {
    /// The files added, changed and removed, as the listing shows them.
    changes: Changes,
    /// The records of the files the listing shows unchanged, one slot a listed file, their
    /// URLs left out (the listing has them).
    same: Vec<Option<FileRecord>>,
    /// The facts then of the files the listing shows changed (few), to settle them once read.
    before: HashMap<String, SourceFacts>,
}

/// The files of the listing `now` added, changed or removed since `version`, and the records
/// of those unchanged, from one pass over the version's records a page at a time.
async fn compare(
    catalog: &dyn Catalog,
    version: i64,
    text: &str,
    now: &[(String, Option<SourceFacts>)],
) -> Result<Compared> {
    let listing = Listing::new(now);
    let mut comparison = Comparison::new(&listing);
    let mut same: Vec<Option<FileRecord>> = (0..now.len()).map(|_| None).collect();
    let mut before = HashMap::new();
    each_record(catalog, version, text, |record| {
        let changed = comparison.changed.len();
        match comparison.before(&record.url, &record.facts) {
            Some(i) => same[i] = Some(FileRecord { url: String::new(), ..record }),
            None if comparison.changed.len() > changed => {
                before.insert(record.url, record.facts);
            }
            None => {}
        }
    })
    .await?;
    Ok(Compared { changes: comparison.finish(), same, before })
}

/// What changed once the files are read: a file the listing showed changed (or with facts
/// unknown) whose facts as read, which the version keeps, are those it had is unchanged after
/// all, and one it showed unchanged but that was read again (its parse not remembered) and
/// found changed (`unlike`) is changed; added and removed files are as listed (every listed
/// file is read).
fn settle(
    mut changes: Changes,
    before: &HashMap<String, SourceFacts>,
    unlike: Vec<String>,
    read: &impl Now,
) -> Changes {
    changes.changed.retain(|url| {
        let now = read.find(url).and_then(|i| read.facts(i));
        !before.get(url).zip(now).is_some_and(|(then, now)| same_content(then, now))
    });
    if !unlike.is_empty() {
        changes.changed.extend(unlike);
        // In the order read, as the others.
        changes.changed.sort_by_key(|url| read.find(url));
    }
    changes
}

/// True when two facts of one file show the same content: the same ETag where both have one,
/// else the same size and modification time (to the second: listings and reads do not give it
/// to the same precision); never when neither can tell.
pub(super) fn same_content(a: &SourceFacts, b: &SourceFacts) -> bool {
    if let (Some(x), Some(y)) = (&a.etag, &b.etag) {
        return x == y;
    }
    let second = |f: &SourceFacts| {
        f.last_modified.as_deref().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()).map(|t| t.timestamp())
    };
    match (a.size, b.size, second(a), second(b)) {
        (Some(x), Some(y), Some(s), Some(t)) => x == y && s == t,
        _ => false,
    }
}

impl Registrar {
    /// Rescans store `name` if it is made from files (`None` if it is not, or does not exist),
    /// waiting at most `wait` for a rescan of it under way elsewhere to end (then a 409).
    pub async fn rescan_files(&self, name: &str, wait: Duration) -> Result<Option<Rescanned>> {
        if self.files_origin(name, 0, 0).await?.is_none() {
            return Ok(None);
        }
        let Some(lock) = self.rescan_lock(name, wait).await? else {
            return Err(Error::Conflict(format!(
                "a rescan of store {name:?} is under way (through this replica or another) and did not end within \
                 {} s: retry later",
                wait.as_secs()
            )));
        };
        self.rescan_counted(name, lock).await.map(Some)
    }

    /// Rescans store `name`, made from files, unless a rescan of it is under way elsewhere (as
    /// [`follow`](crate::versions::sync::follow) does every `follow_seconds`); a failure is
    /// logged and counted.
    pub async fn follow_files(&self, name: &str) {
        match self.rescan_lock(name, Duration::ZERO).await {
            Ok(Some(lock)) => {
                let _ = self.rescan_counted(name, lock).await;
            }
            Ok(None) => tracing::debug!(store = name, "files rescan under way elsewhere: not rescanned here"),
            Err(e) => {
                self.metrics.files_rescans_total.with_label_values(&["failed"]).inc();
                tracing::warn!(store = name, cause = %e, "rescanning the files of a store failed: its lock cannot be had");
            }
        }
    }

    /// Rescans store `name` with its lock held, then lets the lock go; counts and logs the
    /// outcome.
    async fn rescan_counted(&self, name: &str, lock: LockGuard) -> Result<Rescanned> {
        let rescanned = self.rescan_held(name).await;
        lock.release().await;
        let outcome = match &rescanned {
            Ok(r) if r.moved => "new_version",
            Ok(_) => "unchanged",
            Err(_) => "failed",
        };
        self.metrics.files_rescans_total.with_label_values(&[outcome]).inc();
        match &rescanned {
            Ok(r) if r.moved => tracing::info!(
                store = name,
                version = r.version,
                added = r.changes.added.len(),
                changed = r.changes.changed.len(),
                removed = r.changes.removed.len(),
                skipped = r.skipped.len(),
                "files rescanned: new version"
            ),
            Ok(r) => tracing::debug!(
                store = name,
                version = r.version,
                skipped = r.skipped.len(),
                "files rescanned: unchanged"
            ),
            Err(e) => tracing::warn!(store = name, cause = %e,
                "rescanning the files of a store failed; it keeps serving its current version"),
        }
        rescanned
    }

    /// The rescan lock of store `name`, asked for until `wait` has passed; `None` when another
    /// task or replica still holds it.
    async fn rescan_lock(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        let until = Instant::now() + wait;
        let key = format!("zarrgate files rescan {name}");
        loop {
            if let Some(lock) = self.catalog.try_lock(&key).await? {
                return Ok(Some(lock));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    /// The rescan itself, the lock held: the current version's origin read again (another
    /// replica may have just written one).
    async fn rescan_held(&self, name: &str) -> Result<Rescanned> {
        let Some(head) = self.catalog.current_version(name).await? else {
            return Err(Error::NotFound(format!("no store is named {name:?}")));
        };
        let version = head.id;
        let no_longer = || Error::Conflict(format!("store {name:?} is no longer made from files: nothing to rescan"));
        let text = self.catalog.origin(version).await?.ok_or_else(no_longer)?;
        let first = Origin::page(&*self.catalog, version, &text, 0, 0).await?.ok_or_else(no_longer)?;
        let target = first.origin.target()?;
        let reading = Instant::now();
        let split = match target.prefix {
            Some(_) => splits(&*self.catalog, version, &text, first.total).await?,
            None => Vec::new(),
        };
        let mut scan = target.scan(&self.sources, &self.settings.files, true, &split).await?;
        let listed = reading.elapsed();
        let skipped: Vec<String> = scan.skipped.iter().map(|(url, _)| url.clone()).collect();
        let unchanged =
            |changes| Rescanned { registered: None, version, moved: false, changes, skipped: skipped.clone() };
        // What the listing shows settles most rescans with no read at all, and with one page of
        // the version's records held at a time; a count of files unlike the version's shows a
        // change at once, and the records are then read once, keeping those of unchanged files.
        if scan.files.len() == first.total
            && changes_since(&*self.catalog, version, &text, &Listing::new(&scan.files)).await?.is_empty()
        {
            return Ok(unchanged(Changes::default()));
        }
        let compared = compare(&*self.catalog, version, &text, &scan.files).await?;
        let compared_at = reading.elapsed();
        // The files new or changed are read (those unchanged are served from their parse
        // remembered, with no request), and their facts as read, which the version keeps,
        // settle it: a listing that tells facts otherwise than a read does writes nothing.
        let tracked = self.progress.start(name, scan.files.len() as u64);
        let count = scan.files.len();
        let listing = std::mem::take(&mut scan.files);
        let mut folder = Folder::new(&self.settings.scratch(), &target);
        folder.fits(&listing)?;
        let unlike = self.read_files(&target, listing, compared.same, &tracked.counts, &mut folder).await?;
        let read = reading.elapsed();
        let changes = settle(compared.changes, &compared.before, unlike, &folder);
        if changes.is_empty() {
            return Ok(unchanged(changes));
        }
        let serving = self.serving(name, Registration::as_now()).await?;
        let _turn = self.turn().await?;
        let built = folder.finish(&self.sources, &target, &scan).await?;
        // Where a rescan's time goes: listing, reading (new files parsed, unchanged ones' parses
        // looked up, all joined as they come), finishing the join (the coordinate, the end).
        tracing::info!(store = %name, files = count, list_seconds = listed.as_secs_f64(),
            compare_seconds = (compared_at - listed).as_secs_f64(), read_seconds = (read - compared_at).as_secs_f64(), build_seconds = (reading.elapsed() - read).as_secs_f64(),
            "files rescanned: phases");
        let expected = Some(Expected::Version(version));
        let registered = self.store_files(name, built, serving, reading, expected).await?;
        Ok(Rescanned { version: registered.head.id, moved: true, changes, skipped, registered: Some(registered) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(etag: Option<&str>, size: u64, modified: &str) -> SourceFacts {
        SourceFacts::observed(size, etag.map(str::to_owned), Some(modified.to_owned()))
    }

    /// The files of `now` added, changed or removed since `before`.
    fn diff(before: &[(String, SourceFacts)], now: &[(String, Option<SourceFacts>)]) -> Changes {
        let listing = Listing::new(now);
        let mut comparison = Comparison::new(&listing);
        for (url, facts) in before {
            let _ = comparison.before(url, facts);
        }
        comparison.finish()
    }

    #[test]
    fn files_added_changed_and_removed_are_told_apart() {
        let t = "2024-01-01T00:00:00+00:00";
        let before = [
            ("s3://b/a.nc".to_owned(), facts(Some("\"1\""), 10, t)),
            ("s3://b/b.nc".to_owned(), facts(Some("\"2\""), 10, t)),
            ("s3://b/c.nc".to_owned(), facts(Some("\"3\""), 10, t)),
        ];
        let now = vec![
            ("s3://b/a.nc".to_owned(), Some(facts(Some("\"1\""), 10, "2024-01-01T00:00:00.250+00:00"))),
            ("s3://b/b.nc".to_owned(), Some(facts(Some("\"2b\""), 10, t))),
            ("s3://b/d.nc".to_owned(), Some(facts(Some("\"4\""), 10, t))),
        ];
        let changes = diff(&before, &now);
        assert_eq!(changes.added, ["s3://b/d.nc"]);
        assert_eq!(changes.changed, ["s3://b/b.nc"]);
        assert_eq!(changes.removed, ["s3://b/c.nc"]);
        assert!(!changes.is_empty());
    }

    #[test]
    fn the_same_files_are_no_change() {
        let before = [("s3://b/a.nc".to_owned(), facts(Some("\"1\""), 10, "2024-01-01T00:00:00+00:00"))];
        let now: Vec<_> = before.iter().map(|(u, f)| (u.clone(), Some(f.clone()))).collect();
        assert!(diff(&before, &now).is_empty());
    }

    #[test]
    fn without_an_etag_the_size_and_second_of_modification_tell() {
        let at = |t: &str, size| facts(None, size, t);
        let same = at("2024-01-01T00:00:00+00:00", 10);
        assert!(same_content(&same, &at("2024-01-01T00:00:00.900Z", 10)));
        assert!(!same_content(&same, &at("2024-01-01T00:00:01+00:00", 10)));
        assert!(!same_content(&same, &at("2024-01-01T00:00:00+00:00", 11)));
        // One ETag is not enough to compare: the size and time do.
        assert!(same_content(&facts(Some("\"1\""), 10, "2024-01-01T00:00:00Z"), &same));
        let unknown = SourceFacts { etag: None, size: Some(10), last_modified: None };
        assert!(!same_content(&unknown, &unknown));
    }

    #[test]
    fn a_file_listed_as_changed_is_settled_by_its_facts_as_read() {
        let t = "2024-01-01T00:00:00Z";
        let before = [
            ("s3://b/a.nc".to_owned(), facts(Some("\"1\""), 10, t)),
            ("s3://b/b.nc".to_owned(), facts(Some("\"2\""), 10, t)),
            ("s3://b/c.nc".to_owned(), facts(Some("\"3\""), 10, t)),
        ];
        // The listing tells a's facts otherwise (no ETag), b's content changed, c is gone, d new.
        let listed = vec![
            ("s3://b/a.nc".to_owned(), None),
            ("s3://b/b.nc".to_owned(), Some(facts(Some("\"2b\""), 10, t))),
            ("s3://b/d.nc".to_owned(), Some(facts(Some("\"4\""), 10, t))),
        ];
        let changes = diff(&before, &listed);
        assert_eq!(changes.changed, ["s3://b/a.nc", "s3://b/b.nc"]);
        let then: HashMap<String, SourceFacts> =
            before.iter().filter(|(url, _)| changes.changed.contains(url)).cloned().collect();
        // Read, a is what it was: only b changed; d added and c removed stay.
        let read = vec![
            ("s3://b/a.nc".to_owned(), Some(facts(Some("\"1\""), 10, t))),
            ("s3://b/b.nc".to_owned(), Some(facts(Some("\"2b\""), 10, t))),
            ("s3://b/d.nc".to_owned(), Some(facts(Some("\"4\""), 10, t))),
        ];
        let settled = settle(changes, &then, Vec::new(), &Listing::new(&read));
        assert_eq!(settled.changed, ["s3://b/b.nc"]);
        assert_eq!((settled.added, settled.removed), (vec!["s3://b/d.nc".to_owned()], vec!["s3://b/c.nc".to_owned()]));
        // All read as they were, with nothing added or removed: no change at all.
        let only_a = diff(&before[..1], &listed[..1]);
        let then: HashMap<String, SourceFacts> = before[..1].iter().cloned().collect();
        assert!(settle(only_a.clone(), &then, Vec::new(), &Listing::new(&read[..1])).is_empty());
        // Listed unchanged, but read again and found changed: changed, in the order read.
        let settled = settle(only_a, &then, vec!["s3://b/a.nc".to_owned()], &Listing::new(&read[..1]));
        assert_eq!(settled.changed, ["s3://b/a.nc"]);
    }

    #[test]
    fn a_file_whose_facts_are_unknown_counts_as_changed() {
        let before = [("s3://b/a.nc".to_owned(), facts(Some("\"1\""), 10, "2024-01-01T00:00:00Z"))];
        let changes = diff(&before, &[("s3://b/a.nc".to_owned(), None)]);
        assert_eq!(changes.changed, ["s3://b/a.nc"]);
    }
}
