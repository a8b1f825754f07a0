//! The body of a files registration as `zarrgate stores put NAME URL...` sends it: the data
//! files' URLs, or a prefix and a glob split from one URL, how several files are joined
//! (`--join`) into one store, which files are too recent (`--older-than`) and how often a
//! prefix is rescanned (`--follow`); the progress bar over the files the server reads meanwhile;
//! and what `stores sync` says of a sync.

use std::str::FromStr;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::{Api, Failure};

/// The characters that make a URL a glob.
const GLOB: [char; 3] = ['*', '?', '['];

/// How several files make one store: the `"combine"` of a files registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Join {
    /// `existing:DIM`: concatenated along the dimension every file has.
    Existing { dim: String },
    /// `new:DIM:PATTERN:FORMAT`: stacked along a new dimension, dated by each file's name.
    New { dim: String, pattern: String, format: String },
    /// `union`: every file's variables side by side.
    Union,
}

impl FromStr for Join {
    type Err = String;

    fn from_str(given: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!("--join {given:?} {why}: give existing:DIM, union or new:DIM:PATTERN:FORMAT (e.g. existing:time)")
        };
        let (kind, rest) = given.split_once(':').unwrap_or((given, ""));
        match kind {
            "union" if rest.is_empty() && !given.contains(':') => Ok(Join::Union),
            "union" => Err(bad("takes nothing after union")),
            "existing" if rest.is_empty() => Err(bad("names no dimension")),
            "existing" if rest.contains(':') => Err(bad("has more than a dimension after existing:")),
            "existing" => Ok(Join::Existing { dim: rest.to_owned() }),
            "new" => {
                // The pattern (a regex) may hold ':', as in `(?:...)`; the dimension and the
                // format may not.
                let (dim, rest) = rest.split_once(':').ok_or_else(|| bad("needs new:DIM:PATTERN:FORMAT"))?;
                let (pattern, format) = rest.rsplit_once(':').ok_or_else(|| bad("needs new:DIM:PATTERN:FORMAT"))?;
                if dim.is_empty() || pattern.is_empty() || format.is_empty() {
                    return Err(bad("has an empty part of new:DIM:PATTERN:FORMAT"));
                }
                Ok(Join::New { dim: dim.to_owned(), pattern: pattern.to_owned(), format: format.to_owned() })
            }
            _ => Err(bad("is not a way to join")),
        }
    }
}

impl Join {
    /// The `"combine"` the server reads.
    pub fn to_json(&self) -> Value {
        match self {
            Join::Existing { dim } => json!({ "join": "existing", "dim": dim }),
            Join::New { dim, pattern, format } => {
                json!({ "join": "new", "dim": dim, "pattern": pattern, "format": format })
            }
            Join::Union => json!({ "join": "union" }),
        }
    }
}

/// The options of `stores put` that only data files' URLs take.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Options {
    /// For several data files: how they make one store. `existing:DIM` concatenates every
    /// variable that has dimension DIM along it, in file order; `new:DIM:PATTERN:FORMAT`
    /// stacks the files along a new dimension DIM dated by each file's name (the regex
    /// PATTERN's groups read with the strftime FORMAT, e.g. `new:run:fc_(\d{8})_(\d{2}):%Y%m%d%H`;
    /// PATTERN may hold `:`, FORMAT may not); `union` puts every file's variables side by side.
    #[arg(long, value_name = "HOW", value_parser = clap::builder::ValueParser::new(str::parse::<Join>))]
    pub join: Option<Join>,
    /// Leave out data files modified less than this long ago (still being written), at
    /// registration and every rescan, in seconds (`120`) or as a duration (`2m`, `1h`).
    #[arg(long, value_name = "AGE", value_parser = older_than_seconds)]
    pub older_than: Option<u64>,
    /// For a URL with a glob: rescan the prefix this often (`10m`, `1h`, or seconds): files
    /// added, changed or removed make a new version (`stores sync` rescans at once).
    #[arg(long, value_name = "EVERY", value_parser = follow_seconds)]
    pub follow: Option<u64>,
}

