//! A pull reader of a large JSON document as it arrives. It walks the outer objects itself (a
//! manifest's nodes, an array's references) and hands each inner value, whole, to serde_json
//! as a slice. serde_json's own reader of an `io::Read` takes one byte at a time through the
//! reader and was most of a registration's time; on a slice it scans strings with memchr.
//!
//! Memory: the buffer holds the value being read and what arrived after it, never more than
//! one value beyond [`CHUNK`]. Errors say where in the whole document (line, column and byte
//! offset), and whether the bytes are not JSON at all or JSON of the wrong shape: a client is
//! told `400` for the first and `422` for the second.

use std::io::{self, Read};

use serde::de::{DeserializeOwned, IgnoredAny};

/// Bytes asked of the reader at a time.
const CHUNK: usize = 256 << 10;

/// Why a document could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// What kind of failure.
    pub kind: ErrorKind,
    message: String,
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The bytes are not JSON: a syntax error, text that is not UTF-8, or a document that ends
    /// early (truncated).
    Syntax,
    /// Valid JSON that is not shaped as the document must be.
    Shape,
    /// Reading the input failed.
    Io(io::ErrorKind),
}

impl Error {
    /// The bytes are not JSON.
    fn syntax(message: String) -> Self {
        Self { kind: ErrorKind::Syntax, message }
    }

    /// The JSON is not shaped as it must be.
    pub fn shape(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Shape, message: message.into() }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        use serde_json::error::Category;
        let kind = match e.classify() {
            Category::Io => ErrorKind::Io(e.io_error_kind().unwrap_or(io::ErrorKind::Other)),
            Category::Syntax | Category::Eof => ErrorKind::Syntax,
            Category::Data => ErrorKind::Shape,
        };
        Self { kind, message: e.to_string() }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Self { kind: ErrorKind::Io(e.kind()), message: e.to_string() }
    }
}

/// A JSON document read from `R`.
#[derive(Debug)]
pub struct JsonStream<R> {
    reader: R,
    buf: Vec<u8>,
    /// The next byte to read in `buf`.
    pos: usize,
    eof: bool,
    /// Bytes and newlines dropped from the front of `buf`, and the column there.
    bytes_before: u64,
    lines_before: u64,
    column_before: u64,
}

/// Where a value being scanned has got to.
#[derive(Debug, Default)]
struct Scan {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl<R: Read> JsonStream<R> {
    /// A stream over `reader`.
    pub fn new(reader: R) -> Self {
        Self { reader, buf: Vec::new(), pos: 0, eof: false, bytes_before: 0, lines_before: 0, column_before: 0 }
    }

    /// Reads more bytes, dropping those before `keep` first; false at the end of the input.
    fn fill(&mut self, keep: usize) -> Result<bool, Error> {
        if self.eof {
            return Ok(false);
        }
        if keep > 0 {
            let dropped = &self.buf[..keep];
            let newlines = dropped.iter().filter(|b| **b == b'\n').count() as u64;
            match dropped.iter().rposition(|b| *b == b'\n') {
                Some(at) => self.column_before = (keep - at - 1) as u64,
                None => self.column_before += keep as u64,
            }
            self.lines_before += newlines;
            self.bytes_before += keep as u64;
            self.buf.drain(..keep);
            self.pos -= keep;
        }
        let old = self.buf.len();
        self.buf.resize(old + CHUNK, 0);
        let n = loop {
            match self.reader.read(&mut self.buf[old..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e.into());
                }
            }
        };
        self.buf.truncate(old + n);
        self.eof = n == 0;
        Ok(n > 0)
    }

