//! `GET /` for a browser: the stores a reader may see (the route sits behind the data plane's
//! read-token middleware), a page at a time.

use std::fmt::Write;

use axum::http::HeaderMap;
use axum::response::Response;

use super::super::answer::Served;
use super::super::html::{encode, escape, href};
use super::{html_response, rfc3339, shell_start};
use crate::app::AppState;
use crate::error::ApiError;

/// Stores on one page.
const STORES_PER_PAGE: u32 = 100;

/// `GET /` for a browser: the stores, a page at a time (`?after=<name>`).
pub(in crate::http) async fn root(
    app: &AppState,
    query: Option<&str>,
    headers: &HeaderMap,
    served: &Served,
) -> Result<Response, ApiError> {
    let after = query.into_iter().flat_map(|q| q.split('&')).find_map(|p| p.strip_prefix("after="));
    let after = after.map(|a| percent_encoding::percent_decode_str(a).decode_utf8_lossy().into_owned());
    let stores = app.stores.list(after.as_deref(), STORES_PER_PAGE).await?;
    let mut out = shell_start("stores");
    out.push_str(
        "<header>zarrgate: stores</header>\n<main><section>\n<table><tr><th>store</th><th>version</th>\
                  <th>arrays</th><th>groups</th><th>chunks (virtual / inline / missing)</th><th>updated</th></tr>\n",
    );
    for s in &stores {
        let c = &s.summary.chunks;
        let _ = writeln!(
            out,
            "<tr><td><a href=\"{}\">{name}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{} / {} / {}</td><td>{}</td></tr>",
            href("", &s.head.store),
            s.head.id,
            s.summary.arrays,
            s.summary.groups,
            c.virtual_,
            c.inline,
            c.missing,
            rfc3339(s.head.created_at_ms),
            name = escape(&s.head.store)
        );
    }
    out.push_str("</table>\n");
    if stores.is_empty() {
        out.push_str("<p>No stores here.</p>\n");
    }
    if let Some(last) = stores.last().filter(|_| stores.len() == STORES_PER_PAGE as usize) {
        let _ = writeln!(out, "<p><a href=\"./?after={}\">next page</a></p>", escape(&encode(&last.head.store)));
    }
    out.push_str("</section></main></body></html>\n");
    Ok(html_response(out, 0, headers, served))
}
