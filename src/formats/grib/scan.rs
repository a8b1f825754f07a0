//! GRIB2 messages found and their headers read, never their data: a message's section 0 gives
//! its length (so the next message is found without reading this one's data), its sections 1
//! to 5 are read whole (they are small), its bitmap section only up to its indicator, its data
//! section not at all. With a sidecar index the messages' offsets are known at once, and their
//! headers are read side by side instead of one after another.
//!
//! Each header is checked here (lengths inside the message, sections in order, one field per
//! message) before gribberish sees it, so that what gribberish reads is always well formed.

use rayon::prelude::*;

use crate::formats::{ByteRanges, FormatError, Limits};

/// The most bytes one header section may take (a grid section listing a reduced Gaussian
/// grid's rows is the largest real one: a few KiB).
const MAX_SECTION: u64 = 1 << 20;

/// How far past a message's end the next one is looked for (some centres pad between
/// messages, or prefix each with a bulletin heading).
const MAX_GAP: u64 = 64 << 10;

/// One GRIB2 message as the layout needs it.
#[derive(Debug, Clone)]
pub struct Message {
    /// Where the message starts in the file, and its length (its chunk's byte range).
    pub offset: u64,
    pub length: u64,
    /// Sections 0 to 6 (the bitmap section cut to its indicator) and an empty data section:
    /// a well-formed message without data, which gribberish reads metadata from.
    pub header: Vec<u8>,
    /// Grid points (section 3) and data representation template (section 5).
    pub points: u64,
    pub packing: u16,
}

/// What one position of the file holds.
enum Found {
    Message(Box<Message>),
    /// A message left out (GRIB edition 1, several fields in one message), and why.
    Skipped {
        length: u64,
        why: String,
    },
}

/// Every message of `file`, read from its start.
pub fn scan(file: &dyn ByteRanges, limits: &Limits, warnings: &mut Vec<String>) -> Result<Vec<Message>, FormatError> {
    let len = file.len();
    let mut offset = 0u64;
    let mut messages = Vec::new();
    while offset < len {
        limits.check_time()?;
        let Some(start) = next_start(file, offset)? else { break };
        if start != offset && offset == 0 {
            warnings.push(format!("its first {start} bytes come before its first GRIB message and are ignored"));
        }
        let length = match read_message(file, start)? {
            Found::Message(message) => {
                let length = message.length;
                messages.push(*message);
                if messages.len() as u64 > limits.max_chunks {
                    return Err(FormatError::TooLarge(format!(
                        "it holds more than {} messages (limits.max_chunks)",
                        limits.max_chunks
                    )));
                }
                length
            }
            Found::Skipped { length, why } => {
                warnings.push(why);
                length
            }
        };
        offset = start + length;
    }
    if messages.is_empty() {
        return Err(FormatError::Invalid("it holds no GRIB2 message".into()));
    }
    Ok(messages)
}

/// The messages at `offsets` (from a sidecar index), their headers read side by side. An
/// offset that holds no GRIB message, or a message that does not end where the index says, is
/// `Err`: the caller reads the file from its start instead.
pub fn at_offsets(
    file: &dyn ByteRanges,
    offsets: &[(u64, Option<u64>)],
    limits: &Limits,
    warnings: &mut Vec<String>,
) -> Result<Vec<Message>, FormatError> {
    if offsets.len() as u64 > limits.max_chunks {
        return Err(FormatError::TooLarge(format!(
            "its index lists more than {} messages (limits.max_chunks)",
            limits.max_chunks
        )));
    }
    let found: Vec<Result<Found, FormatError>> = offsets
        .par_iter()
        .with_max_len(1)
        .map(|(offset, length)| {
            limits.check_time()?;
            let found = read_message(file, *offset)?;
            let actual = match &found {
                Found::Message(message) => message.length,
                Found::Skipped { length, .. } => *length,
            };
            match length {
                Some(length) if *length != actual => Err(FormatError::Invalid(format!(
                    "its index says the message at byte {offset} is {length} bytes long, but it is {actual}"
                ))),
                _ => Ok(found),
            }
        })
        .collect();
    let mut messages = Vec::with_capacity(found.len());
    let mut end = 0;
    for (found, (offset, _)) in found.into_iter().zip(offsets) {
        match found? {
            Found::Message(message) => {
                end = end.max(offset + message.length);
                messages.push(*message);
            }
            Found::Skipped { why, length } => {
                end = end.max(offset + length);
                warnings.push(why);
            }
        }
    }
    // An index written before the file grew lists none of the messages added.
    if end < file.len() && next_start(file, end)?.is_some() {
        return Err(FormatError::Invalid(format!("it lists no message at byte {end}, where the file has one")));
    }
    if messages.is_empty() {
        return Err(FormatError::Invalid("its index lists no GRIB2 message".into()));
    }
    Ok(messages)
}

