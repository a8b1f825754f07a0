//! Hostile DMR++ documents: truncated, bent, malformed, absurd, deeply nested, entity-laden,
//! past every limit: always an error or a result, never a panic, in bounded time and memory.

use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;

use super::{MAIN, document, fixture, parse_body};
use crate::formats::dmrpp::parse;
use crate::formats::{FormatError, Limits};

#[test]
fn every_truncation_and_many_byte_flips_are_errors_not_panics() {
    let whole = fixture(MAIN);
    let end = whole.len() - 1; // the final newline
    for cut in (0..end).step_by(7) {
        let result = parse(&whole.slice(..cut), &Limits::default());
        assert!(result.is_err(), "cut at {cut} parsed");
    }
    for at in (0..whole.len()).step_by(5) {
        for byte in [b'<', b'>', b'"', b'&', b'/', b'9', 0xff, 0] {
            let mut bent = whole.to_vec();
            bent[at] = byte;
            let _ = parse(&Bytes::from(bent), &Limits::default());
        }
    }
}

pub(super) fn invalid(body: &str, says: &str) {
    match parse_body(body) {
        Err(FormatError::Invalid(m) | FormatError::TooLarge(m)) => assert!(m.contains(says), "{m:?} lacks {says:?}"),
        other => panic!("{body}: {other:?}"),
    }
}

const VAR: &str = "<Dimension name=\"x\" size=\"4\"/><Int16 name=\"v\"><Dim name=\"/x\"/>";

#[test]
fn hostile_documents_are_errors() {
    invalid("<Int16 name=\"v\"><Dim size=\"4\"/>", "not well-formed");
    invalid("<Int16 name=\"v\"></Float32>", "not well-formed");
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2</dmrpp:chunkDimensionSizes><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[4]\"/></dmrpp:chunks></Int16>"
        ),
        "v: chunkPositionInArray [4]",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2</dmrpp:chunkDimensionSizes><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[1]\"/></dmrpp:chunks></Int16>"
        ),
        "not the start of a chunk",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2</dmrpp:chunkDimensionSizes><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[0]\"/><dmrpp:chunk offset=\"1\" nBytes=\"2\" chunkPositionInArray=\"[0]\"/></dmrpp:chunks></Int16>"
        ),
        "same position",
    );
    invalid(
        &format!("{VAR}<dmrpp:chunks><dmrpp:chunk offset=\"-1\" nBytes=\"2\"/></dmrpp:chunks></Int16>"),
        "\"-1\" is not an unsigned integer",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunk offset=\"18446744073709551615\" nBytes=\"2\"/></dmrpp:chunks></Int16>"
        ),
        "past 2^64",
    );
    invalid(
        &format!("{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>0</dmrpp:chunkDimensionSizes></dmrpp:chunks></Int16>"),
        "do not fit",
    );
    invalid(
        &format!(
            "{VAR}<dmrpp:chunks><dmrpp:chunkDimensionSizes>2 2</dmrpp:chunkDimensionSizes></dmrpp:chunks></Int16>"
        ),
        "do not fit",
    );
    invalid(&format!("{VAR}<dmrpp:chunks fillValue=\"x\"/></Int16>"), "fillValue");
    invalid(
        &format!("{VAR}<dmrpp:chunks fillValue=\"40000\"/></Int16>"),
        "fillValue \"40000\" is not a value of type Int16",
    );
    invalid("<Int16 name=\"v\"><Dim name=\"/nowhere\"/></Int16>", "not declared");
    invalid("<Dimension name=\"x\" size=\"-4\"/>", "not an unsigned integer");
    let huge =
        "<Dimension name=\"a\" size=\"4294967296\"/><Float64 name=\"v\"><Dim name=\"/a\"/><Dim name=\"/a\"/></Float64>";
    invalid(huge, "more bytes than a 64-bit count");
    invalid("<Int16 name=\"a/b\"/>", "cannot name a Zarr node");
    invalid("<Int16 name=\"v\"/><Int16 name=\"v\"/>", "two nodes");
    invalid("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:compact>AAAA</dmrpp:compact></Int16>", "holds 3 bytes");
    invalid("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:compact>!!!!</dmrpp:compact></Int16>", "not base64");
    invalid(
        "<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:missingdata>AAAA</dmrpp:missingdata></Int16>",
        "does not inflate",
    );
    // A zlib bomb: 16 MiB of zeros where 4 bytes are wanted.
    let bomb = base64::engine::general_purpose::STANDARD.encode(deflate(&vec![0u8; 16 << 20]));
    invalid(
        &format!("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:missingdata>{bomb}</dmrpp:missingdata></Int16>"),
        "more than its shape needs",
    );
    let small_bomb = base64::engine::general_purpose::STANDARD.encode(deflate(&[0u8; 64]));
    invalid(
        &format!("<Int16 name=\"v\"><Dim size=\"2\"/><dmrpp:missingdata>{small_bomb}</dmrpp:missingdata></Int16>"),
        "inflates to 5 bytes",
    );
    assert!(matches!(parse(&Bytes::from_static(b""), &Limits::default()), Err(FormatError::Invalid(_))));
    assert!(matches!(
        parse(&Bytes::from_static(b"<?xml version=\"1.0\"?><Other/>"), &Limits::default()),
        Err(FormatError::Invalid(_))
    ));
    assert!(matches!(
        parse(&Bytes::from(document("").to_vec().repeat(2)), &Limits::default()),
        Err(FormatError::Invalid(_))
    ));
}

