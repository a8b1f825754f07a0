//! One FITS header read from its 2880-byte blocks of 80-character cards, up to its `END` card:
//! the keyword = value cards in order (with the HIERARCH and long-string CONTINUE conventions
//! astropy reads), and the COMMENT and HISTORY text. Nothing past the file's end is read, and a
//! block that is not ASCII text stops the read (a header without `END` running into binary data).

use std::collections::HashMap;

use super::BLOCK;
use crate::formats::{ByteRanges, FormatError, Limits};

const CARD: usize = 80;
/// A header may have this many cards per attribute allowed (COMMENT and HISTORY cards, and
/// repeated keywords, make fewer attributes than cards): 100,000 cards (8 MB) by default.
const CARDS_PER_ATTRIBUTE: usize = 10;

/// A card's value as FITS writes it (section 4.2 of the standard).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Logical(bool),
    /// Integers beyond i64 are kept exactly: a NAXISn may need all of u64.
    Int(i128),
    Real(f64),
    Text(String),
    /// A value the card has no value for (`KEY =` and nothing), or one that is none of the
    /// above (a complex number, a malformed number): kept as the card spells it.
    Other(String),
}

/// One HDU's header.
#[derive(Debug, Default)]
pub struct Header {
    /// The keyword = value cards in the order of the header (HIERARCH keywords without their
    /// `HIERARCH ` prefix, as astropy names them).
    pub cards: Vec<(String, Value)>,
    /// The text of its COMMENT cards, in order.
    pub comments: Vec<String>,
    /// The text of its HISTORY cards, in order.
    pub history: Vec<String>,
    /// Its length in bytes, a whole number of blocks: the data unit starts right after it.
    pub len: u64,
    /// Where the first card of each keyword is, in `cards`: a repeated keyword reads as its first.
    first: HashMap<String, usize>,
}

impl Header {
    /// The value of `keyword`'s first card.
    pub fn get(&self, keyword: &str) -> Option<&Value> {
        self.first.get(keyword).map(|&at| &self.cards[at].1)
    }

    fn push(&mut self, keyword: String, value: Value) {
        self.first.entry(keyword.clone()).or_insert(self.cards.len());
        self.cards.push((keyword, value));
    }
}

/// Reads the header that starts at byte `start` of `file`.
pub fn read(file: &dyn ByteRanges, start: u64, limits: &Limits) -> Result<Header, FormatError> {
    let file_len = file.len();
    let mut header = Header::default();
    let mut at = start;
    loop {
        limits.check_time()?;
        if at.checked_add(BLOCK).is_none_or(|end| end > file_len) {
            return Err(FormatError::Invalid(format!(
                "its header at byte {start} has no END card before the end of the {file_len}-byte file (truncated?)"
            )));
        }
        let block = file.read(at, BLOCK)?;
        for (index, card) in block.chunks_exact(CARD).enumerate() {
            let place =
                || format!("card {} of the header at byte {start}", (at - start) / CARD as u64 + index as u64 + 1);
            if let Some(bad) = card.iter().find(|b| !(0x20..=0x7e).contains(*b)) {
                return Err(FormatError::Invalid(format!(
                    "{} holds the byte 0x{bad:02x}, not ASCII text: not a FITS header (no END card?)",
                    place()
                )));
            }
            // ASCII checked above: every slice of the card is valid UTF-8.
            let text = String::from_utf8_lossy(card);
            if read_card(&mut header, &text) {
                header.len = at + BLOCK - start;
                return Ok(header);
            }
            // Commentary cards count too: they are kept (joined into COMMENT and HISTORY).
            let cards = header.cards.len() + header.comments.len() + header.history.len();
            if cards > limits.max_attributes.saturating_mul(CARDS_PER_ATTRIBUTE) {
                return Err(FormatError::TooLarge(format!(
                    "its header at byte {start} has more than {} cards, {CARDS_PER_ATTRIBUTE} times \
                     limits.max_attributes ({})",
                    limits.max_attributes.saturating_mul(CARDS_PER_ATTRIBUTE),
                    limits.max_attributes
                )));
            }
        }
        at += BLOCK;
    }
}