/// Where the next message starts, at `offset` or a little after it; `None` when only padding
/// (zeros, spaces, line ends) is left.
fn next_start(file: &dyn ByteRanges, offset: u64) -> Result<Option<u64>, FormatError> {
    let len = file.len();
    if file.read(offset, (len - offset).min(4))?.as_ref() == b"GRIB" {
        return Ok(Some(offset));
    }
    let window = file.read(offset, (len - offset).min(MAX_GAP + 4))?;
    if let Some(at) = memchr::memmem::find(&window, b"GRIB") {
        return Ok(Some(offset + at as u64));
    }
    if offset + (window.len() as u64) == len && window.iter().all(|b| matches!(b, 0 | b' ' | b'\r' | b'\n')) {
        return Ok(None);
    }
    Err(FormatError::Invalid(format!(
        "the bytes at {offset} are not a GRIB message (no \"GRIB\" follows within 64 KiB)"
    )))
}

fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b))
}

/// Checks the reference time of section 1 (year, month, day, hour, minute, second):
/// gribberish takes it for a date.
fn reference_time(time: &[u8]) -> Result<(), String> {
    let (year, month, day) = (be(&time[..2]) as i32, u32::from(time[2]), u32::from(time[3]));
    let valid =
        chrono::NaiveDate::from_ymd_opt(year, month, day).is_some() && time[4] < 24 && time[5] < 60 && time[6] < 60;
    if valid {
        Ok(())
    } else {
        Err(format!(
            "its reference time {year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} is not a time",
            time[4], time[5], time[6]
        ))
    }
}

