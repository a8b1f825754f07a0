//! Secrets hidden from what is shown: passwords and tokens in URLs (a catalog's `database_url`,
//! an object store's URL) and the option values of object stores, for logs, errors, the API and
//! `zarrgate config`. A leaf: it imports nothing of the server.

use serde_json::{Map, Value};
use url::Url;

/// Query parameters whose values are secrets: libpq's `password` and `sslpassword`, and the
/// tokens and signatures an object store URL may carry (an Azure SAS `sig`, `token`, ...).
fn secret_query_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "credential"].iter().any(|s| key.contains(s))
        || matches!(key.as_str(), "pwd" | "sig" | "signature" | "x-amz-signature" | "x-goog-signature")
}

/// `url` with any password replaced by `***`, in its userinfo and in its query
/// (`?password=...`, which libpq and sqlx accept too), for logs, errors and `zarrgate config`.
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        // Not a URL: shown only when it cannot hold a password.
        return if url.contains(['@', '=', ':']) {
            "(a value that is no URL, not shown)".to_owned()
        } else {
            url.to_owned()
        };
    };
    let mut changed = false;
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
        changed = true;
    }
    if u.query_pairs().any(|(k, _)| secret_query_key(&k)) {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret_query_key(&k) { "***".to_owned() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
        changed = true;
    }
    if changed { u.to_string() } else { url.to_owned() }
}

/// Option keys whose values are not secret and may be shown by the API.
const PUBLIC_OPTIONS: &[&str] = &[
    "region",
    "aws_region",
    "endpoint",
    "aws_endpoint",
    "aws_endpoint_url",
    "allow_http",
    "skip_signature",
    "aws_skip_signature",
    "virtual_hosted_style_request",
    "aws_virtual_hosted_style_request",
    "account_name",
    "azure_storage_account_name",
    "use_emulator",
    "azure_storage_use_emulator",
    "timeout",
    "connect_timeout",
    "first_byte_timeout",
    "readahead",
    "readahead_window",
    "readahead_gap",
    "readahead_cache",
    "allow_invalid_certificates",
    "bucket",
    "aws_bucket",
    "container_name",
    "google_bucket",
    "aws_unsigned_payload",
    "access_key_id",
    "aws_access_key_id",
    "imdsv1_fallback",
    "aws_imdsv1_fallback",
    "requester_pays",
    "request_payer",
    "aws_request_payer",
];

/// `options` with every value that may be a secret replaced by `"***"`; a URL among the public
/// ones (an endpoint) loses any credentials written into it.
pub fn redact_options(options: &Map<String, Value>) -> Map<String, Value> {
    options
        .iter()
        .map(|(k, v)| {
            let public = PUBLIC_OPTIONS.contains(&k.to_ascii_lowercase().as_str());
            let shown = match v {
                _ if !public => Value::from("***"),
                Value::String(s) => Value::from(without_userinfo(s)),
                other => other.clone(),
            };
            (k.clone(), shown)
        })
        .collect()
}

fn without_userinfo(text: &str) -> String {
    match Url::parse(text) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("***");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn passwords_are_redacted_in_the_userinfo_and_the_query() {
        for (url, shown) in [
            ("postgres://zarrgate:hunter2@db:5432/zarrgate", "postgres://zarrgate:***@db:5432/zarrgate"),
            ("postgres://zarrgate@db/zarrgate?password=hunter2", "postgres://zarrgate@db/zarrgate?password=***"),
            (
                "postgres://db/zarrgate?sslmode=require&PassWord=hunter2&sslpassword=hunter3",
                "postgres://db/zarrgate?sslmode=require&PassWord=***&sslpassword=***",
            ),
            (
                "https://acct.blob.core.windows.net/c/?sv=2022&sig=hunter2%2B",
                "https://acct.blob.core.windows.net/c/?sv=2022&sig=***",
            ),
            ("sqlite://data/zarrgate.db?mode=rwc", "sqlite://data/zarrgate.db?mode=rwc"),
            ("not a url password=hunter2", "(a value that is no URL, not shown)"),
            ("data/zarrgate.db", "data/zarrgate.db"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn secrets_are_redacted() {
        let shown = redact_options(
            json!({"region": "r", "secret_access_key": "s", "token": "t", "endpoint": "https://u:p@minio:9000"})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            Value::Object(shown),
            json!({"region": "r", "secret_access_key": "***", "token": "***", "endpoint": "https://***@minio:9000/"})
        );
    }
}
