//! The joined coordinate's values, read when `combine` needs them: files joined with `"order":
//! "coordinate"` are sorted by its first value, and files that write it in different units have
//! it converted into the first file's (`combine/time.rs`). Only then: a join by references reads
//! no data.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use super::combine::{Combine, time};
use super::invalid;
use super::read::ReadFile;
use crate::formats::{Chunk, Node};
use crate::sources::SourceRegistry;
use crate::versions::error::Result;

/// Coordinates read at once.
const CONCURRENCY: usize = 16;

/// Reads what `combine` needs of `files`' joined coordinate: sorts `files` when it says
/// `"order": "coordinate"`, and answers every file's values (in the new order) when the files
/// write the coordinate in different units; `None` when a join by references needs nothing.
pub(super) async fn prepare(
    sources: &SourceRegistry,
    files: &mut Vec<ReadFile>,
    combine: &Combine,
) -> Result<Option<Vec<Vec<f64>>>> {
    let Combine::Existing { dim, by_coordinate } = combine else { return Ok(None) };
    let coordinate = |f: &ReadFile| f.parsed.nodes.get(dim.as_str()).filter(|n| n.chunks.len() <= 4096).cloned();
    let nodes: Vec<Option<Node>> = files.iter().map(coordinate).collect();
    let present: Vec<&Node> = nodes.iter().flatten().collect();
    let differ = present.len() == files.len() && time::differ(&present);
    if !by_coordinate && !differ {
        return Ok(None);
    }
    if let Some(i) = nodes.iter().position(Option::is_none) {
        return Err(invalid(format!(
            "{} has no coordinate variable {dim} (a 1-d array named as its dimension, of at most 4096 chunks) to \
             order the files by or convert",
            files[i].record.url
        )));
    }
    // Boxed: a stream of unboxed borrowing futures is not seen as Send by the router.
    let reads: Vec<BoxFuture<'_, Result<Vec<f64>>>> =
        files.iter().zip(nodes.iter().flatten()).map(|(file, node)| values(sources, file, node).boxed()).collect();
    let mut values: Vec<Vec<f64>> = futures::stream::iter(reads)
        .buffered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
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
    Ok(differ.then_some(values))
}

/// The values of `file`'s coordinate `node`, its chunks read through the sources.
async fn values(sources: &SourceRegistry, file: &ReadFile, node: &Node) -> Result<Vec<f64>> {
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
    time::decode_values(node, &chunks).map_err(|why| invalid(format!("coordinate {} of {url}: {why}", name(node))))
}

fn name(node: &Node) -> String {
    node.metadata
        .get("dimension_names")
        .and_then(|d| d.get(0))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?")
        .to_owned()
}
