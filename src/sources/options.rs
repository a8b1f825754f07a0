//! Object store options: which builder keys an object store registered over the API may use,
//! and whether it carries credentials of its own (which values the API may show:
//! `crate::redact`).
//!
//! Whoever holds an admin token may register object stores, but must not be able to make the
//! server act with more than the options give it: no ambient cloud identity (instance metadata,
//! workload identity) unless the configuration allows it, and none of the builder keys that make
//! object_store read a local file or send it to a host of the caller's choosing
//! (`container_authorization_token_file` with `container_credentials_full_uri`,
//! `web_identity_token_file`, `federated_token_file`, `msi_endpoint`...). Stores declared in the
//! configuration file are the operator's and may use every key.

use serde_json::{Map, Value};
use url::Url;

use super::error::SourceConfigError;

/// The kinds of object store with builder options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    S3,
    Gcs,
    Azure,
    Http,
}

impl Kind {
    /// The URL scheme's name, for messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Gcs => "gs",
            Self::Azure => "az",
            Self::Http => "http",
        }
    }

    /// The canonical names (object_store's `AsRef<str>` of the parsed key) a store registered
    /// over the API may set: where the bucket is, static credentials, and plain client settings.
    fn api_keys(self) -> &'static [&'static str] {
        match self {
            Self::S3 => &[
                "aws_region",
                "aws_default_region",
                "aws_endpoint",
                "aws_access_key_id",
                "aws_secret_access_key",
                "aws_session_token",
                "aws_skip_signature",
                "aws_virtual_hosted_style_request",
                "aws_unsigned_payload",
                "aws_request_payer",
                "aws_s3_express",
                "allow_http",
                "allow_invalid_certificates",
                "timeout",
                "connect_timeout",
                "user_agent",
            ],
            Self::Gcs => &[
                "google_service_account_key",
                "google_bearer_token",
                "google_skip_signature",
                "allow_http",
                "allow_invalid_certificates",
                "timeout",
                "connect_timeout",
                "user_agent",
            ],
            Self::Azure => &[
                "azure_storage_account_name",
                "azure_storage_account_key",
                "azure_storage_sas_key",
                "azure_storage_token",
                "azure_storage_client_id",
                "azure_storage_client_secret",
                "azure_storage_tenant_id",
                "azure_storage_use_emulator",
                "azure_storage_endpoint",
                "azure_skip_signature",
                "allow_http",
                "allow_invalid_certificates",
                "timeout",
                "connect_timeout",
                "user_agent",
            ],
            Self::Http => &["allow_http", "allow_invalid_certificates", "timeout", "connect_timeout", "user_agent"],
        }
    }

    /// True when `keys` (canonical names) hold a complete static credential.
    fn has_credentials(self, keys: &[&str]) -> bool {
        let has = |k: &str| keys.contains(&k);
        match self {
            Self::S3 => has("aws_access_key_id") && has("aws_secret_access_key"),
            Self::Gcs => has("google_service_account_key") || has("google_bearer_token"),
            Self::Azure => {
                has("azure_storage_account_key")
                    || has("azure_storage_sas_key")
                    || has("azure_storage_token")
                    || (has("azure_storage_client_id")
                        && has("azure_storage_client_secret")
                        && has("azure_storage_tenant_id"))
            }
            Self::Http => false,
        }
    }

    /// The canonical name of the skip-signature key.
    fn skip_signature(self) -> Option<&'static str> {
        match self {
            Self::S3 => Some("aws_skip_signature"),
            Self::Gcs => Some("google_skip_signature"),
            Self::Azure => Some("azure_skip_signature"),
            Self::Http => None,
        }
    }
}

/// What a store registered over the API must do about signing requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Signing {
    /// As its options say (credentials of its own, or anonymous already).
    AsGiven,
    /// Add `skip_signature = true`: no credentials of its own, so it reads anonymously.
    Anonymous,
}

/// Checks the options of a store registered over the API, given as `(canonical key, value)`;
/// `ambient` allows the server's own cloud identity for stores without credentials.
pub(super) fn api_policy<K: AsRef<str>>(
    kind: Kind,
    keys: &[(K, &str)],
    ambient: bool,
) -> Result<Signing, SourceConfigError> {
    let allowed = kind.api_keys();
    let refused: Vec<&str> = keys.iter().map(|(k, _)| k.as_ref()).filter(|k| !allowed.contains(k)).collect();
    if !refused.is_empty() {
        return Err(SourceConfigError::Option(format!(
            "option(s) {} cannot be set on an object store registered over the API: they make the server \
             read its own files or fetch credentials from elsewhere; declare such a store in the configuration \
             file instead. Accepted here: {}",
            refused.join(", "),
            allowed.join(", ")
        )));
    }
    let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_ref()).collect();
    let Some(skip) = kind.skip_signature() else { return Ok(Signing::AsGiven) };
    if kind.has_credentials(&names) || ambient {
        return Ok(Signing::AsGiven);
    }
    match keys.iter().find(|(k, _)| k.as_ref() == skip) {
        Some((_, v)) if v.eq_ignore_ascii_case("false") => Err(SourceConfigError::Option(format!(
            "skip_signature is false but the options carry no credentials: the server's own cloud identity is \
             not lent to object stores registered over the API (sources.api_ambient_credentials = false); give \
             credentials in the options, or drop skip_signature to read a public {} bucket anonymously",
            kind.name()
        ))),
        Some(_) => Ok(Signing::AsGiven),
        None => Ok(Signing::Anonymous),
    }
}

