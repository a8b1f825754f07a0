//! The walk over a DMR++ document's XML events (quick-xml's streaming reader): a stack of what
//! each open element is being read into, closed into groups and arrays as their ends arrive.

use std::collections::HashMap;

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};
use serde_json::{Map, Value, json};

use super::super::{FormatError, Limits, Node, Parsed};
use super::attributes::{self, Attribute};
use super::elements::{BLOCKS, Xml, child_path, in_variable, raw_chunk};
use super::frame::{Frame, TextOf};
use super::text;
use super::variable::{Context, Outcome, Variable};

/// What kind of frame the open element is (for dispatching without a borrow).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Group,
    Variable,
    Attribute,
    Chunks,
    Chunk,
    Vlsa,
    Other,
}

impl Frame {
    fn kind(&self) -> Kind {
        match self {
            Frame::Group { .. } => Kind::Group,
            Frame::Variable { .. } => Kind::Variable,
            Frame::Attribute(_) => Kind::Attribute,
            Frame::Chunks => Kind::Chunks,
            Frame::Chunk => Kind::Chunk,
            Frame::Vlsa => Kind::Vlsa,
            Frame::Text(..) | Frame::Skip => Kind::Other,
        }
    }
}

/// The walk's state beside the stack.
pub(super) struct Walk<'a> {
    limits: &'a Limits,
    stack: Vec<Frame>,
    /// Dimensions by full name (`/g1/lat`).
    dimensions: HashMap<String, u64>,
    context: Context<'a>,
    pub parsed: Parsed,
    /// Groups in the order they open (the order h5netcdf numbers phony dimensions in).
    pub groups: Vec<String>,
    elements: usize,
    seen_dataset: bool,
}

impl<'a> Walk<'a> {
    pub fn new(limits: &'a Limits) -> Self {
        let context = Context {
            dataset_href: None,
            filters_in_file_order: true,
            inline_left: limits.max_inline_bytes,
            chunks_left: limits.max_chunks,
            limits,
        };
        Self {
            limits,
            stack: Vec::new(),
            dimensions: HashMap::new(),
            context,
            parsed: Parsed::default(),
            groups: Vec::new(),
            elements: 0,
            seen_dataset: false,
        }
    }

    /// Reads the whole document.
    pub fn run(&mut self, document: &[u8]) -> Result<(), FormatError> {
        let mut reader = Reader::from_reader(document);
        reader.config_mut().expand_empty_elements = true;
        reader.config_mut().check_end_names = true;
        let mut events = 0u64;
        loop {
            events += 1;
            if events.is_multiple_of(1024) {
                self.limits.check_time()?;
            }
            let event = reader.read_event().map_err(|e| {
                FormatError::Invalid(format!(
                    "the DMR++ document is not well-formed XML at byte {}: {e}",
                    reader.error_position()
                ))
            })?;
            let at = reader.buffer_position();
            match event {
                Event::Start(element) => self.start(&element, at)?,
                Event::End(_) => self.end(at)?,
                Event::Text(content) => self.text(&text::decode(&content)),
                Event::CData(content) => self.text(&text::decode(&content)),
                Event::GeneralRef(name) => {
                    let c = text::entity(&name)?;
                    self.text(c.encode_utf8(&mut [0; 4]));
                }
                Event::Eof => break,
                _ => {}
            }
        }
        if !self.stack.is_empty() {
            return Err(FormatError::Invalid(format!(
                "the DMR++ document ends with {} elements still open (truncated?)",
                self.stack.len()
            )));
        }
        if !self.seen_dataset {
            return Err(FormatError::Invalid("the document has no DMR++ Dataset element".into()));
        }
        Ok(())
    }

    fn text(&mut self, content: &str) {
        if let Some(Frame::Text(_, collected)) = self.stack.last_mut() {
            collected.push_str(content);
        }
    }

