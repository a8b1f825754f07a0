//! The control plane's answers as text for a person: summaries, tables, verdicts.

use indicatif::HumanBytes;
use serde_json::Value;

fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn number(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A store's summary, as registration, PATCH and `GET /api/v1/stores/{store}` answer it.
/// `what` says what happened ("registered air (new store)"), `server` completes its URL.
pub fn summary(what: &str, s: &Value, server: &str) -> String {
    let mut out = format!("{what}, version {}: {server}{}\n", text(s, "version"), text(s, "url"));
    out.push_str(&format!(
        "  {}, {}; chunks: {} virtual, {} inline, {} missing\n",
        plural(number(s, "/arrays"), "array", "arrays"),
        plural(number(s, "/groups"), "group", "groups"),
        number(s, "/chunks/virtual"),
        number(s, "/chunks/inline"),
        number(s, "/chunks/missing"),
    ));
    out.push_str(&format!(
        "  {}, {} referenced, {} inline; missing chunks answer {}\n",
        plural(number(s, "/sources"), "source", "sources"),
        HumanBytes(number(s, "/referenced_bytes")),
        HumanBytes(number(s, "/inline_bytes")),
        if text(s, "missing_chunks") == "fill" { "the fill value" } else { "404" },
    ));
    out.push_str(&format!("  created {}, updated {}\n", text(s, "created_at"), text(s, "updated_at")));
    if let Some(ice) = s["icechunk"].as_object() {
        let reference = ["branch", "tag", "snapshot"]
            .iter()
            .find_map(|k| ice.get(*k).and_then(Value::as_str).map(|v| format!("{k} {v}")))
            .unwrap_or_default();
        let snapshot = ice.get("snapshot_id").and_then(Value::as_str).unwrap_or_default();
        let repository = ice.get("repository").and_then(Value::as_str).unwrap_or_default();
        out.push_str(&format!("  icechunk: {repository}, {reference}, snapshot {snapshot}\n"));
    }
    for warning in s["warnings"].as_array().into_iter().flatten() {
        out.push_str(&format!("  warning: {}\n", warning.as_str().unwrap_or_default()));
    }
    out
}

/// Rows under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells.zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(&mut header.iter().copied());
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `GET /api/v1/stores`, every page: one row per store.
pub fn stores(stores: &[Value]) -> String {
    if stores.is_empty() {
        return "no stores\n".into();
    }
    let rows: Vec<Vec<String>> = stores
        .iter()
        .map(|s| {
            let chunks = number(s, "/chunks/virtual") + number(s, "/chunks/inline");
            vec![
                text(s, "name"),
                text(s, "version"),
                number(s, "/arrays").to_string(),
                chunks.to_string(),
                HumanBytes(number(s, "/referenced_bytes")).to_string(),
                text(s, "updated_at"),
            ]
        })
        .collect();
    table(&["NAME", "VERSION", "ARRAYS", "CHUNKS", "REFERENCED", "UPDATED"], &rows)
}

/// An object store as the control plane shows it (secrets already `***`).
pub fn object_store(what: &str, o: &Value) -> String {
    let mut out = format!("{what}: {} ({})\n", text(o, "url"), text(o, "origin"));
    if let Some(options) = o["options"].as_object() {
        for (key, value) in options {
            out.push_str(&format!("  {key} = {}\n", value.as_str().map_or_else(|| value.to_string(), str::to_owned)));
        }
    }
    out
}

/// `GET /api/v1/object-stores`: one row per object store.
pub fn object_stores(list: &[Value]) -> String {
    if list.is_empty() {
        return "no object stores\n".into();
    }
    let rows: Vec<Vec<String>> =
        list.iter().map(|o| vec![text(o, "name"), text(o, "url"), text(o, "origin")]).collect();
    table(&["NAME", "URL", "ORIGIN"], &rows)
}

/// `POST /api/v1/stores/{store}/verify`: the counts, then each source that is not `ok`.
pub fn verdict(v: &Value) -> String {
    let mut out = format!(
        "{} version {}: {} ok, {} modified, {} missing, {} errors, {} unverified\n",
        text(v, "store"),
        text(v, "version"),
        number(v, "/ok"),
        number(v, "/modified"),
        number(v, "/missing"),
        number(v, "/errors"),
        number(v, "/unverified"),
    );
    for source in v["sources"].as_array().into_iter().flatten() {
        let status = text(source, "status");
        if status == "ok" {
            continue;
        }
        let detail = text(source, "detail");
        let why = if detail.is_empty() { String::new() } else { format!(": {detail}") };
        out.push_str(&format!("  {status:<10} {}{why}\n", text(source, "url")));
    }
    out
}

/// Whether a verdict found a source that no longer reads as registered.
pub fn verdict_failed(v: &Value) -> bool {
    number(v, "/modified") + number(v, "/missing") + number(v, "/errors") > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_summary_reads_as_sentences() {
        let s = json!({"name": "air", "version": 3, "url": "/air", "arrays": 1, "groups": 1,
            "chunks": {"virtual": 6, "inline": 1, "missing": 2}, "sources": 1,
            "referenced_bytes": 3 << 20, "inline_bytes": 10, "missing_chunks": "404",
            "created_at": "c", "updated_at": "u", "warnings": ["array air: codec numcodecs.lz4"]});
        let text = summary("registered air (new store)", &s, "http://127.0.0.1:8080");
        assert_eq!(
            text,
            "registered air (new store), version 3: http://127.0.0.1:8080/air\n  \
             1 array, 1 group; chunks: 6 virtual, 1 inline, 2 missing\n  \
             1 source, 3.00 MiB referenced, 10 B inline; missing chunks answer 404\n  \
             created c, updated u\n  warning: array air: codec numcodecs.lz4\n"
        );
    }

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![vec!["a".into(), "long value".into()], vec!["bbb".into(), "x".into()]];
        assert_eq!(table(&["NAME", "URL"], &rows), "NAME  URL\na     long value\nbbb   x\n");
    }
}
