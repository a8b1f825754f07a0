//! The error page a browser gets: an error answer (`application/problem+json`) to a request that
//! explicitly accepts `text/html` is shown as a page, with the problem's title, detail and
//! problems escaped, links back to the store and to the list of stores, and the same policy as
//! every page. Every other client keeps the problem as JSON.

use std::fmt::Write;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

use super::{STYLE, encode, escape, secure, wants_page};

/// Bytes of a problem read at most (problems are small; a larger one stays JSON).
const PROBLEM_BYTES: usize = 64 * 1024;

/// The data plane's layer: its error answers as pages for a browser ([`error_page`]); any other
/// request passes untouched.
pub(in crate::http) async fn error_pages(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if !wants_page(request.headers()) {
        return next.run(request).await;
    }
    let (headers, path) = (request.headers().clone(), request.uri().path().to_owned());
    error_page(next.run(request).await, &headers, &path).await
}

/// `response` as a page when it is an error (problem+json) and `request` asks for `text/html`;
/// `path` is the request's path (`/{store}/...`), from which the links back are made relative.
pub(in crate::http) async fn error_page(response: Response, request: &axum::http::HeaderMap, path: &str) -> Response {
    let status = response.status();
    // Every read through the router bypass comes here: a success leaves at the first test.
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if !is_problem || !wants_page(request) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, PROBLEM_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let problem: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let page = render(status, &problem, path);
    let h = &mut parts.headers;
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(page.len()));
    h.insert(header::VARY, HeaderValue::from_static("accept"));
    secure(h);
    Response::from_parts(parts, Body::from(page))
}

fn render(status: StatusCode, problem: &Value, path: &str) -> String {
    let text = |k: &str| problem.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let title = match text("title") {
        t if t.is_empty() => status.canonical_reason().unwrap_or("error").to_owned(),
        t => t,
    };
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{} {}</title><style>{STYLE}</style></head>\n<body>\n<header>zarrgate</header>\n<main><section>\n\
         <h2>{} {}</h2>\n<p id=\"detail\">{}</p>\n",
        status.as_u16(),
        escape(&title),
        status.as_u16(),
        escape(&title),
        escape(&text("detail"))
    );
    if let Some(Value::Array(problems)) = problem.get("problems") {
        out.push_str("<ul>\n");
        for p in problems {
            let _ = writeln!(out, "<li>{}</li>", escape(p.as_str().unwrap_or_default()));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("<p>");
    let (store, root) = links(path);
    if let Some((store, name)) = store {
        let _ = write!(out, "Back to <a id=\"store\" href=\"{}\">store {}</a>; ", escape(&store), escape(&name));
    }
    let _ = write!(out, "<a id=\"stores\" href=\"{}\">all stores</a>", escape(&root));
    out.push_str(
        "</p>\n<p class=\"dim\">Zarr and HTTP clients get this problem as JSON \
                  (<code>application/problem+json</code>).</p>\n</section></main></body></html>\n",
    );
    out
}

/// The relative links from the page at `path` to its store's root page (and the store's name as
/// the URL writes it), if the path names one, and to the list of stores.
fn links(path: &str) -> (Option<(String, String)>, String) {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (segment, below) = match rest.split_once('/') {
        Some((segment, below)) => (segment, Some(below)),
        None => (rest, None),
    };
    if segment.is_empty() {
        return (None, "./".into());
    }
    let name = percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned();
    match below {
        // `/{store}`: the page's directory is the root
        None => (Some((format!("./{}/", encode(&name)), name)), "./".into()),
        Some(below) => {
            let up = "../".repeat(below.matches('/').count());
            (Some((format!("./{up}"), name)), format!("./{up}../"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_links_back_are_relative_to_where_the_page_is() {
        let store = |s: &str, n: &str| Some((s.to_owned(), n.to_owned()));
        assert_eq!(links("/"), (None, "./".into()));
        assert_eq!(links("/era5"), (store("./era5/", "era5"), "./".into()));
        assert_eq!(links("/era5/"), (store("./", "era5"), "./../".into()));
        assert_eq!(links("/era5@3/zarr.json"), (store("./", "era5@3"), "./../".into()));
        assert_eq!(links("/era5/a/b/"), (store("./../../", "era5"), "./../../../".into()));
        assert_eq!(links("/era5/a/c/0"), (store("./../../", "era5"), "./../../../".into()));
    }

    #[test]
    fn the_problem_is_escaped() {
        let problem = serde_json::json!({"title": "Not Found", "detail": "no group or array at \"<script>x</script>\"",
                                         "problems": ["<b>one</b>"]});
        let page = render(StatusCode::NOT_FOUND, &problem, "/era5/x/");
        assert!(page.contains("<h2>404 Not Found</h2>"), "{page}");
        assert!(page.contains("no group or array at &quot;&lt;script&gt;x&lt;/script&gt;&quot;"), "{page}");
        assert!(page.contains("<li>&lt;b&gt;one&lt;/b&gt;</li>"), "{page}");
        assert!(!page.contains("<script"), "{page}");
        assert!(page.contains("href=\"./../\">store era5</a>"), "{page}");
    }
}
