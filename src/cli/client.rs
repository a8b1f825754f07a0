//! The control plane of a running server, as the command line reaches it: requests with the
//! admin token, answers read as JSON, refusals read from their `application/problem+json`.

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// What a command can fail with; each says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The server answered with an error status.
    #[error("{status}: {detail}")]
    Refused {
        /// Its status.
        status: StatusCode,
        /// The problem's `detail` (or the body, when it is not a problem).
        detail: String,
        /// Every problem a `422` listed.
        problems: Vec<String>,
        /// The body as it came, for `--json`.
        body: Value,
    },
    /// No answer: the server is not there, or the connection broke.
    #[error("no answer from {server}: {cause}")]
    Unreachable {
        /// The server asked.
        server: String,
        /// Why, with its causes.
        cause: String,
    },
    /// A local file could not be read or written.
    #[error("{0}")]
    File(String),
    /// An argument that cannot be used.
    #[error("{0}")]
    Usage(String),
    /// The answer is not what the control plane sends.
    #[error("unexpected answer from {server}: {what}")]
    Unexpected {
        /// The server asked.
        server: String,
        /// What was wrong with it.
        what: String,
    },
}

impl Failure {
    /// What the operator can do about it, when there is something to say.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Self::Refused { status: StatusCode::UNAUTHORIZED, .. } => {
                Some("the server has admin tokens: set ZARRGATE_TOKEN to one of them")
            }
            Self::Unreachable { .. } => {
                Some("is the server running there? Start it with `zarrgate`, or point --server (ZARRGATE_SERVER) at it")
            }
            _ => None,
        }
    }
}

/// A server's control plane.
pub struct Api {
    /// `http://host:port`, without a trailing slash.
    server: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Api {
    /// The control plane of `server`, with an admin `token` if given.
    pub fn new(server: &str, token: Option<String>) -> Result<Self, Failure> {
        let server = server.trim_end_matches('/').to_owned();
        let parsed = url::Url::parse(&server)
            .map_err(|e| Failure::Usage(format!("--server {server:?} is not a URL ({e}): use http://host:port")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Failure::Usage(format!("--server {server:?} must be an http:// or https:// URL")));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| Failure::Unreachable { server: server.clone(), cause: chain(&e) })?;
        Ok(Self { server, token: token.filter(|t| !t.is_empty()), http })
    }

    /// The server's address, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// A request to `path` (under the server, starting with `/`), with the token.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.server));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request`; an error status becomes [`Failure::Refused`].
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, Failure> {
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
        let detail = body.get("detail").and_then(Value::as_str).map_or_else(|| text.trim().to_owned(), str::to_owned);
        let problems = body
            .get("problems")
            .and_then(Value::as_array)
            .map(|list| list.iter().map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned)).collect())
            .unwrap_or_default();
        Err(Failure::Refused { status, detail, problems, body })
    }

    /// Sends `request` and reads its JSON answer (`null` for an empty one).
    pub async fn json(&self, request: reqwest::RequestBuilder) -> Result<Value, Failure> {
        let response = self.send(request).await?;
        self.read_json(response).await
    }

    /// The JSON body of a successful answer (`null` for an empty one).
    pub async fn read_json(&self, response: reqwest::Response) -> Result<Value, Failure> {
        let bytes = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| Failure::Unexpected {
            server: self.server.clone(),
            what: format!("the body is not JSON ({e})"),
        })
    }

    /// The failure of a request that got no (complete) answer.
    pub fn unreachable(&self, e: &reqwest::Error) -> Failure {
        Failure::Unreachable { server: self.server.clone(), cause: chain(e) }
    }
}

/// An error with its causes, `a: b: c` (reqwest's own message alone says only "error sending
/// request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}