    /// The next byte that is not white space, not consumed; `None` at the end.
    fn peek(&mut self) -> Result<Option<u8>, Error> {
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            if !self.fill(self.pos)? {
                return Ok(None);
            }
        }
    }

    /// Where the current position is, for a message.
    fn here(&self) -> String {
        self.place(self.pos)
    }

    /// Where byte `at` of the buffer is in the document, for a message: line and column
    /// (1-based), and the byte offset (0-based).
    fn place(&self, at: usize) -> String {
        let (line, column) = self.position(at);
        format!("at line {line} column {column} (byte {})", self.bytes_before + at as u64)
    }

    /// The bytes at the current position are not JSON.
    fn syntax(&self, what: &str) -> Error {
        Error::syntax(format!("{what} {}", self.here()))
    }

    /// A value of the wrong shape at the current position (the bytes are valid JSON).
    pub fn error(&self, what: &str) -> Error {
        Error::shape(format!("{what} {}", self.here()))
    }

    /// Line and column (1-based) of byte `at` of the buffer.
    fn position(&self, at: usize) -> (u64, u64) {
        let seen = &self.buf[..at.min(self.buf.len())];
        let newlines = seen.iter().filter(|b| **b == b'\n').count() as u64;
        let column = match seen.iter().rposition(|b| *b == b'\n') {
            Some(nl) => (at - nl) as u64,
            None => self.column_before + at as u64 + 1,
        };
        (self.lines_before + newlines + 1, column)
    }

    /// Consumes `{`. Anything else is a shape error if it is a JSON value (read to its end to
    /// know), a syntax error if not.
    pub fn begin_object(&mut self, what: &str) -> Result<(), Error> {
        match self.peek()? {
            Some(b'{') => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => {
                let wrong = self.error(&format!("expected {what}"));
                self.skip_value()?;
                Err(wrong)
            }
            None => Err(self.syntax(&format!("EOF while parsing {what}"))),
        }
    }

    /// The next key of the object being read, into `key` (reused), its `:` consumed; false after
    /// the last (its `}` consumed). `first` is true for the object's first call.
    pub fn next_key(&mut self, first: &mut bool, key: &mut String) -> Result<bool, Error> {
        match self.peek()? {
            Some(b'}') => {
                self.pos += 1;
                return Ok(false);
            }
            Some(b',') if !*first => self.pos += 1,
            None => return Err(self.syntax("EOF while parsing an object")),
            Some(_) if !*first => return Err(self.syntax("expected `,` or `}`")),
            Some(_) => {}
        }
        *first = false;
        match self.peek()? {
            Some(b'"') => {}
            None => return Err(self.syntax("EOF while parsing an object")),
            Some(_) => return Err(self.syntax("key must be a string")),
        }
        let (start, end) = self.scan_value()?;
        let raw = &self.buf[start..end];
        key.clear();
        match std::str::from_utf8(&raw[1..raw.len() - 1]) {
            Ok(plain) if !plain.contains('\\') => key.push_str(plain),
            _ => key.push_str(&self.parse_slice::<String>(start, end)?),
        }
        match self.peek()? {
            Some(b':') => {
                self.pos += 1;
                Ok(true)
            }
            None => Err(self.syntax("EOF while parsing an object")),
            _ => Err(self.syntax("expected `:`")),
        }
    }

    /// The next value, whole.
    pub fn value<T: DeserializeOwned>(&mut self) -> Result<T, Error> {
        let (start, end) = self.scan_value()?;
        self.parse_slice(start, end)
    }

    /// The next value, read by `read` from a deserializer over its bytes.
    pub fn with_value<T>(
        &mut self,
        read: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::SliceRead<'_>>) -> Result<T, serde_json::Error>,
    ) -> Result<T, Error> {
        let (start, end) = self.scan_value()?;
        let mut de = serde_json::Deserializer::from_slice(&self.buf[start..end]);
        let value = read(&mut de).and_then(|v| de.end().map(|()| v));
        value.map_err(|e| self.relocate(e, start, end))
    }

    /// Skips the next value.
    pub fn skip_value(&mut self) -> Result<(), Error> {
        self.value::<IgnoredAny>().map(|_| ())
    }

    /// Checks that nothing but white space follows.
    pub fn end(&mut self) -> Result<(), Error> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.syntax("trailing characters")),
        }
    }

    fn parse_slice<T: DeserializeOwned>(&self, start: usize, end: usize) -> Result<T, Error> {
        serde_json::from_slice(&self.buf[start..end]).map_err(|e| self.relocate(e, start, end))
    }

    /// serde_json's error about the value in `start..end`, placed in the whole document. A
    /// shape error in a value that is not JSON either is reported as the syntax error: a body
    /// that is not JSON is that first.
    fn relocate(&self, e: serde_json::Error, start: usize, end: usize) -> Error {
        let e = match e.classify() {
            serde_json::error::Category::Data => {
                serde_json::from_slice::<IgnoredAny>(&self.buf[start..end]).err().unwrap_or(e)
            }
            _ => e,
        };
        if e.is_io() || e.line() == 0 {
            return e.into();
        }
        let value = &self.buf[start..end];
        let at = start + offset_of(value, e.line(), e.column());
        let text = e.to_string();
        let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(m, _)| m);
        let kind = Error::from(e).kind;
        Error { kind, message: format!("{message} {}", self.place(at)) }
    }

    /// Finds the end of the value starting at the next non-white byte, reading as much as it
    /// takes; consumes it and returns its span in the buffer.
    fn scan_value(&mut self) -> Result<(usize, usize), Error> {
        let Some(first) = self.peek()? else { return Err(self.syntax("EOF while parsing a value")) };
        let compound = matches!(first, b'"' | b'{' | b'[');
        let (mut start, mut at) = (self.pos, self.pos);
        let mut state = Scan::default();
        loop {
            if let Some(end) = scan(&self.buf[at..], first, &mut state, at == start) {
                self.pos = at + end;
                return Ok((start, at + end));
            }
            at = self.buf.len();
            // Keep the value being scanned, drop what came before it.
            let dropped = start;
            if !self.fill(dropped)? {
                self.pos = self.buf.len();
                if compound {
                    return Err(self.syntax("EOF while parsing a value"));
                }
                // A number or literal that ends the document.
                return Ok((start - dropped, self.buf.len()));
            }
            (start, at) = (start - dropped, at - dropped);
        }
    }
}