/// Adds one card to `header`; true for the END card.
fn read_card(header: &mut Header, card: &str) -> bool {
    let keyword = card[..8].trim_end();
    let rest = &card[8..];
    match keyword {
        "END" => return true,
        "COMMENT" => header.comments.push(rest.trim_end().to_owned()),
        "HISTORY" => header.history.push(rest.trim_end().to_owned()),
        "" => {}
        "HIERARCH" => {
            if let Some((name, value)) = rest.split_once('=') {
                header.push(name.trim().to_owned(), value_of(value));
            }
        }
        "CONTINUE" => continue_string(header, rest),
        _ if rest.starts_with('=') => header.push(keyword.to_owned(), value_of(&rest[1..])),
        // A keyword with no value indicator is commentary (the standard's section 4.1.2.3).
        _ => {}
    }
    false
}

/// The long-string convention: a string ending in `&` goes on in the next CONTINUE card.
fn continue_string(header: &mut Header, rest: &str) {
    let Some((_, Value::Text(text))) = header.cards.last_mut() else { return };
    if !text.ends_with('&') {
        return;
    }
    if let Value::Text(more) = value_of(rest) {
        text.pop();
        text.push_str(&more);
    }
}

/// The value of a card from just after its `=`: a quoted string (`''` a quote inside it, trailing
/// blanks dropped), or a logical, integer or real before any `/` comment.
fn value_of(text: &str) -> Value {
    let text = text.trim_start();
    if let Some(quoted) = text.strip_prefix('\'') {
        let mut value = String::new();
        let mut chars = quoted.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                } else {
                    break;
                }
            }
            value.push(c);
        }
        return Value::Text(value.trim_end().to_owned());
    }
    let token = text.split('/').next().unwrap_or_default().trim();
    match token {
        "T" => Value::Logical(true),
        "F" => Value::Logical(false),
        _ => number(token).unwrap_or_else(|| Value::Other(token.to_owned())),
    }
}

/// An integer (`-12`, `+3`) or a real (`1.5`, `-2.0E-3`, FORTRAN's `1.0D+2`).
fn number(token: &str) -> Option<Value> {
    let digits = token.strip_prefix(['+', '-']).unwrap_or(token);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return token.parse::<i128>().ok().map(Value::Int);
    }
    let numeric = |b: u8| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'E' | b'D' | b'e' | b'd');
    if !token.bytes().any(|b| b.is_ascii_digit()) || !token.bytes().all(numeric) {
        return None;
    }
    let real: f64 = token.replace(['D', 'd'], "E").parse().ok()?;
    real.is_finite().then_some(Value::Real(real))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_astropy_reads_them() {
        assert_eq!(value_of(" 'It''s a name  '   / the object"), Value::Text("It's a name".into()));
        assert_eq!(value_of("                   T / simple"), Value::Logical(true));
        assert_eq!(value_of("                 -32"), Value::Int(-32));
        assert_eq!(value_of("  18446744073709551615"), Value::Int(18446744073709551615));
        assert_eq!(value_of("    1.5D+2 / fortran"), Value::Real(150.0));
        assert_eq!(value_of("  -2.5E-3"), Value::Real(-0.0025));
        assert_eq!(value_of("  (1.0, 2.0)"), Value::Other("(1.0, 2.0)".into()));
        assert_eq!(value_of("   / no value"), Value::Other(String::new()));
        assert_eq!(value_of("  1E999"), Value::Other("1E999".into()));
        assert_eq!(value_of("  'unterminated"), Value::Text("unterminated".into()));
    }

    #[test]
    fn hierarch_continue_comment_and_history_cards_are_read() {
        let mut header = Header::default();
        for card in [
            "HIERARCH ESO DET CHIP NAME = 'CCD-44'",
            "LONGSTR = 'first part &'",
            "CONTINUE  'and the rest'",
            "COMMENT   a comment",
            "HISTORY made by a test",
            "        blank keyword: commentary",
            "DATE-OBS= '2024-01-01'",
            "DATE-OBS= '1999-01-01'",
        ] {
            assert!(!read_card(&mut header, &format!("{card:<80}")));
        }
        assert_eq!(header.get("ESO DET CHIP NAME"), Some(&Value::Text("CCD-44".into())));
        assert_eq!(header.get("LONGSTR"), Some(&Value::Text("first part and the rest".into())));
        assert_eq!(header.comments, ["  a comment"]);
        assert_eq!(header.history, ["made by a test"]);
        assert_eq!(header.get("DATE-OBS"), Some(&Value::Text("2024-01-01".into())), "the first card of a keyword");
        assert!(read_card(&mut header, &format!("{:<80}", "END")));
    }
}
