//! The HTTP client behind every object store: object_store's own settings, plus a redirect
//! policy that keeps requests inside the object store they were made for.
//!
//! object_store's default client follows up to ten redirects anywhere: a source server (or
//! anything that answers for it) could send zarrgate to an internal address and have the answer
//! served publicly as chunk bytes. Here a redirect is followed only to the same origin (scheme,
//! host and port), and for `http(s)://` object stores only under their URL prefix; any other
//! is refused, and the read fails with a 502 whose log line names the refused location.

use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use object_store::client::{HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService};
use object_store::{ClientConfigKey, ClientOptions};
use prometheus::IntCounter;
use url::Url;

/// The counter of an object store's HTTP requests, bound once the store's metrics are.
pub(super) type Sent = Arc<OnceLock<IntCounter>>;

/// Builds clients whose redirects stay inside `scope`.
#[derive(Debug, Clone)]
pub(super) struct ConfinedConnector {
    /// For `http(s)://` object stores, the URL prefix redirects must stay under; for buckets,
    /// `None`: the origin of the request is the bound.
    prefix: Option<Url>,
    /// Counts every request sent, object_store's own retries included.
    sent: Sent,
}

impl ConfinedConnector {
    /// Redirects limited to the origin of each request.
    pub(super) fn same_origin() -> Self {
        Self { prefix: None, sent: Sent::default() }
    }

    /// Redirects limited to URLs under `prefix`.
    pub(super) fn under(prefix: Url) -> Self {
        Self { prefix: Some(prefix), sent: Sent::default() }
    }

    /// Requests counted in `sent`.
    pub(super) fn counting(self, sent: &Sent) -> Self {
        Self { sent: sent.clone(), ..self }
    }

    fn allows(&self, from: &Url, to: &Url) -> bool {
        let same_origin = from.origin() == to.origin();
        match &self.prefix {
            None => same_origin,
            Some(prefix) => same_origin && to.as_str().starts_with(prefix.as_str()),
        }
    }
}

const MAX_REDIRECTS: usize = 5;

impl HttpConnector for ConfinedConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let value = |key| options.get_config_value(&key);
        let flag = |key| value(key).is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let duration = |key| -> object_store::Result<Option<Duration>> {
            value(key)
                .map(|v| humantime::parse_duration(&v).map_err(|e| generic(format!("{v:?} is not a duration: {e}"))))
                .transpose()
        };
        let scope = self.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            let from = attempt.previous().last().cloned();
            if attempt.previous().len() > MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            match from {
                Some(from) if scope.allows(&from, attempt.url()) => attempt.follow(),
                Some(from) => {
                    let refused =
                        format!("refused a redirect from {from} to {}: outside the object store", attempt.url());
                    attempt.error(refused)
                }
                None => attempt.stop(),
            }
        });
        let mut builder = reqwest::Client::builder()
            .redirect(policy)
            .user_agent(
                value(ClientConfigKey::UserAgent)
                    .unwrap_or_else(|| concat!("zarrgate/", env!("CARGO_PKG_VERSION")).into()),
            )
            // Sizes are checked against Content-Length: never let the client decompress.
            .no_gzip()
            .no_brotli()
            .no_zstd()
            .no_deflate()
            .https_only(!flag(ClientConfigKey::AllowHttp))
            .tls_danger_accept_invalid_certs(flag(ClientConfigKey::AllowInvalidCertificates));
        if let Some(t) = duration(ClientConfigKey::Timeout)? {
            builder = builder.timeout(t);
        }
        if let Some(t) = duration(ClientConfigKey::ConnectTimeout)? {
            builder = builder.connect_timeout(t);
        }
        if let Some(t) = duration(ClientConfigKey::ReadTimeout)? {
            builder = builder.read_timeout(t);
        }
        if let Some(t) = duration(ClientConfigKey::PoolIdleTimeout)? {
            builder = builder.pool_idle_timeout(t);
        }
        if let Some(n) = value(ClientConfigKey::PoolMaxIdlePerHost) {
            builder = builder.pool_max_idle_per_host(usize::from_str(&n).map_err(|e| generic(e.to_string()))?);
        }
        if flag(ClientConfigKey::Http1Only) {
            builder = builder.http1_only();
        }
        if flag(ClientConfigKey::Http2Only) {
            builder = builder.http2_prior_knowledge();
        }
        if let Some(proxy) = value(ClientConfigKey::ProxyUrl) {
            let mut proxy = reqwest::Proxy::all(&proxy).map_err(|e| generic(e.to_string()))?;
            if let Some(excludes) = value(ClientConfigKey::ProxyExcludes) {
                proxy = proxy.no_proxy(reqwest::NoProxy::from_string(&excludes));
            }
            builder = builder.proxy(proxy);
        }
        let client = builder.build().map_err(|e| generic(e.to_string()))?;
        Ok(HttpClient::new(Counted { client, sent: self.sent.clone() }))
    }
}

/// The client, counting what it sends: object_store retries inside one call (`sources.retries`),
/// and only this layer sees each attempt.
#[derive(Debug)]
struct Counted {
    client: reqwest::Client,
    sent: Sent,
}

#[async_trait::async_trait]
impl HttpService for Counted {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        if let Some(sent) = self.sent.get() {
            sent.inc();
        }
        self.client.call(req).await
    }
}

fn generic(message: String) -> object_store::Error {
    object_store::Error::Generic { store: "zarrgate", source: message.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_stay_inside_the_object_store() {
        let u = |s: &str| Url::parse(s).unwrap();
        let http = ConfinedConnector::under(u("http://files.example.org/data/"));
        assert!(http.allows(&u("http://files.example.org/data/a.nc"), &u("http://files.example.org/data/v2/a.nc")));
        assert!(!http.allows(&u("http://files.example.org/data/a.nc"), &u("http://files.example.org/admin/")));
        assert!(!http.allows(&u("http://files.example.org/data/a.nc"), &u("http://169.254.169.254/latest/")));
        let bucket = ConfinedConnector::same_origin();
        assert!(bucket.allows(&u("https://s3.amazonaws.com/b/k"), &u("https://s3.amazonaws.com/b/k2")));
        assert!(!bucket.allows(&u("https://s3.amazonaws.com/b/k"), &u("http://s3.amazonaws.com/b/k")));
        assert!(!bucket.allows(&u("http://127.0.0.1:9000/b/k"), &u("http://127.0.0.1:9001/b/k")));
    }
}
