//! The characters of a DMR++ document: bytes as UTF-8 (or ISO-8859-1, which Hyrax declares),
//! the five predefined entities and character references; any other entity is an error, never
//! expanded.

use super::super::FormatError;

/// `bytes` as text: UTF-8 when they are, else ISO-8859-1 (each byte one character).
pub(super) fn decode(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => bytes.iter().map(|b| char::from(*b)).collect(),
    }
}

/// The character an entity reference `&name;` stands for (`name` without `&` and `;`).
pub(super) fn entity(name: &[u8]) -> Result<char, FormatError> {
    let known = match name {
        b"amp" => Some('&'),
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"quot" => Some('"'),
        b"apos" => Some('\''),
        [b'#', b'x' | b'X', hex @ ..] => number(hex, 16),
        [b'#', decimal @ ..] => number(decimal, 10),
        _ => None,
    };
    known.ok_or_else(|| {
        FormatError::Invalid(format!(
            "the DMR++ document uses the entity &{}; which is not one of XML's own (entities are not expanded)",
            decode(name).chars().take(64).collect::<String>()
        ))
    })
}

fn number(digits: &[u8], radix: u32) -> Option<char> {
    let digits = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(digits, radix).ok().and_then(char::from_u32)
}

/// An attribute's value with its references replaced.
pub(super) fn unescape(raw: &[u8]) -> Result<String, FormatError> {
    if !raw.contains(&b'&') {
        return Ok(decode(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.iter().position(|b| *b == b'&') {
        out.push_str(&decode(&rest[..at]));
        let after = &rest[at + 1..];
        let end = after.iter().position(|b| *b == b';').ok_or_else(|| {
            FormatError::Invalid("the DMR++ document has an `&` that starts no reference in an attribute value".into())
        })?;
        out.push(entity(&after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(&decode(rest));
    Ok(out)
}

/// Whitespace-separated unsigned integers (`chunkDimensionSizes`, `deflateLevel`).
pub(super) fn numbers(text: &str, what: &str) -> Result<Vec<u64>, FormatError> {
    text.split_ascii_whitespace().map(|word| number_of(word, what)).collect()
}

/// A `chunkPositionInArray` such as `[0,100,0]`.
pub(super) fn position(text: &str, what: &str) -> Result<Vec<u64>, FormatError> {
    let inner = text.trim().strip_prefix('[').and_then(|t| t.strip_suffix(']')).ok_or_else(|| {
        FormatError::Invalid(format!("{what}: chunkPositionInArray {:?} is not of the form [i,j,...]", short(text)))
    })?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner.split(',').map(|word| number_of(word.trim(), what)).collect()
}

/// One unsigned integer of the document.
pub(super) fn number_of(word: &str, what: &str) -> Result<u64, FormatError> {
    word.trim()
        .parse()
        .map_err(|_| FormatError::Invalid(format!("{what}: {:?} is not an unsigned integer", short(word))))
}

/// At most 64 characters of `text`, for messages.
pub(super) fn short(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_replaced_and_unknown_entities_refused() {
        assert_eq!(unescape(b"a &amp; b &lt;&#65;&#x42;").unwrap(), "a & b <AB");
        assert!(unescape(b"&lol;").is_err());
        assert!(unescape(b"&amp").is_err());
        assert!(unescape(b"&#xD800;").is_err());
        assert_eq!(decode(b"caf\xe9"), "caf\u{e9}");
        assert_eq!(position("[0,50, 100]", "v").unwrap(), [0, 50, 100]);
        assert!(position("[0,-1]", "v").is_err());
        assert!(position("0,1", "v").is_err());
        assert_eq!(numbers(" 4 1 ", "v").unwrap(), [4, 1]);
    }
}