    fn start(&mut self, element: &BytesStart, at: u64) -> Result<(), FormatError> {
        if self.stack.len() > self.limits.max_depth.saturating_add(8) {
            return Err(FormatError::TooLarge(format!(
                "the DMR++ document nests elements deeper than limits.max_depth allows (byte {at})"
            )));
        }
        let local = element.local_name();
        let name = local.as_ref();
        let xml = Xml::of(element, at)?;
        let xml = &xml;
        let parent = self.stack.last().map(Frame::kind);
        let frame = match (parent, name) {
            (None, b"Dataset") if !self.seen_dataset => {
                self.seen_dataset = true;
                self.context.dataset_href = xml.get("href").map(str::to_owned);
                self.context.filters_in_file_order = xml.get("version").is_some();
                self.groups.push(String::new());
                Frame::Group { path: String::new(), attributes: Vec::new(), count: 0 }
            }
            (None, _) => {
                return Err(FormatError::Invalid(format!(
                    "the document's root element is not one DMR++ Dataset (byte {at})"
                )));
            }
            (Some(Kind::Group | Kind::Variable | Kind::Attribute), b"Attribute") => self.attribute(xml)?,
            (Some(Kind::Group), _) => {
                let parent = match self.stack.last() {
                    Some(Frame::Group { path, .. }) => path.clone(),
                    _ => String::new(),
                };
                self.in_group(&parent, name, xml, at)?
            }
            (Some(Kind::Variable), _) => match self.stack.last_mut() {
                Some(Frame::Variable { variable, .. }) => in_variable(variable, name, xml, &self.dimensions, at)?,
                _ => Frame::Skip,
            },
            (Some(Kind::Chunks), b"chunkDimensionSizes") => Frame::Text(TextOf::ChunkDimensionSizes, String::new()),
            (Some(Kind::Chunks), b"chunk") => {
                let raw = raw_chunk(xml, at)?;
                let linked = xml.get("LinkedBlockIndex").is_some();
                let variable = self.variable()?;
                if linked {
                    variable.unsupported = Some(BLOCKS.into());
                }
                variable.chunks.push(raw);
                Frame::Chunk
            }
            (Some(Kind::Chunks | Kind::Chunk), b"block") => {
                self.variable()?.unsupported = Some(BLOCKS.into());
                Frame::Skip
            }
            (Some(Kind::Attribute), b"Value") => Frame::Text(TextOf::Value, String::new()),
            (Some(Kind::Vlsa), b"v") => {
                let what = format!("dmrpp:vlsa value at byte {at}");
                let count = xml.get("c").map(|c| text::number_of(c, &what)).transpose()?.unwrap_or(1);
                let size = xml.get("s").map(|s| text::number_of(s, &what)).transpose()?;
                Frame::Text(TextOf::VlsaValue { count, size }, String::new())
            }
            _ => Frame::Skip,
        };
        self.stack.push(frame);
        Ok(())
    }

    /// A child of a group (or of the Dataset).
    fn in_group(&mut self, parent: &str, name: &[u8], xml: &Xml, at: u64) -> Result<Frame, FormatError> {
        let frame = match name {
            b"Group" => {
                let path = child_path(parent, xml.get("name"), at)?;
                let depth = path.split('/').count();
                if depth > self.limits.max_depth {
                    return Err(FormatError::TooLarge(format!(
                        "group {path} is nested deeper than limits.max_depth ({})",
                        self.limits.max_depth
                    )));
                }
                self.count_element(at)?;
                self.groups.push(path.clone());
                Frame::Group { path, attributes: Vec::new(), count: 0 }
            }
            b"Dimension" => {
                self.count_element(at)?;
                let dim_name = xml
                    .get("name")
                    .filter(|n| !n.is_empty() && !n.contains('/'))
                    .ok_or_else(|| FormatError::Invalid(format!("a Dimension without a plain name (byte {at})")))?;
                let size = text::number_of(xml.get("size").unwrap_or(""), &format!("Dimension {dim_name} size"))?;
                self.dimensions
                    .insert(format!("/{}{}{dim_name}", parent, if parent.is_empty() { "" } else { "/" }), size);
                Frame::Skip
            }
            b"Enumeration" | b"Map" => Frame::Skip,
            kind => {
                self.count_element(at)?;
                // netCDF4's name for a variable named as a dimension it does not stand for.
                let plain = xml.get("name").map(|n| n.strip_prefix("_nc4_non_coord_").unwrap_or(n));
                let path = child_path(parent, plain, at)?;
                let kind = text::decode(kind);
                let mut variable = Variable { path, kind, ..Variable::default() };
                if matches!(variable.kind.as_str(), "Structure" | "Sequence") {
                    variable.unsupported = Some("structures are not supported".into());
                }
                Frame::Variable { variable: Box::new(variable), count: 0 }
            }
        };
        Ok(frame)
    }