impl Options {
    /// The flag of these given, if one is (a manifest file takes none).
    pub fn given(&self) -> Option<&'static str> {
        [
            ("--join", self.join.is_some()),
            ("--older-than", self.older_than.is_some()),
            ("--follow", self.follow.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}

/// The JSON body of a files registration: the files, their parser, how they are joined, which
/// are too recent, how often they are rescanned.
pub fn body(urls: &[String], parser: &str, options: &Options) -> Result<Value, String> {
    let files = files_value(urls)?;
    if options.follow.is_some() && files.is_array() {
        return Err("--follow rescans a prefix for new or changed files: give one URL with a glob, quoted \
             ('s3://bucket/era5/*.nc'); a list of files is checked again with `stores sync`"
            .into());
    }
    let mut body = json!({ "files": files, "parser": parser });
    if let Some(join) = &options.join {
        body["combine"] = join.to_json();
    }
    if let Some(seconds) = options.older_than {
        body["older_than_seconds"] = json!(seconds);
    }
    if let Some(seconds) = options.follow {
        body["follow_seconds"] = json!(seconds);
    }
    Ok(body)
}

/// What `stores sync` prints: an Icechunk store's snapshot, or the files a rescan found
/// added, changed, removed and left out.
pub fn sync_summary(name: &str, v: &Value) -> String {
    let version = &v["version"];
    let moved = v["moved"].as_bool() == Some(true);
    let Some(added) = v["added"].as_array() else {
        let snapshot = v["snapshot_id"].as_str().unwrap_or_default();
        return if moved {
            format!("{name}: moved to snapshot {snapshot}, version {version}\n")
        } else {
            format!("{name}: unchanged (snapshot {snapshot}, version {version})\n")
        };
    };
    let mut text = if moved {
        format!("{name}: new version {version}\n")
    } else {
        format!("{name}: unchanged (version {version})\n")
    };
    let listed = [("added", added.as_slice()), ("changed", list(&v["changed"])), ("removed", list(&v["removed"]))];
    for (what, urls) in listed.into_iter().chain([("left out (too recent)", list(&v["skipped"]))]) {
        if !urls.is_empty() {
            text.push_str(&format!("  {what}: {}\n", urls.len()));
            for url in urls.iter().filter_map(Value::as_str) {
                text.push_str(&format!("    {url}\n"));
            }
        }
    }
    text
}

fn list(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

/// `--follow`: whole seconds (`600`) or a duration (`10m`, `1h`), at least a second.
pub fn follow_seconds(given: &str) -> Result<u64, String> {
    match older_than_seconds(given)? {
        0 => Err(format!("{given:?} is no time: rescan at least every second (1, 10m, 1h)")),
        seconds => Ok(seconds),
    }
}

/// `--older-than`: whole seconds (`120`) or a duration (`2m`, `1h`, `1h 30m`).
pub fn older_than_seconds(given: &str) -> Result<u64, String> {
    let given = given.trim();
    if let Ok(seconds) = given.parse::<u64>() {
        return Ok(seconds);
    }
    humantime::parse_duration(given)
        .map(|d: Duration| d.as_secs())
        .map_err(|e| format!("{given:?} is not a number of seconds (120) or a duration (2m, 1h): {e}"))
}

/// Whether `given` names a data file by its URL (else it is a manifest file's path).
pub fn is_url(given: &str) -> bool {
    given.contains("://")
}

/// A URL with a glob as a prefix (up to the last `/` before the first glob character) and the
/// glob (the rest); `None` when the URL has no glob character.
pub fn split_glob(url: &str) -> Option<(&str, &str)> {
    let first = url.find(GLOB)?;
    let cut = url[..first].rfind('/').map_or(0, |slash| slash + 1);
    Some((&url[..cut], &url[cut..]))
}

/// The `"files"` of the registration: the URLs as a list, or the one URL with a glob as
/// `{"prefix", "glob"}`.
pub fn files_value(urls: &[String]) -> Result<Value, String> {
    match urls {
        [url] => Ok(match split_glob(url) {
            Some((prefix, glob)) => json!({ "prefix": prefix, "glob": glob }),
            None => json!([url]),
        }),
        _ => match urls.iter().find(|url| split_glob(url).is_some()) {
            Some(globbed) => Err(format!(
                "{globbed} has a glob ({}): give it alone, not with other URLs (quote it so the shell leaves it as it is)",
                GLOB.iter().map(char::to_string).collect::<Vec<_>>().join(" ")
            )),
            None => Ok(json!(urls)),
        },
    }
}

/// How often the progress of a registration is asked for.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Waits for `registration` (the PUT of store `name` from files) while drawing a bar on stderr
/// of the files the server has read, as `GET .../progress` tells (files read of found, those
/// found parsed before, time left). indicatif draws nothing when stderr is not a terminal; a
/// server that cannot tell (an older one, another replica) leaves the bar a spinner.
pub async fn with_progress(
    api: &Api,
    name: &str,
    registration: impl std::future::Future<Output = Result<Value, Failure>>,
) -> Result<Value, Failure> {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} files read{msg}, {eta} left")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_prefix(name.to_owned());
    let path = format!("{}/progress", super::store_path(name));
    let mut every = tokio::time::interval(PROGRESS_EVERY);
    let mut styled = false;
    tokio::pin!(registration);
    let answer = loop {
        tokio::select! {
            answer = &mut registration => break answer,
            _ = every.tick() => {}
        }
        let Ok(now) = api.json(api.request(Method::GET, &path)).await else {
            bar.tick();
            continue;
        };
        let count = |key: &str| now.get(key).and_then(Value::as_u64).unwrap_or(0);
        if !styled {
            bar.set_style(style.clone());
            styled = true;
        }
        bar.set_length(count("files"));
        bar.set_position(count("read"));
        let cached = count("cached");
        bar.set_message(if cached > 0 { format!(" ({cached} parsed before)") } else { String::new() });
    };
    bar.finish_and_clear();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glob_is_split_at_the_last_slash_before_its_first_glob_character() {
        assert_eq!(split_glob("s3://b/era5/*.nc"), Some(("s3://b/era5/", "*.nc")));
        assert_eq!(split_glob("s3://b/era5/**/*.nc"), Some(("s3://b/era5/", "**/*.nc")));
        assert_eq!(split_glob("file:///d/day_0?.nc"), Some(("file:///d/", "day_0?.nc")));
        assert_eq!(split_glob("s3://b/era5/20[12]4/x.nc"), Some(("s3://b/era5/", "20[12]4/x.nc")));
        assert_eq!(split_glob("s3://b/era5/day_*/x.nc"), Some(("s3://b/era5/", "day_*/x.nc")));
        assert_eq!(split_glob("s3://b/era5/air.nc"), None);
    }

    #[test]
    fn files_are_a_list_or_a_prefix_and_a_glob() {
        let urls = |u: &[&str]| u.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(files_value(&urls(&["s3://b/a.nc"])), Ok(json!(["s3://b/a.nc"])));
        assert_eq!(files_value(&urls(&["s3://b/a.nc", "s3://b/c.nc"])), Ok(json!(["s3://b/a.nc", "s3://b/c.nc"])));
        assert_eq!(
            files_value(&urls(&["s3://b/era5/**/*.nc"])),
            Ok(json!({ "prefix": "s3://b/era5/", "glob": "**/*.nc" }))
        );
        let mixed = files_value(&urls(&["s3://b/a.nc", "s3://b/*.nc"])).unwrap_err();
        assert!(mixed.contains("s3://b/*.nc has a glob"), "{mixed}");
    }

    #[test]
    fn join_parses_each_way_and_names_what_is_wrong() {
        assert_eq!("existing:time".parse(), Ok(Join::Existing { dim: "time".into() }));
        assert_eq!("union".parse(), Ok(Join::Union));
        assert_eq!(
            "new:run:fc_(?:x)?(\\d{8})_(\\d{2}):%Y%m%d%H".parse(),
            Ok(Join::New {
                dim: "run".into(),
                pattern: "fc_(?:x)?(\\d{8})_(\\d{2})".into(),
                format: "%Y%m%d%H".into()
            })
        );
        assert_eq!(Join::Existing { dim: "time".into() }.to_json(), json!({ "join": "existing", "dim": "time" }));
        for (bad, why) in [
            ("existing", "names no dimension"),
            ("existing:", "names no dimension"),
            ("existing:a:b", "more than a dimension"),
            ("union:x", "nothing after union"),
            ("new:run", "new:DIM:PATTERN:FORMAT"),
            ("new:run::%Y", "empty part"),
            ("concat:time", "not a way to join"),
        ] {
            let error = bad.parse::<Join>().unwrap_err();
            assert!(error.contains(&format!("{bad:?}")) && error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn follow_is_for_a_glob_and_goes_in_the_body() {
        let options = Options { follow: Some(600), older_than: Some(60), join: "existing:time".parse().ok() };
        let body = body(&["s3://b/era5/*.nc".to_owned()], "auto", &options).unwrap();
        assert_eq!(body["follow_seconds"], json!(600));
        assert_eq!(body["older_than_seconds"], json!(60));
        assert_eq!(body["files"], json!({ "prefix": "s3://b/era5/", "glob": "*.nc" }));
        let listed = super::body(&["s3://b/a.nc".to_owned()], "auto", &options).unwrap_err();
        assert!(listed.contains("--follow rescans a prefix"), "{listed}");
        assert_eq!(follow_seconds("10m"), Ok(600));
        assert!(follow_seconds("0").is_err());
        assert_eq!(Options::default().given(), None);
        assert_eq!(options.given(), Some("--join"));
    }

    #[test]
    fn a_files_sync_says_what_changed() {
        let v = json!({ "store": "s", "moved": true, "version": 3, "added": ["s3://b/d.nc"], "changed": [],
            "removed": ["s3://b/a.nc"], "skipped": [] });
        let text = sync_summary("s", &v);
        assert!(text.starts_with("s: new version 3\n"), "{text}");
        assert!(text.contains("added: 1\n    s3://b/d.nc\n") && text.contains("removed: 1"), "{text}");
        assert!(!text.contains("changed"), "{text}");
        let icechunk = json!({ "moved": false, "version": 2, "snapshot_id": "AB" });
        assert_eq!(sync_summary("s", &icechunk), "s: unchanged (snapshot AB, version 2)\n");
    }

    #[test]
    fn older_than_takes_seconds_or_a_duration() {
        assert_eq!(older_than_seconds("120"), Ok(120));
        assert_eq!(older_than_seconds("2m"), Ok(120));
        assert_eq!(older_than_seconds("1h"), Ok(3600));
        assert!(older_than_seconds("soon").unwrap_err().contains("\"soon\""));
    }
}
