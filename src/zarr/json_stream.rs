//! A pull reader of a large JSON document as it arrives. It walks the outer objects itself (a
//! manifest's nodes, an array's references) and hands each inner value, whole, to serde_json
//! as a slice. serde_json's own reader of an `io::Read` takes one byte at a time through the
//! reader and was most of a registration's time; on a slice it scans strings with memchr.
//!
//! Memory: the buffer holds the value being read and what arrived after it, never more than
//! one value beyond [`CHUNK`]. Errors are `serde_json::Error`s that say where in the whole
//! document (line and column), like serde_json's.

use std::io::{self, Read};

use serde::de::{DeserializeOwned, Error as _};

/// Bytes asked of the reader at a time.
const CHUNK: usize = 256 << 10;

/// A JSON document read from `R`.
#[derive(Debug)]
pub struct JsonStream<R> {
    reader: R,
    buf: Vec<u8>,
    /// The next byte to read in `buf`.
    pos: usize,
    eof: bool,
    /// Newlines in the bytes dropped from the front of `buf`, and the column there.
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
        Self { reader, buf: Vec::new(), pos: 0, eof: false, lines_before: 0, column_before: 0 }
    }

    /// Reads more bytes, dropping those before `keep` first; false at the end of the input.
    fn fill(&mut self, keep: usize) -> Result<bool, serde_json::Error> {
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
                    return Err(serde_json::Error::io(e));
                }
            }
        };
        self.buf.truncate(old + n);
        self.eof = n == 0;
        Ok(n > 0)
    }

    /// The next byte that is not white space, not consumed; `None` at the end.
    fn peek(&mut self) -> Result<Option<u8>, serde_json::Error> {
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

    /// An error at the current position.
    pub fn error(&self, what: &str) -> serde_json::Error {
        let (line, column) = self.position(self.pos);
        serde_json::Error::custom(format!("{what} at line {line} column {column}"))
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

    /// Consumes `{`.
    pub fn begin_object(&mut self, what: &str) -> Result<(), serde_json::Error> {
        match self.peek()? {
            Some(b'{') => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.error(&format!("expected {what}"))),
            None => Err(self.error(&format!("EOF while parsing {what}"))),
        }
    }

    /// The next key of the object being read, into `key` (reused), its `:` consumed; false after
    /// the last (its `}` consumed). `first` is true for the object's first call.
    pub fn next_key(&mut self, first: &mut bool, key: &mut String) -> Result<bool, serde_json::Error> {
        match self.peek()? {
            Some(b'}') => {
                self.pos += 1;
                return Ok(false);
            }
            Some(b',') if !*first => self.pos += 1,
            None => return Err(self.error("EOF while parsing an object")),
            Some(_) if !*first => return Err(self.error("expected `,` or `}`")),
            Some(_) => {}
        }
        *first = false;
        if self.peek()? != Some(b'"') {
            return Err(self.error("key must be a string"));
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
            _ => Err(self.error("expected `:`")),
        }
    }

    /// The next value, whole.
    pub fn value<T: DeserializeOwned>(&mut self) -> Result<T, serde_json::Error> {
        let (start, end) = self.scan_value()?;
        self.parse_slice(start, end)
    }

    /// The next value, read by `read` from a deserializer over its bytes.
    pub fn with_value<T>(
        &mut self,
        read: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::SliceRead<'_>>) -> Result<T, serde_json::Error>,
    ) -> Result<T, serde_json::Error> {
        let (start, end) = self.scan_value()?;
        let mut de = serde_json::Deserializer::from_slice(&self.buf[start..end]);
        let value = read(&mut de).and_then(|v| de.end().map(|()| v));
        value.map_err(|e| self.relocate(e, start))
    }

    /// Skips the next value.
    pub fn skip_value(&mut self) -> Result<(), serde_json::Error> {
        self.value::<serde::de::IgnoredAny>().map(|_| ())
    }

    /// Checks that nothing but white space follows.
    pub fn end(&mut self) -> Result<(), serde_json::Error> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.error("trailing characters")),
        }
    }

    fn parse_slice<T: DeserializeOwned>(&self, start: usize, end: usize) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.buf[start..end]).map_err(|e| self.relocate(e, start))
    }

    /// serde_json's error about a value starting at `start`, placed in the whole document.
    fn relocate(&self, e: serde_json::Error, start: usize) -> serde_json::Error {
        if e.is_io() || e.line() == 0 {
            return e;
        }
        let (line, column) = self.position(start);
        let (line, column) = if e.line() == 1 {
            (line, column + e.column() as u64 - 1)
        } else {
            (line + e.line() as u64 - 1, e.column() as u64)
        };
        let text = e.to_string();
        let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(m, _)| m);
        serde_json::Error::custom(format!("{message} at line {line} column {column}"))
    }

    /// Finds the end of the value starting at the next non-white byte, reading as much as it
    /// takes; consumes it and returns its span in the buffer.
    fn scan_value(&mut self) -> Result<(usize, usize), serde_json::Error> {
        let Some(first) = self.peek()? else { return Err(self.error("EOF while parsing a value")) };
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
                    return Err(self.error("EOF while parsing a value"));
                }
                // A number or literal that ends the document.
                return Ok((start - dropped, self.buf.len()));
            }
            (start, at) = (start - dropped, at - dropped);
        }
    }
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

    fn walk(text: &[u8], step: usize) -> Result<Vec<(String, Value)>, serde_json::Error> {
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