    /// An `Attribute`, counted against its node's limit.
    fn attribute(&mut self, xml: &Xml) -> Result<Frame, FormatError> {
        let max = self.limits.max_attributes;
        let (count, node) = self
            .stack
            .iter_mut()
            .rev()
            .find_map(|f| match f {
                Frame::Group { count, path, .. } => Some((count, path.clone())),
                Frame::Variable { count, variable } => Some((count, variable.path.clone())),
                _ => None,
            })
            .ok_or_else(|| FormatError::Invalid("an Attribute outside any group or variable".into()))?;
        *count += 1;
        if *count > max {
            return Err(FormatError::TooLarge(format!(
                "{}: more attributes than limits.max_attributes ({max})",
                if node.is_empty() { "/" } else { node.as_str() }
            )));
        }
        let name = xml.get("name").unwrap_or_default().to_owned();
        let kind = xml.get("type").unwrap_or("String").to_owned();
        Ok(Frame::Attribute(Attribute { name, kind, ..Attribute::default() }))
    }

    /// The variable being read (the nearest open one).
    fn variable(&mut self) -> Result<&mut Variable, FormatError> {
        self.stack
            .iter_mut()
            .rev()
            .find_map(|f| match f {
                Frame::Variable { variable, .. } => Some(variable.as_mut()),
                _ => None,
            })
            .ok_or_else(|| FormatError::Invalid("dmrpp:chunks outside any variable".into()))
    }

    fn count_element(&mut self, at: u64) -> Result<(), FormatError> {
        self.elements += 1;
        if self.elements > self.limits.max_nodes {
            return Err(FormatError::TooLarge(format!(
                "the DMR++ document has more groups, dimensions and variables than limits.max_nodes allows (byte {at})"
            )));
        }
        Ok(())
    }

    fn end(&mut self, at: u64) -> Result<(), FormatError> {
        let frame =
            self.stack.pop().ok_or_else(|| FormatError::Invalid(format!("an end tag closes nothing (byte {at})")))?;
        match frame {
            Frame::Text(TextOf::Value, value) => {
                if let Some(Frame::Attribute(attribute)) = self.stack.last_mut() {
                    attribute.values.push(value);
                }
            }
            Frame::Text(TextOf::ChunkDimensionSizes, sizes) => {
                let variable = self.variable()?;
                variable.chunk_shape = Some(text::numbers(&sizes, &format!("{} chunkDimensionSizes", variable.path))?);
            }
            Frame::Text(TextOf::Compact, data) => self.variable()?.compact = Some(data),
            Frame::Text(TextOf::MissingData, data) => self.variable()?.missing_data = Some(data),
            Frame::Text(TextOf::VlsaValue { count, size }, value) => {
                let most = self.limits.max_inline_bytes;
                self.variable()?.add_string(value, count, size, most)?;
            }
            Frame::Attribute(attribute) => match self.stack.last_mut() {
                Some(Frame::Attribute(container)) => container.children.push(attribute),
                Some(Frame::Variable { variable, .. }) => variable.attributes.push(attribute),
                Some(Frame::Group { attributes, .. }) => attributes.push(attribute),
                _ => {}
            },
            Frame::Variable { variable, .. } => {
                let path = variable.path.clone();
                match (*variable).finish(&mut self.context)? {
                    Outcome::Array(node) => self.insert(path, node)?,
                    Outcome::LeftOut(warning) => self.parsed.warnings.push(warning),
                    Outcome::Hidden => {}
                }
            }
            Frame::Group { path, attributes, .. } => {
                let mut metadata = Map::new();
                metadata.insert("zarr_format".into(), json!(3));
                metadata.insert("node_type".into(), json!("group"));
                metadata.insert("attributes".into(), Value::Object(attributes::to_json(&attributes, None)));
                self.insert(path, Node { metadata: metadata.into(), chunks: Vec::new() })?;
            }
            Frame::Chunks | Frame::Chunk | Frame::Vlsa | Frame::Skip => {}
        }
        Ok(())
    }

    fn insert(&mut self, path: String, node: Node) -> Result<(), FormatError> {
        if self.parsed.nodes.contains_key(&path) {
            return Err(FormatError::Invalid(format!("two nodes are named {path}")));
        }
        self.parsed.nodes.insert(path, node);
        Ok(())
    }
}