/// The message at `offset`: its header read and checked.
fn read_message(file: &dyn ByteRanges, offset: u64) -> Result<Found, FormatError> {
    let at = |what: &str| format!("the message at byte {offset}: {what}");
    let indicator = file.read(offset, 16.min(file.len().saturating_sub(offset)))?;
    if indicator.len() < 8 || &indicator[..4] != b"GRIB" {
        return Err(FormatError::Invalid(at("it does not start with \"GRIB\"")));
    }
    match indicator[7] {
        2 => {}
        1 => {
            // GRIB1: the length is 3 bytes after the signature.
            let length = be(&indicator[4..7]);
            if length < 8 || offset.checked_add(length).is_none_or(|end| end > file.len()) {
                return Err(FormatError::Invalid(at(&format!(
                    "a GRIB1 message of {length} bytes, past the end of the file (truncated?)"
                ))));
            }
            return Ok(Found::Skipped {
                length,
                why: at("it is GRIB edition 1, which is not virtualized; it is left out"),
            });
        }
        edition => {
            return Err(FormatError::Invalid(at(&format!("GRIB edition {edition} is not one this server reads"))));
        }
    }
    if indicator.len() < 16 {
        return Err(FormatError::Invalid(at("the file ends inside its indicator section (truncated?)")));
    }
    let length = be(&indicator[8..16]);
    let end = offset.checked_add(length).filter(|end| *end <= file.len()).ok_or_else(|| {
        FormatError::Invalid(at(&format!(
            "it says it is {length} bytes long, past the end of the file at {} (truncated?)",
            file.len()
        )))
    })?;
    if length < 16 + 4 {
        return Err(FormatError::Invalid(at(&format!(
            "it says it is {length} bytes long, shorter than a message can be"
        ))));
    }
    if file.read(end - 4, 4)?.as_ref() != b"7777" {
        return Err(FormatError::Invalid(at(
            "it does not end with \"7777\" where its length says (truncated or corrupt)",
        )));
    }
    let mut header = indicator.to_vec();
    let mut position = offset + 16;
    let mut last = 0u8;
    let (mut points, mut packing, mut data) = (None, None, false);
    while position < end - 4 {
        if end - 4 - position < 5 {
            return Err(FormatError::Invalid(at(&format!(
                "a section at byte {position} is cut short by the message's end"
            ))));
        }
        let head = file.read(position, 5)?;
        let (section_length, number) = (be(&head[..4]), head[4]);
        if section_length < 5 || section_length > end - 4 - position {
            return Err(FormatError::Invalid(at(&format!(
                "its section {number} at byte {position} says it is {section_length} bytes long, which does not fit \
                 in the message"
            ))));
        }
        if data && number != 7 {
            return Ok(Found::Skipped {
                length,
                why: at(
                    "it holds several fields (its sections repeat after the data), which is not virtualized; it is left out",
                ),
            });
        }
        let in_order = match number {
            1 => last == 0,
            2 => last == 1,
            3 => matches!(last, 1 | 2),
            4 => last == 3,
            5 => last == 4,
            6 => last == 5,
            7 => last == 6,
            _ => false,
        };
        if !in_order {
            return Err(FormatError::Invalid(at(&format!("its section {number} at byte {position} is out of order"))));
        }
        last = number;
        match number {
            6 => {
                let indicator = file.read(position + 5, 1)?[0];
                // 0: a bitmap follows; 254: the message's previous bitmap applies.
                let bitmap = matches!(indicator, 0 | 254);
                header.extend_from_slice(&[0, 0, 0, 6, 6, if bitmap { 0 } else { 255 }]);
            }
            7 => data = true,
            _ if section_length > MAX_SECTION => {
                return Err(FormatError::TooLarge(at(&format!(
                    "its section {number} is {section_length} bytes long, more than the {MAX_SECTION} read of a header section"
                ))));
            }
            _ => {
                let section = file.read(position, section_length)?;
                match number {
                    1 if section_length >= 19 => {
                        if let Err(why) = reference_time(&section[12..19]) {
                            return Ok(Found::Skipped { length, why: at(&format!("{why}; it is left out")) });
                        }
                    }
                    3 if section_length >= 14 => {
                        points = Some(be(&section[6..10]));
                    }
                    5 if section_length >= 11 => {
                        packing = Some(be(&section[9..11]) as u16);
                        let values = be(&section[5..9]);
                        points = points.filter(|p| values <= *p);
                        if points.is_none() {
                            return Err(FormatError::Invalid(at(&format!(
                                "its data representation section says it holds {values} values, more than its grid's points"
                            ))));
                        }
                    }
                    1 | 3 | 5 => {
                        return Err(FormatError::Invalid(at(&format!(
                            "its section {number} is too short ({section_length} bytes)"
                        ))));
                    }
                    _ => {}
                }
                header.extend_from_slice(&section);
            }
        }
        position += section_length;
    }
    if !data {
        return Err(FormatError::Invalid(at("it has no data section")));
    }
    let (Some(points), Some(packing)) = (points, packing) else {
        return Err(FormatError::Invalid(at("it has no grid or data representation section")));
    };
    // An empty data section, then the end section: the header is a message of its own.
    header.extend_from_slice(&[0, 0, 0, 5, 7]);
    header.extend_from_slice(b"7777");
    let total = header.len() as u64;
    header[8..16].copy_from_slice(&total.to_be_bytes());
    Ok(Found::Message(Box::new(Message { offset, length, header, points, packing })))
}