pub(super) fn deflate(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn entities_are_never_expanded() {
    let doc = "<?xml version=\"1.0\"?><!DOCTYPE Dataset [<!ENTITY lol \"lollollollollol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;\">]>\
               <Dataset name=\"t\"><Attribute name=\"a\" type=\"String\"><Value>&lol2;</Value></Attribute></Dataset>";
    let result = parse(&Bytes::from_static(doc.as_bytes()), &Limits::default());
    assert!(matches!(result, Err(FormatError::Invalid(m)) if m.contains("&lol2;")));
    let doc = "<Dataset name=\"&lol;\"/>";
    assert!(matches!(parse(&Bytes::from_static(doc.as_bytes()), &Limits::default()), Err(FormatError::Invalid(_))));
}

#[test]
fn limits_bound_depth_counts_and_time() {
    let deep = format!("{}{}", "<Group name=\"g\">".repeat(100), "</Group>".repeat(100));
    assert!(matches!(parse_body(&deep), Err(FormatError::TooLarge(m)) if m.contains("max_depth")));
    let nested = format!("{}{}", "<Attribute name=\"a\" type=\"Container\">".repeat(100), "</Attribute>".repeat(100));
    assert!(matches!(parse_body(&nested), Err(FormatError::TooLarge(m)) if m.contains("max_depth")));
    let limits = Limits { max_attributes: 100, ..Limits::default() };
    let many = "<Attribute name=\"a\" type=\"Int32\"><Value>1</Value></Attribute>".repeat(101);
    assert!(matches!(parse(&document(&many), &limits), Err(FormatError::TooLarge(m)) if m.contains("max_attributes")));
    let xml_attributes: String = (0..100).map(|i| format!(" a{i}=\"\"")).collect();
    assert!(matches!(parse_body(&format!("<Int16 name=\"v\"{xml_attributes}/>")), Err(FormatError::TooLarge(_))));
    let limits = Limits { max_nodes: 10, ..Limits::default() };
    let nodes: String = (0..11).map(|i| format!("<Int16 name=\"v{i}\"/>")).collect();
    assert!(matches!(parse(&document(&nodes), &limits), Err(FormatError::TooLarge(m)) if m.contains("max_nodes")));
    let limits = Limits { max_chunks: 10, ..Limits::default() };
    assert!(matches!(parse(&fixture(MAIN), &limits), Err(FormatError::TooLarge(m)) if m.contains("max_chunks")));
    let limits = Limits { max_inline_bytes: 8, ..Limits::default() };
    let parsed = parse(&fixture(MAIN), &limits).unwrap();
    assert!(!parsed.nodes.contains_key("compact"));
    assert!(parsed.warnings.iter().any(|w| w.starts_with("compact:") && w.contains("max_inline_bytes")));
    let limits = Limits { deadline: Some(Instant::now() - Duration::from_secs(1)), ..Limits::default() };
    let big = document(&"<Attribute name=\"a\" type=\"Int32\"><Value>1</Value></Attribute>".repeat(2000));
    assert!(matches!(parse(&big, &limits), Err(FormatError::TooLarge(_))));
}

proptest::proptest! {
    #[test]
    fn any_bytes_give_a_result_not_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        let _ = parse(&Bytes::from(bytes), &Limits::default());
    }

    #[test]
    fn any_splice_of_a_real_document_gives_a_result(at in 0usize..11000, len in 0usize..64, fill in proptest::prelude::any::<u8>()) {
        let mut doc = fixture(MAIN).to_vec();
        let at = at.min(doc.len());
        let end = (at + len).min(doc.len());
        doc.splice(at..end, std::iter::repeat_n(fill, len / 2));
        let _ = parse(&Bytes::from(doc), &Limits::default());
    }
}
