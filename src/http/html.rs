//! What every HTML answer shares (the store browser's pages, the HTML listings, the error pages a
//! browser gets): escaping, relative links that cannot leave the server's origin, the pages' one
//! style sheet and one script (`html/page.css`, `html/page.js`), and the headers that keep a
//! name from a store from ever running as script: a strict `Content-Security-Policy` admitting
//! only that style and that script by their SHA-256 hashes, and `X-Content-Type-Options`.
//! A node can be named anything an HDF5 or netCDF file can name a group
//! (`javascript:alert(1)<!--`, `"><img src=x onerror=...>`): names are escaped in text and
//! attributes, percent-encoded in links (`:` too), and every link of a page starts with `./`,
//! so that no name can become a URL scheme.

mod problem;

use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderValue, header};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use sha2::{Digest, Sha256};

pub(super) use problem::{error_page, error_pages};

/// The pages' style sheet, written into each page's `<style>` as is.
pub(super) const STYLE: &str = include_str!("html/page.css");
/// The pages' script, written into each page's `<script>` as is: it reads no value of a store
/// but from the page's elements.
pub(super) const SCRIPT: &str = include_str!("html/page.js");

/// What may not appear unescaped in one segment of a URL path: the url crate's set, and `\`
/// (which browsers read as `/`), `'` and `:` (a first segment with a `:` would be a scheme).
pub(super) const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'?')
    .add(b'{')
    .add(b'}')
    .add(b'/')
    .add(b'%')
    .add(b'\\')
    .add(b'\'')
    .add(b':');

/// The policy of every HTML answer: nothing but the pages' own style and script (by hash),
/// images and `fetch` from this server, no frame around it, no `<base>`, no form.
static POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let policy = format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; img-src 'self'; connect-src 'self'; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        hash(SCRIPT),
        hash(STYLE)
    );
    HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("default-src 'none'"))
});

/// A CSP hash source of an inline element's text.
fn hash(text: &str) -> String {
    use base64::Engine;
    format!("sha256-{}", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes())))
}

/// Adds the security headers of an HTML answer to `headers`.
pub(super) fn secure(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, POLICY.clone());
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
}

/// True when the request explicitly accepts `text/html` (a browser does; fsspec sends `*/*`
/// and keeps the plain listing).
pub(super) fn wants_page(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|v| v.contains("text/html"))
}

/// A relative key as a URL path: each segment percent-encoded.
pub(super) fn encode(name: &str) -> String {
    name.split('/').map(|s| utf8_percent_encode(s, SEGMENT).to_string()).collect::<Vec<_>>().join("/")
}

/// The link (an attribute value, escaped) from a page to node directory `path` (`""` for the
/// directory `up` leads to): `./` + `up` + the path's segments percent-encoded + `/`. The `./`
/// keeps a name such as `javascript:...` a path, never a scheme.
pub(super) fn href(up: &str, path: &str) -> String {
    let path = if path.is_empty() { String::new() } else { format!("{}/", encode(path)) };
    escape(&format!("./{up}{path}"))
}

/// `text` safe in HTML text and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_for_urls_and_html() {
        assert_eq!(encode("a b/c#d/"), "a%20b/c%23d/");
        assert_eq!(encode("zarr.json"), "zarr.json");
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn a_link_never_becomes_a_scheme_or_leaves_its_attribute() {
        assert_eq!(href("", "javascript:alert(document.domain)<!--"), "./javascript%3Aalert(document.domain)%3C!--/");
        assert_eq!(href("../", "\"><img src=x onerror=alert(1)>"), "./../%22%3E%3Cimg%20src=x%20onerror=alert(1)%3E/");
        assert_eq!(href("", "a?b#c%d e/f"), "./a%3Fb%23c%25d%20e/f/");
        assert_eq!(href("", "it's\\x"), "./it%27s%5Cx/");
        assert_eq!(href("", "été"), "./%C3%A9t%C3%A9/");
        assert_eq!(href("../../", ""), "./../../");
        assert_eq!(href("", ""), "./");
        assert_eq!(href("", "a&b"), "./a&amp;b/", "escaped for the attribute");
    }

    #[test]
    fn the_policy_admits_only_the_pages_own_style_and_script() {
        let mut headers = HeaderMap::new();
        secure(&mut headers);
        let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        for part in ["default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"] {
            assert!(policy.contains(part), "{part} in {policy}");
        }
        assert!(!policy.contains("unsafe"), "{policy}");
        // the hashes are those of the text written into the pages (as a browser computes them)
        assert!(policy.contains(&format!("script-src '{}'", hash(SCRIPT))), "{policy}");
        assert_eq!(hash(""), "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
}
