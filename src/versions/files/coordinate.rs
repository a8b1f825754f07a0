//! The joined coordinate's values, read for `{"join": "existing"}`: concatenated and stored
//! inline (a client opening the store reads them in one request, not one piece per file), files
//! joined with `"order": "coordinate"` sorted by its first value, and files that write it in
//! different units converted into the first file's (`combine/time.rs`). Its chunks are read from
//! the values each file's parse decoded from bytes it held (`read::hold`): a join by references
//! otherwise reads no data.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde_json::Value;

use super::combine::{Combine, is_coordinate, time};
use super::invalid;
use super::read::MAX_CHUNKS;
use crate::formats::{Chunk, Node};
use crate::sources::SourceRegistry;
use crate::versions::error::Result;
use crate::zarr::source::SourceFacts;

/// Coordinates read at once, and made ready to be read at once.
const CONCURRENCY: usize = 16;
const BATCH: usize = 512;

/// A file's coordinate values, or why they cannot be decoded.
type Decoded = std::result::Result<Vec<f64>, String>;

/// Values a joined coordinate may have (across every file) to be stored inline when nothing
/// else needs it read: 8 MiB as float64. Past it, the coordinate is joined as the other
/// variables are.
const MAX_INLINE_VALUES: u64 = 1 << 20;

/// One file's part of the joined coordinate, as [`prepare`] reads it.
pub(super) struct Part<'a> {
    /// The file's URL.
    pub url: &'a str,
    /// The file's facts when it was read (its chunks are read checked against them; unchecked
    /// when there are none).
    pub facts: Option<&'a SourceFacts>,
    /// The file's array named as the joined dimension, if it has one.
    pub node: Option<&'a Node>,
    /// Its values, when the file's parse decoded them (`read::hold`).
    pub held: Option<&'a [f64]>,
}

/// What the joined coordinate's values settle.
#[derive(Debug, Default)]
pub(super) struct Prepared {
    /// Every file's values (in the order joined) to be concatenated inline; `None` when the
    /// coordinate is joined as the other variables are.
    pub values: Option<Vec<Vec<f64>>>,
    /// Under `"order": "coordinate"`, the files' order: the index of each, first to last.
    pub order: Option<Vec<usize>>,
}

/// Reads what `combine` needs of the files' joined coordinate (`parts`, one a file in the order
/// given): the order of the files when it says `"order": "coordinate"`, and every file's values
/// (in that order) to be concatenated inline, unless the coordinate is joined as the other
/// variables are (some file has none, it is too long to store inline, or its values cannot be
/// decoded and nothing else needs them).
pub(super) async fn prepare(sources: &SourceRegistry, parts: &[Part<'_>], combine: &Combine) -> Result<Prepared> {
    let Combine::Existing { dim, by_coordinate } = combine else { return Ok(Prepared::default()) };
    let nodes: Vec<Option<&Node>> =
        parts.iter().map(|p| p.node.filter(|n| is_coordinate(dim, n) && n.chunks.len() <= MAX_CHUNKS)).collect();
    let present: Vec<&Node> = nodes.iter().flatten().copied().collect();
    let every = present.len() == parts.len();
    let differ = every && time::differ(&present);
    let total: u64 = present
        .iter()
        .map(|n| n.metadata.get("shape").and_then(|s| s.get(0)).and_then(Value::as_u64).unwrap_or(0))
        .sum();
    let inline = every && total <= MAX_INLINE_VALUES;
    let needed = *by_coordinate || differ;
    if !needed && !inline {
        return Ok(Prepared::default());
    }
    if let Some(i) = nodes.iter().position(Option::is_none) {
        return Err(invalid(format!(
            "{} has no coordinate variable {dim} (a 1-d array named as its dimension, of at most {MAX_CHUNKS} chunks) \
             to order the files by or convert",
            parts[i].url
        )));
    }
    // Boxed: a stream of unboxed borrowing futures is not seen as Send by the router. Made a
    // batch at a time: 100,000 made at once took 16 MB.
    let pairs: Vec<(&Part<'_>, &Node)> = parts.iter().zip(nodes.iter().flatten().copied()).collect();
    let mut read: Vec<Decoded> = Vec::with_capacity(pairs.len());
    for batch in pairs.chunks(BATCH) {
        let reads: Vec<BoxFuture<'_, Result<Decoded>>> =
            batch.iter().map(|(part, node)| values(sources, part, node).boxed()).collect();
        for outcome in futures::stream::iter(reads).buffered(CONCURRENCY).collect::<Vec<_>>().await {
            read.push(outcome?);
        }
    }
    let mut values = Vec::with_capacity(read.len());
    for (part, outcome) in parts.iter().zip(read) {
        match outcome {
            Ok(v) => values.push(v),
            Err(why) if needed => return Err(invalid(format!("coordinate {dim} of {}: {why}", part.url))),
            Err(why) => {
                tracing::info!(file = %part.url, coordinate = %dim, problem = %why,
                    "a joined coordinate cannot be decoded: joined by references instead of inline");
                return Ok(Prepared::default());
            }
        }
    }
    let mut order = None;
    if *by_coordinate {
        let urls: Vec<&str> = parts.iter().map(|p| p.url).collect();
        let keyed: Vec<(&Node, &[f64])> =
            present.iter().copied().zip(&values).map(|(n, v)| (n, v.as_slice())).collect();
        let sorted = time::order(&urls, &keyed).map_err(|why| invalid(format!("ordering by {dim}: {why}")))?;
        let mut taken: Vec<Option<Vec<f64>>> = values.into_iter().map(Some).collect();
        values = sorted.iter().filter_map(|i| taken[*i].take()).collect();
        order = Some(sorted);
    }
    Ok(Prepared { values: (differ || inline).then_some(values), order })
}

/// The values of a file's coordinate `node`, taken from what its parse held or its chunks read
/// through the sources; the inner error says why they cannot be decoded.
async fn values(sources: &SourceRegistry, part: &Part<'_>, node: &Node) -> Result<Decoded> {
    if let Some(values) = part.held {
        return Ok(Ok(values.to_vec()));
    }
    let url = part.url;
    let check = part.facts.map_or(crate::zarr::source::SourceCheck::Unchecked, SourceFacts::read_check);
    let mut chunks = Vec::with_capacity(node.chunks.len());
    for (index, chunk) in &node.chunks {
        let j = index.first().copied().unwrap_or(0);
        let bytes = match chunk {
            Chunk::Range { offset, length } => {
                sources.fetch_bytes(url, *offset..offset + length, &check).await?.to_vec()
            }
            Chunk::Elsewhere { url: other, offset, length } => {
                let unchecked = crate::zarr::source::SourceCheck::Unchecked;
                sources.fetch_bytes(other, *offset..offset + length, &unchecked).await?.to_vec()
            }
            Chunk::Inline(bytes) => bytes.clone(),
            Chunk::Assembled(_) => continue,
        };
        chunks.push((j, Some(bytes)));
    }
    Ok(time::decode_values(node, &chunks))
}
