//! The "Files" section of the root page of a store made from files (`?format=files`): the files
//! of the version shown, a page of them at a time (`?files_page=N`), each with the parser that
//! read it, its size and ETag, and how they were joined (the other pages' files are not read).
//! The API pages them too: `GET /api/v1/stores/{store}?files_offset=N&files_limit=M`.

use std::fmt::Write;

use serde_json::Value;

use super::super::html::escape;
use crate::app::AppState;
use crate::versions::VersionView;
use crate::versions::files::{Origin, OriginPage};

/// Files listed on one page.
pub(super) const PER_PAGE: usize = 100;

/// The page of files `query` asks for (`files_page=N`, from 1).
pub(super) fn page_of(query: Option<&str>) -> usize {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("files_page="))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// Writes the section for `view` when its version was made from files; nothing otherwise.
pub(super) async fn section(out: &mut String, app: &AppState, view: &VersionView, page: usize) {
    let text = match app.catalog.origin(view.head.id).await {
        Ok(text) => text,
        Err(e) => {
            let _ = writeln!(out, "<h3>Files</h3>\n<p>The files cannot be listed now: {}</p>", escape(&e.to_string()));
            return;
        }
    };
    // The page's files only: the others are not read (a page past the last reads the last).
    let Some(text) = text else { return };
    let (catalog, version) = (&*app.catalog, view.head.id);
    let read = |page: usize| Origin::page(catalog, version, &text, (page - 1).saturating_mul(PER_PAGE), PER_PAGE);
    let unreadable = |out: &mut String, e: crate::versions::Error| {
        let _ = writeln!(out, "<h3>Files</h3>\n<p>The files cannot be listed now: {}</p>", escape(&e.to_string()));
    };
    let Some(OriginPage { mut origin, mut total, .. }) = (match read(page).await {
        Ok(found) => found,
        Err(e) => return unreadable(out, e),
    }) else {
        return;
    };
    let pages = total.div_ceil(PER_PAGE).max(1);
    let page = page.min(pages);
    if origin.files.is_empty() && total > 0 {
        match read(page).await {
            Ok(Some(last)) => (origin, total) = (last.origin, last.total),
            Ok(None) => return,
            Err(e) => return unreadable(out, e),
        }
    }
    let first = (page - 1) * PER_PAGE;
    let join = match &origin.combine {
        Some(spec) => format!("joined as <code>{}</code>", escape(&Value::to_string(spec))),
        None => "one file".to_owned(),
    };
    let _ = writeln!(
        out,
        "<h3>Files</h3>\n<p id=\"files\">{total} file(s), read by zarrgate (parser {}), {join}. Chunks that span a seam \
         between files are assembled when read (the array pages count them).</p>",
        escape(&origin.parser)
    );
    out.push_str(
        "<table id=\"files-list\"><tr><th>#</th><th>file</th><th>parser</th><th>bytes</th><th>ETag</th></tr>\n",
    );
    for (i, file) in origin.files.iter().enumerate().map(|(i, f)| (first + i, f)) {
        let size = file.facts.size.map_or_else(String::new, |s| s.to_string());
        let etag = file.facts.etag.as_deref().unwrap_or("");
        let parser = if file.cached { format!("{} (parsed before)", file.parser) } else { file.parser.clone() };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{size}</td><td><code>{}</code></td></tr>",
            i + 1,
            escape(&file.url),
            escape(&parser),
            escape(etag)
        );
    }
    out.push_str("</table>\n");
    if pages > 1 {
        let link = |n: usize, text: &str| format!("<a href=\"?files_page={n}\">{text}</a>");
        let mut nav = Vec::new();
        if page > 1 {
            nav.push(link(page - 1, "previous"));
        }
        nav.push(format!("page {page} of {pages}"));
        if page < pages {
            nav.push(link(page + 1, "next"));
        }
        let _ = writeln!(out, "<p class=\"dim\" id=\"files-pages\">{}</p>", nav.join(" · "));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_is_read_from_the_query() {
        assert_eq!(super::page_of(None), 1);
        assert_eq!(super::page_of(Some("files_page=3")), 3);
        assert_eq!(super::page_of(Some("a=1&files_page=2")), 2);
        assert_eq!(super::page_of(Some("files_page=0")), 1);
        assert_eq!(super::page_of(Some("files_page=x")), 1);
    }
}