/// The options as strings with lower-case keys.
pub(super) fn string_options(options: &Map<String, Value>) -> Result<Vec<(String, String)>, SourceConfigError> {
    options
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.to_ascii_lowercase(), s.clone())),
            Value::Bool(b) => Ok((k.to_ascii_lowercase(), b.to_string())),
            Value::Number(n) => Ok((k.to_ascii_lowercase(), n.to_string())),
            _ => Err(SourceConfigError::Option(format!("option {k:?} must be a string, number or boolean"))),
        })
        .collect()
}

/// A store whose URL or endpoint is `http://` asked for plain HTTP: `allow_http` is implied
/// (object_store refuses `http://` without it, and every read would fail with a message that
/// does not say why); an explicit `allow_http: false` beside it is a contradiction.
pub(super) fn plain_http(url: &Url, opts: &mut Vec<(String, String)>) -> Result<(), SourceConfigError> {
    let plain = url.scheme() == "http"
        || opts.iter().any(|(k, v)| k.contains("endpoint") && v.to_ascii_lowercase().starts_with("http://"));
    if !plain {
        return Ok(());
    }
    match opts.iter().find(|(k, _)| k == "allow_http") {
        Some((_, v)) if v.eq_ignore_ascii_case("false") => Err(SourceConfigError::Option(format!(
            "{url} (or its endpoint) is plain http://, but allow_http is false: use https://, or drop allow_http"
        ))),
        Some(_) => Ok(()),
        None => {
            opts.push(("allow_http".into(), "true".into()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_stores_read_anonymously_unless_they_bring_credentials() {
        let policy = |kind, keys: &[(&str, &str)]| api_policy(kind, keys, false);
        assert_eq!(policy(Kind::S3, &[("aws_region", "eu-west-1")]).unwrap(), Signing::Anonymous);
        assert_eq!(policy(Kind::S3, &[("aws_access_key_id", "AK")]).unwrap(), Signing::Anonymous);
        let keyed = [("aws_access_key_id", "AK"), ("aws_secret_access_key", "S")];
        assert_eq!(policy(Kind::S3, &keyed).unwrap(), Signing::AsGiven);
        assert_eq!(policy(Kind::S3, &[("aws_skip_signature", "true")]).unwrap(), Signing::AsGiven);
        let e = policy(Kind::S3, &[("aws_skip_signature", "false")]).unwrap_err().to_string();
        assert!(e.contains("no credentials"), "{e}");
        assert_eq!(api_policy(Kind::S3, &[("aws_skip_signature", "false")], true).unwrap(), Signing::AsGiven);
        assert_eq!(policy(Kind::Azure, &[("azure_storage_client_id", "id")]).unwrap(), Signing::Anonymous);
        assert_eq!(policy(Kind::Azure, &[("azure_storage_sas_key", "sv=...")]).unwrap(), Signing::AsGiven);
        assert_eq!(policy(Kind::Gcs, &[]).unwrap(), Signing::Anonymous);
        assert_eq!(policy(Kind::Http, &[("allow_http", "true")]).unwrap(), Signing::AsGiven);
    }

    #[test]
    fn keys_that_read_files_or_fetch_credentials_are_refused() {
        for (kind, key) in [
            (Kind::S3, "aws_container_credentials_full_uri"),
            (Kind::S3, "aws_container_authorization_token_file"),
            (Kind::S3, "aws_web_identity_token_file"),
            (Kind::S3, "aws_metadata_endpoint"),
            (Kind::S3, "aws_sse_kms_key_id"),
            (Kind::Gcs, "google_service_account"),
            (Kind::Gcs, "google_application_credentials"),
            (Kind::Azure, "azure_federated_token_file"),
            (Kind::Azure, "azure_msi_endpoint"),
            (Kind::Azure, "azure_storage_authority_host"),
            (Kind::Http, "proxy_url"),
        ] {
            let e = api_policy(kind, &[(key, "x")], true).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("configuration file"), "{key}: {e}");
        }
    }
}
