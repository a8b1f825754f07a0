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
use super::read::{MAX_CHUNKS, ReadFile};
use crate::formats::{Chunk, Node};
use crate::sources::SourceRegistry;
use crate::versions::error::Result;

/// Coordinates read at once, and made ready to be read at once.
const CONCURRENCY: usize = 16;
const BATCH: usize = 512;

/// A file's coordinate values, or why they cannot be decoded.
type Decoded = std::result::Result<Vec<f64>, String>;

/// Values a joined coordinate may have (across every file) to be stored inline when nothing
/// else needs it read: 8 MiB as float64. Past it, the coordinate is joined as the other
/// variables are.
const MAX_INLINE_VALUES: u64 = 1 << 20;

/// Reads what `combine` needs of `files`' joined coordinate: sorts `files` when it says
/// `"order": "coordinate"`, and answers every file's values (in the new order) to be
/// concatenated inline; `None` when the coordinate is joined as the other variables are (some
/// file has none, it is too long to store inline, or its values cannot be decoded and nothing
/// else needs them).
pub(super) async fn prepare(
    sources: &SourceRegistry,
    files: &mut Vec<ReadFile>,
    combine: &Combine,
) -> Result<Option<Vec<Vec<f64>>>> {
    let Combine::Existing { dim, by_coordinate } = combine else { return Ok(None) };
    let coordinate = |f: &ReadFile| {
        f.parsed.nodes.get(dim.as_str()).filter(|n| is_coordinate(dim, n) && n.chunks.len() <= MAX_CHUNKS).cloned()
    };
    let nodes: Vec<Option<Node>> = files.iter().map(coordinate).collect();
    let present: Vec<&Node> = nodes.iter().flatten().collect();
    let every = present.len() == files.len();
    let differ = every && time::differ(&present);
    let total: u64 = present
        .iter()
        .map(|n| n.metadata.get("shape").and_then(|s| s.get(0)).and_then(Value::as_u64).unwrap_or(0))
        .sum();
    let inline = every && total <= MAX_INLINE_VALUES;
    let needed = *by_coordinate || differ;
    if !needed && !inline {
        return Ok(None);
    }
    if let Some(i) = nodes.iter().position(Option::is_none) {
        return Err(invalid(format!(
            "{} has no coordinate variable {dim} (a 1-d array named as its dimension, of at most {MAX_CHUNKS} chunks) \
             to order the files by or convert",
            files[i].record.url
        )));
    }
    // Boxed: a stream of unboxed borrowing futures is not seen as Send by the router. Made a
    // batch at a time: 100,000 made at once took 16 MB.
    let pairs: Vec<(&ReadFile, &Node)> = files.iter().zip(nodes.iter().flatten()).collect();
    let mut read: Vec<Decoded> = Vec::with_capacity(pairs.len());
    for batch in pairs.chunks(BATCH) {
        let reads: Vec<BoxFuture<'_, Result<Decoded>>> =
            batch.iter().map(|(file, node)| values(sources, file, dim, node).boxed()).collect();
        for outcome in futures::stream::iter(reads).buffered(CONCURRENCY).collect::<Vec<_>>().await {
            read.push(outcome?);
        }
    }
    let mut values = Vec::with_capacity(read.len());
    for (file, outcome) in files.iter().zip(read) {
        match outcome {
            Ok(v) => values.push(v),
            Err(why) if needed => return Err(invalid(format!("coordinate {dim} of {}: {why}", file.record.url))),
            Err(why) => {
                tracing::info!(file = %file.record.url, coordinate = %dim, problem = %why,
                    "a joined coordinate cannot be decoded: joined by references instead of inline");
                return Ok(None);
            }
        }
    }
    if *by_coordinate {
        let urls: Vec<&str> = files.iter().map(|f| f.record.url.as_str()).collect();
        let keyed: Vec<(&Node, &[f64])> = nodes.iter().flatten().zip(&values).map(|(n, v)| (n, v.as_slice())).collect();
        let order = time::order(&urls, &keyed).map_err(|why| invalid(format!("ordering by {dim}: {why}")))?;
        let mut taken: Vec<Option<(ReadFile, Vec<f64>)>> = files.drain(..).zip(values).map(Some).collect();
        let mut sorted = Vec::with_capacity(taken.len());
        for i in order {
            if let Some(pair) = taken[i].take() {
                sorted.push(pair);
            }
        }
        let (f, v): (Vec<_>, Vec<_>) = sorted.into_iter().unzip();
        *files = f;
        values = v;
    }
    Ok((differ || inline).then_some(values))
}

/// The values of `file`'s coordinate `node` (at `path`), its chunks taken from what its parse
/// held or read through the sources; the inner error says why they cannot be decoded.
async fn values(sources: &SourceRegistry, file: &ReadFile, path: &str, node: &Node) -> Result<Decoded> {
    if let Some((_, values)) = file.parsed.held.iter().find(|(p, _)| p == path) {
        return Ok(Ok(values.clone()));
    }
    let url = &file.record.url;
    let check = file.record.facts.read_check();
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
