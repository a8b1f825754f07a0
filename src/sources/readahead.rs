//! Read-ahead settings of an object store: the server-wide defaults (`[sources]` in the
//! configuration) overridden by the store's own options `readahead`, `readahead_window`,
//! `readahead_gap` and `readahead_cache`, which zarrgate takes out before object_store sees the
//! options (as it does `first_byte_timeout`).

use super::error::SourceConfigError;

/// The option turning read-ahead (and with it single-flight and coalescing) on or off.
pub(super) const READAHEAD: &str = "readahead";
/// The option naming the largest read-ahead, in bytes.
pub(super) const WINDOW: &str = "readahead_window";
/// The option naming the block size reads are widened to, in bytes.
pub(super) const GAP: &str = "readahead_gap";
/// The option naming the bytes held for reads to come, in bytes.
pub(super) const CACHE: &str = "readahead_cache";

/// The options of this module, all public (shown by the API).
pub(super) const OPTIONS: [&str; 4] = [READAHEAD, WINDOW, GAP, CACHE];

/// How an object store's reads share, widen and read ahead of upstream requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadAheadSettings {
    /// Off: every read is its own upstream request of exactly its bytes, as asked.
    pub enabled: bool,
    /// The most bytes read past a read once a sequential pattern is seen (0: none).
    pub window: u64,
    /// Reads are widened to aligned blocks of this many bytes: reads less than this apart
    /// share one upstream request, and the block is the unit of the cache.
    pub gap: u64,
    /// Bytes held (fetched ahead or around reads) for reads to come, per object store.
    pub cache: u64,
}

impl Default for ReadAheadSettings {
    fn default() -> Self {
        Self { enabled: true, window: 4 << 20, gap: 64 << 10, cache: 64 << 20 }
    }
}

impl ReadAheadSettings {
    /// Refuses settings that cannot work, naming the setting `{prefix}gap{suffix}` (store
    /// options: `readahead_`, ``; the configuration: `sources.readahead_`, `_bytes`).
    pub fn check(&self, prefix: &str, suffix: &str) -> Result<(), SourceConfigError> {
        let bad = |what: String| Err(SourceConfigError::Option(what));
        if !(4 << 10..=64 << 20).contains(&self.gap) {
            return bad(format!("{prefix}gap{suffix} must be between 4 KiB and 64 MiB, not {} bytes", self.gap));
        }
        if self.window > 1 << 30 {
            return bad(format!("{prefix}window{suffix} must be at most 1 GiB, not {} bytes", self.window));
        }
        Ok(())
    }

    /// These settings overridden by the read-ahead options among `opts`, which are taken out.
    pub(super) fn with_options(mut self, opts: &mut Vec<(String, String)>) -> Result<Self, SourceConfigError> {
        let mut take = |key: &str| opts.iter().position(|(k, _)| k == key).map(|at| opts.remove(at).1);
        if let Some(value) = take(READAHEAD) {
            self.enabled = match value.to_ascii_lowercase().as_str() {
                "true" | "on" => true,
                "false" | "off" => false,
                _ => {
                    return Err(SourceConfigError::Option(format!(
                        "{READAHEAD} must be \"on\" or \"off\" (or true or false), not {value:?}"
                    )));
                }
            };
        }
        for (key, field) in [(WINDOW, &mut self.window), (GAP, &mut self.gap), (CACHE, &mut self.cache)] {
            if let Some(value) = take(key) {
                *field = parse_bytes(&value).ok_or_else(|| {
                    SourceConfigError::Option(format!(
                        "{key} must be a number of bytes such as 65536, \"64KiB\" or \"4MiB\", not {value:?}"
                    ))
                })?;
            }
        }
        self.check("readahead_", "")?;
        Ok(self)
    }
}

/// `65536`, `64KiB`, `4 MiB`, `1GiB` (binary units only: a reader of the option should not have
/// to wonder whether `4MB` meant 4,000,000 bytes).
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn options_override_the_defaults_and_are_taken_out() {
        let mut opts = options(&[("readahead_window", "1MiB"), ("region", "x"), ("readahead_cache", "0")]);
        let got = ReadAheadSettings::default().with_options(&mut opts).unwrap();
        assert_eq!(got, ReadAheadSettings { window: 1 << 20, cache: 0, ..ReadAheadSettings::default() });
        assert_eq!(opts, options(&[("region", "x")]));
        let off = ReadAheadSettings::default().with_options(&mut options(&[("readahead", "off")])).unwrap();
        assert!(!off.enabled);
    }

    #[test]
    fn bad_values_are_named() {
        for (key, value, words) in [
            ("readahead", "maybe", "\"on\" or \"off\""),
            ("readahead_window", "4MB", "number of bytes"),
            ("readahead_gap", "100", "between 4 KiB and 64 MiB"),
            ("readahead_window", "2GiB", "at most 1 GiB"),
            ("readahead_cache", "99999999999999999999", "number of bytes"),
        ] {
            let e = ReadAheadSettings::default().with_options(&mut options(&[(key, value)])).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(words), "{key}={value}: {e}");
        }
    }

    #[test]
    fn byte_sizes_parse() {
        assert_eq!(parse_bytes("65536"), Some(65536));
        assert_eq!(parse_bytes("64KiB"), Some(65536));
        assert_eq!(parse_bytes("4 MiB"), Some(4 << 20));
        assert_eq!(parse_bytes("1gib"), Some(1 << 30));
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("MiB"), None);
    }
}
