//! The body of a files registration as `zarrgate stores put NAME URL...` sends it: the data
//! files' URLs, or a prefix and a glob split from one URL, and how several files are joined
//! (`--join`) into one store.

use std::str::FromStr;
use std::time::Duration;

use serde_json::{Value, json};

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
    fn older_than_takes_seconds_or_a_duration() {
        assert_eq!(older_than_seconds("120"), Ok(120));
        assert_eq!(older_than_seconds("2m"), Ok(120));
        assert_eq!(older_than_seconds("1h"), Ok(3600));
        assert!(older_than_seconds("soon").unwrap_err().contains("\"soon\""));
    }
}
