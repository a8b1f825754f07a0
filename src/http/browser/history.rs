//! The "Versions" section of a store's pages: the version shown, the store's newest versions
//! (each a link to its pinned page, the current one marked), and the current version's counts.
//! The stores service is asked on every page (one bounded query): a page is never cached as
//! immutable, even under a pinned URL, since the list grows.

use std::fmt::Write;

use super::super::html::{escape, href};
use super::{display, rfc3339};
use crate::app::AppState;
use crate::versions::VersionView;
use crate::versions::stores::Versions;

/// Versions listed on a page at most (the newest).
const LISTED: u32 = 20;

/// Writes the section for `view`; `up` leads from the page to the store's root page.
pub(super) async fn section(out: &mut String, app: &AppState, view: &VersionView, up: &str) {
    let head = &view.head;
    let name = escape(&head.store);
    let _ = writeln!(
        out,
        "<h3>Versions</h3>\n<p>This page shows version {} of store {name}, registered {}; missing chunks answer {}. \
         Pinned, it never changes: <code>/{name}@{}/</code>.</p>",
        head.id,
        rfc3339(head.created_at_ms),
        if head.fill_missing { "their fill chunk" } else { "404 (read as fill values)" },
        head.id
    );
    match app.stores.versions(&head.store, LISTED).await {
        Ok(Versions { listed, more }) => {
            out.push_str("<table id=\"versions\"><tr><th>version</th><th>registered</th><th></th></tr>\n");
            for v in &listed {
                let mut notes = Vec::new();
                if v.current {
                    notes.push("current");
                }
                if v.head.id == head.id {
                    notes.push("shown here");
                }
                let pinned = format!("{}@{}", head.store, v.head.id);
                let _ = writeln!(
                    out,
                    "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
                    href(&format!("{up}../"), &pinned),
                    escape(&pinned),
                    rfc3339(v.head.created_at_ms),
                    notes.join(", "),
                );
            }
            out.push_str("</table>\n");
            let kept = if more { format!("the {LISTED} newest; ") } else { String::new() };
            let _ = writeln!(
                out,
                "<p class=\"dim\">{kept}<a href=\"{}\">/{name}/</a> always serves the current version; \
                 retention removes old versions (their URLs then answer 410).</p>",
                href(&format!("{up}../"), &head.store)
            );
        }
        Err(e) => {
            tracing::warn!(store = %head.store, error = %e, "cannot list the store's versions for its page");
            out.push_str("<p>The store's versions cannot be listed right now (the server's log says why).</p>\n");
        }
    }
    if let Ok(Some(record)) = app.stores.record(&head.store).await {
        let (s, c) = (&record.summary, &record.summary.chunks);
        let _ = writeln!(
            out,
            "<p id=\"counts\">Store (current version {}): {}, {}, chunks {} virtual / {} inline / {} missing, \
             {}, {} referenced.</p>",
            record.head.id,
            display::count(s.arrays, "array"),
            display::count(s.groups, "group"),
            c.virtual_,
            c.inline,
            c.missing,
            display::count(s.sources, "source"),
            display::size(s.referenced_bytes)
        );
    }
}