/// The byte offset in `value` of serde_json's (1-based) `line` and `column` there; serde_json
/// points at the byte it stopped at, column 0 being a line's newline.
fn offset_of(value: &[u8], line: usize, column: usize) -> usize {
    let line_start = match line {
        0 | 1 => 0,
        n => value.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(n - 2).map_or(value.len(), |(i, _)| i + 1),
    };
    (line_start + column).saturating_sub(1).min(value.len())
}

/// Scans `bytes`, the continuation of a value whose first byte is `first` (at `bytes[0]` when
/// `starting`); the end of the value (exclusive) in `bytes`, or `None` if it goes on.
fn scan(bytes: &[u8], first: u8, state: &mut Scan, starting: bool) -> Option<usize> {
    let mut i = 0;
    if starting {
        i = 1;
        match first {
            b'"' => state.in_string = true,
            b'{' | b'[' => state.depth = 1,
            _ => {}
        }
    }
    if !matches!(first, b'"' | b'{' | b'[') {
        // A number or a literal: up to the next delimiter.
        return bytes[i..]
            .iter()
            .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
            .map(|p| i + p);
    }
    while i < bytes.len() {
        if state.in_string {
            if state.escaped {
                state.escaped = false;
                i += 1;
                continue;
            }
            // Most of a reference is its path: jump to the next quote or backslash.
            match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                None => return None,
                Some(p) if bytes[i + p] == b'\\' => {
                    state.escaped = true;
                    i += p + 1;
                }
                Some(p) => {
                    state.in_string = false;
                    i += p + 1;
                    if state.depth == 0 {
                        return Some(i);
                    }
                }
            }
            continue;
        }
        match bytes[i] {
            b'"' => state.in_string = true,
            b'{' | b'[' => state.depth += 1,
            b'}' | b']' => {
                state.depth -= 1;
                if state.depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A reader that gives `n` bytes at a time, so that values straddle refills.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(self.0.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn walk(text: &[u8], step: usize) -> Result<Vec<(String, Value)>, Error> {
        let mut s = JsonStream::new(Trickle(text, step));
        s.begin_object("an object")?;
        let (mut first, mut key, mut out) = (true, String::new(), Vec::new());
        while s.next_key(&mut first, &mut key)? {
            out.push((key.clone(), s.value()?));
        }
        s.end()?;
        Ok(out)
    }

    #[test]
    fn reads_keys_and_values_across_refills() {
        let text = br#" { "a" : {"x": [1, "}]\"{", {"y": null}]}, "b\u00e9\n": -1.5e3 ,"c":"s\\\"","d":true}  "#;
        for step in [1, 2, 3, 7, 1 << 20] {
            let got = walk(text, step).unwrap();
            assert_eq!(
                got,
                [
                    ("a".into(), json!({"x": [1, "}]\"{", {"y": null}]})),
                    ("b\u{e9}\n".into(), json!(-1.5e3)),
                    ("c".into(), json!("s\\\"")),
                    ("d".into(), json!(true)),
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn errors_say_where_in_the_document() {
        let e = walk(b"{\"a\": 1,\n  \"b\": [1, 2,]}", 3).unwrap_err().to_string();
        assert!(e.contains("line 2 column"), "{e}");
        let e = walk(b"{\"a\": 1", 1).unwrap_err().to_string();
        assert!(e.contains("EOF"), "{e}");
        assert!(walk(b"{} x", 1).unwrap_err().to_string().contains("trailing"));
        assert!(walk(b"[1]", 1).unwrap_err().to_string().contains("expected an object at line 1 column 1"));
        assert!(walk(b"{\"a\" 1}", 1).unwrap_err().to_string().contains("expected `:`"));
        assert!(walk(b"{\"a\": \"open", 2).unwrap_err().to_string().contains("EOF"));
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_serde_json(
            map in proptest::collection::btree_map("[a-z\"\\\\{}\\[\\]é ]{0,6}", proptest::prelude::any::<(i32, String, bool)>(), 0..8),
            step in 1usize..40,
        ) {
            let value = Value::Object(map.into_iter().map(|(k, (n, s, b))| (k, json!([n, s, {"b": b}]))).collect());
            let text = serde_json::to_vec_pretty(&value).unwrap();
            let walked: serde_json::Map<String, Value> = walk(&text, step).unwrap().into_iter().collect();
            proptest::prop_assert_eq!(Value::Object(walked), value);
        }
    }
}
