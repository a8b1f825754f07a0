//! One dataset as a Zarr array node: data type, codecs, fill value, chunk grid and chunks,
//! attributes; or a warning saying why it is left out.

use std::sync::Arc;

use hdf5_reader::messages::HdfMessage;
use hdf5_reader::messages::layout::DataLayout;
use hdf5_reader::object_header::ObjectHeader;
use hdf5_reader::{Attribute, Dataset, Hdf5File};
use serde_json::{Map, Value, json};

use super::chunks::{self, Chunking, Shape};
use super::types::ElementType;
use super::{attrs, codecs, invalid};
use crate::formats::{Chunk, FormatError, Limits, Node};

/// Builds array nodes, counting chunks and inline bytes over the whole file.
pub(super) struct Builder<'a> {
    pub hdf5: &'a Hdf5File,
    pub limits: &'a Limits,
    chunk_count: u64,
    inline_bytes: u64,
}

impl<'a> Builder<'a> {
    pub(super) fn new(hdf5: &'a Hdf5File, limits: &'a Limits) -> Self {
        Self { hdf5, limits, chunk_count: 0, inline_bytes: 0 }
    }

    /// The node of `dataset` at `path`, or None (and a warning) when it cannot be served.
    pub(super) fn array(
        &mut self,
        dataset: &ListedDataset,
        path: &str,
        dimension_names: Vec<String>,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Node>, FormatError> {
        self.limits.check_time()?;
        match self.array_or_why(dataset, path, dimension_names, warnings)? {
            Ok(node) => Ok(Some(node)),
            Err(why) => {
                warnings.push(format!("variable {path} {why}; left out"));
                Ok(None)
            }
        }
    }

    fn array_or_why(
        &mut self,
        listed: &ListedDataset,
        path: &str,
        dimension_names: Vec<String>,
        warnings: &mut Vec<String>,
    ) -> Result<Result<Node, String>, FormatError> {
        let element = match ElementType::of(listed.dataset.dtype()) {
            Ok(element) => element,
            Err(what) => return Ok(Err(format!("is of {what}, which Zarr cannot express"))),
        };
        let messages = &listed.header.messages;
        if messages.iter().any(|m| matches!(m, HdfMessage::ExternalFiles(_))) {
            return Ok(Err("keeps its data in external files".into()));
        }
        let Some(layout) = messages.iter().find_map(|m| match m {
            HdfMessage::DataLayout(layout) => Some(&layout.layout),
            _ => None,
        }) else {
            return Err(FormatError::Invalid(format!("dataset {path} has no data layout")));
        };
        let pipeline = messages.iter().find_map(|m| match m {
            HdfMessage::FilterPipeline(pipeline) => Some(pipeline),
            _ => None,
        });
        let fill = messages.iter().rev().find_map(|m| match m {
            HdfMessage::FillValue(fill) => fill.value.as_deref(),
            _ => None,
        });
        let shape = listed.dataset.shape().to_vec();
        let (codecs, chunking) = if element == ElementType::VlenString {
            match self.vlen_strings(listed, path, &shape)? {
                Ok(chunking) => (vec![element.array_to_bytes_codec()], chunking),
                Err(why) => return Ok(Err(why)),
            }
        } else {
            let element_size = element.size().unwrap_or(1);
            let mut codecs = vec![element.array_to_bytes_codec()];
            if !matches!(layout, DataLayout::Compact { .. }) {
                match codecs::codecs(pipeline, element_size) {
                    Ok(filters) => codecs.extend(filters),
                    Err(why) => return Ok(Err(why)),
                }
            }
            let filtered = codecs.len() > 1;
            let max_dims = listed.dataset.max_dims();
            let shape_of = Shape { name: path, dims: &shape, max_dims, element_size, filtered };
            let chunking = match chunks::chunking(self.hdf5, layout, &shape_of, self.limits, &mut self.chunk_count)? {
                Ok(chunking) => chunking,
                Err(why) => return Ok(Err(why)),
            };
            if let Err(why) = self.count_inline(&chunking) {
                return Ok(Err(why));
            }
            (codecs, chunking)
        };
        let attributes = attrs::attributes(
            &listed.attributes,
            &format!("variable {path}"),
            element.number_name(),
            self.limits,
            warnings,
        )?;
        let metadata = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": shape,
            "data_type": element.data_type(),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunking.chunk_shape}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": element.fill_value(fill),
            "codecs": codecs,
            "attributes": attributes,
            "dimension_names": dimension_names,
        });
        Ok(Ok(Node { metadata: object(metadata).into(), chunks: chunking.chunks }))
    }

    /// Counts a compact dataset's inline bytes against the file's budget.
    fn count_inline(&mut self, chunking: &Chunking) -> Result<(), String> {
        let bytes: u64 = chunking
            .chunks
            .iter()
            .map(|(_, chunk)| match chunk {
                Chunk::Inline(bytes) => bytes.len() as u64,
                _ => 0,
            })
            .sum();
        self.take_inline(bytes)
    }

    fn take_inline(&mut self, bytes: u64) -> Result<(), String> {
        let total = self.inline_bytes.saturating_add(bytes);
        if total > self.limits.max_inline_bytes {
            return Err(format!(
                "would be stored inline ({bytes} bytes), past limits.max_inline_bytes ({}) for the file",
                self.limits.max_inline_bytes
            ));
        }
        self.inline_bytes = total;
        Ok(())
    }

    /// Variable-length strings, read and stored inline as one `vlen-utf8` chunk.
    fn vlen_strings(
        &mut self,
        listed: &ListedDataset,
        path: &str,
        shape: &[u64],
    ) -> Result<Result<Chunking, String>, FormatError> {
        let chunk_shape: Vec<u64> = shape.iter().map(|d| (*d).max(1)).collect();
        let count = shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
        let Some(count) = count else {
            return Err(FormatError::Invalid(format!("dataset {path}: its shape {shape:?} overflows")));
        };
        if count == 0 {
            return Ok(Ok(Chunking { chunk_shape, chunks: Vec::new() }));
        }
        let remaining = self.limits.max_inline_bytes.saturating_sub(self.inline_bytes);
        if count.saturating_mul(8) > remaining {
            return Ok(Err(format!(
                "holds {count} variable-length strings, past limits.max_inline_bytes for the file"
            )));
        }
        let strings = match listed.dataset.read_strings() {
            Ok(strings) => strings,
            Err(hdf5_reader::error::Error::ResourceLimit(_)) => {
                return Ok(Err("holds variable-length strings past limits.max_inline_bytes".into()));
            }
            Err(error) => return Err(invalid(&format!("the strings of dataset {path}"), error)),
        };
        let mut encoded = Vec::new();
        encoded.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        for string in &strings {
            encoded.extend_from_slice(&(string.len() as u32).to_le_bytes());
            encoded.extend_from_slice(string.as_bytes());
        }
        if let Err(why) = self.take_inline(encoded.len() as u64) {
            return Ok(Err(why));
        }
        let origin = vec![0u64; shape.len()];
        Ok(Ok(Chunking { chunk_shape, chunks: vec![(origin, Chunk::Inline(encoded))] }))
    }
}

/// One dataset, listed.
pub(super) struct ListedDataset {
    pub name: String,
    pub dataset: Dataset,
    pub header: Arc<ObjectHeader>,
    pub attributes: Vec<Attribute>,
}

/// A JSON object's map.
pub(super) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
