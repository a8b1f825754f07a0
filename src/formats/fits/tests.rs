//! The FITS parser on files made here card by card: what each image HDU becomes (shape, data
//! type, chunks as byte ranges holding its values, CF attributes), what is left out, and hostile
//! headers (absurd NAXIS, overflowing sizes, no END, data past the end, binary garbage), each a
//! `FormatError` saying what is wrong.

use bytes::Bytes;
use proptest::strategy::Strategy;
use serde_json::json;

use super::{BLOCK, parse};
use crate::formats::{Chunk, FormatError, Limits, Parsed};

/// A header of `cards` (and END), blank-padded to whole blocks.
fn header(cards: &[String]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for card in cards.iter().map(String::as_str).chain(["END"]) {
        bytes.extend_from_slice(format!("{card:<80}").as_bytes());
    }
    bytes.resize(bytes.len().div_ceil(BLOCK as usize) * BLOCK as usize, b' ');
    bytes
}

/// An HDU: its header and its data, zero-padded to whole blocks.
fn hdu(cards: &[String], data: &[u8]) -> Vec<u8> {
    let mut bytes = header(cards);
    bytes.extend_from_slice(data);
    bytes.resize(bytes.len().div_ceil(BLOCK as usize) * BLOCK as usize, 0);
    bytes
}

fn card(keyword: &str, value: impl std::fmt::Display) -> String {
    format!("{keyword:<8}= {value:>20}")
}

/// The structural cards of an image: SIMPLE (or XTENSION = 'IMAGE'), BITPIX, NAXISn.
fn image_cards(primary: bool, bitpix: i64, axes: &[u64]) -> Vec<String> {
    let mut cards = vec![if primary { card("SIMPLE", "T") } else { card("XTENSION", "'IMAGE   '") }];
    cards.push(card("BITPIX", bitpix));
    cards.push(card("NAXIS", axes.len()));
    for (n, length) in axes.iter().enumerate() {
        cards.push(card(&format!("NAXIS{}", n + 1), length));
    }
    if !primary {
        cards.push(card("PCOUNT", 0));
        cards.push(card("GCOUNT", 1));
    }
    cards
}

fn parsed(file: &[u8]) -> Parsed {
    parse(&Bytes::copy_from_slice(file), &Limits::default()).unwrap()
}

fn invalid(file: &[u8]) -> String {
    match parse(&Bytes::copy_from_slice(file), &Limits::default()) {
        Err(FormatError::Invalid(message)) => message,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// The bytes the array's chunks point at, in grid order, cut to the array's size.
fn values(file: &[u8], parsed: &Parsed, name: &str) -> Vec<u8> {
    let node = &parsed.nodes[name];
    let mut out = Vec::new();
    for (_, chunk) in &node.chunks {
        let Chunk::Range { offset, length } = chunk else { panic!("{chunk:?}") };
        out.extend_from_slice(&file[*offset as usize..(*offset + *length) as usize]);
    }
    out
}

#[test]
fn a_primary_float_image_is_one_array_of_its_big_endian_values() {
    let pixels: Vec<f32> = (0..12).map(|i| i as f32 / 4.0).collect();
    let data: Vec<u8> = pixels.iter().flat_map(|v| v.to_be_bytes()).collect();
    let mut cards = image_cards(true, -32, &[4, 3]);
    cards.push(card("OBJECT", "'M31     '"));
    cards.push(card("EXPTIME", "1.5E+01"));
    cards.push("COMMENT first".into());
    cards.push("COMMENT second".into());
    let file = hdu(&cards, &data);
    let parsed = parsed(&file);
    assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "PRIMARY"]);
    let meta = &parsed.nodes["PRIMARY"].metadata;
    assert_eq!(meta["shape"], json!([3, 4]), "NAXIS2, NAXIS1: the fastest axis last");
    assert_eq!(meta["data_type"], "float32");
    assert_eq!(meta["fill_value"], "NaN");
    assert_eq!(meta["codecs"], json!([{"name": "bytes", "configuration": {"endian": "big"}}]));
    assert_eq!(meta["dimension_names"], json!(["y", "x"]));
    assert_eq!(meta["chunk_grid"]["configuration"]["chunk_shape"], json!([3, 4]));
    let attributes = &meta["attributes"];
    assert_eq!(attributes["OBJECT"], "M31");
    assert_eq!(attributes["EXPTIME"], 15.0);
    assert_eq!(attributes["COMMENT"], "first\nsecond");
    assert!(attributes.get("NAXIS1").is_none() && attributes.get("SIMPLE").is_none(), "{attributes}");
    assert_eq!(values(&file, &parsed, "PRIMARY"), data);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
}

#[test]
fn bscale_bzero_and_blank_become_cf_attributes() {
    let mut cards = image_cards(true, 16, &[2, 2]);
    cards.push(card("BSCALE", "0.5"));
    cards.push(card("BZERO", "100.0"));
    cards.push(card("BLANK", -32768));
    let file = hdu(&cards, &[0, 1, 0, 2, 0x80, 0, 0, 4]);
    let meta = &parsed(&file).nodes["PRIMARY"].metadata;
    assert_eq!(meta["data_type"], "int16");
    let attributes = &meta["attributes"];
    assert_eq!((&attributes["scale_factor"], &attributes["add_offset"]), (&json!(0.5), &json!(100.0)));
    assert_eq!(attributes["_FillValue"], json!(-32768), "xarray decodes an integer fill from a JSON integer");
    assert_eq!(meta["fill_value"], json!(-32768));
    assert!(attributes.get("BSCALE").is_none() && attributes.get("BLANK").is_none());

    // BSCALE = 1 and BZERO = 0 change nothing: the values stay raw, as astropy leaves them.
    let mut plain = image_cards(true, 8, &[2]);
    plain.push(card("BSCALE", "1.0"));
    plain.push(card("BZERO", "0"));
    let meta = &parsed(&hdu(&plain, &[1, 2])).nodes["PRIMARY"].metadata;
    assert!(meta["attributes"].get("scale_factor").is_none(), "{meta:?}");
    assert_eq!(meta["codecs"], json!([{"name": "bytes"}]), "one byte has no endianness");

    let mut wrong = image_cards(true, 8, &[2]);
    wrong.push(card("BLANK", 300));
    let parsed = parsed(&hdu(&wrong, &[1, 2]));
    assert!(parsed.nodes["PRIMARY"].metadata["attributes"].get("_FillValue").is_none());
    assert!(parsed.warnings[0].contains("BLANK"), "{:?}", parsed.warnings);
}

#[test]
fn extensions_are_named_as_kerchunk_names_them_and_tables_are_left_out() {
    let mut file = hdu(&[card("SIMPLE", "T"), card("BITPIX", 8), card("NAXIS", 0), card("TELESCOP", "'HST'")], &[]);
    let mut sci = image_cards(false, 32, &[3, 2]);
    sci.push(card("EXTNAME", "'SCI'"));
    sci.push(card("EXTVER", 1));
    file.extend(hdu(&sci, &[7; 24]));
    let mut sci2 = image_cards(false, 32, &[5]);
    sci2.push(card("EXTNAME", "'SCI'"));
    sci2.push(card("EXTVER", 2));
    file.extend(hdu(&sci2, &[8; 20]));
    file.extend(hdu(&image_cards(false, -64, &[3]), &[9; 24]));
    let table = [
        card("XTENSION", "'BINTABLE'"),
        card("BITPIX", 8),
        card("NAXIS", 2),
        card("NAXIS1", 4),
        card("NAXIS2", 3),
        card("PCOUNT", 0),
        card("GCOUNT", 1),
        card("TFIELDS", 1),
        card("EXTNAME", "'EVENTS'"),
    ];
    file.extend(hdu(&table, &[0; 12]));
    let mut compressed = table.to_vec();
    compressed[8] = card("ZIMAGE", "T");
    file.extend(hdu(&compressed, &[0; 12]));
    let parsed = parsed(&file);
    assert_eq!(parsed.nodes.keys().collect::<Vec<_>>(), ["", "3", "SCI", "SCI_2"]);
    assert_eq!(parsed.nodes[""].metadata["attributes"], json!({"TELESCOP": "HST"}), "a data-less primary header");
    assert_eq!(parsed.nodes["SCI"].metadata["dimension_names"], json!(["y", "x"]));
    assert_eq!(parsed.nodes["SCI_2"].metadata["dimension_names"], json!(["SCI_2_x"]), "x of another length");
    assert_eq!(parsed.nodes["3"].metadata["dimension_names"], json!(["x"]), "x of SCI's length");
    assert_eq!(parsed.nodes["3"].metadata["data_type"], "float64");
    assert_eq!(values(&file, &parsed, "SCI_2"), [8; 20]);

    // Names Zarr reserves, and an EXTNAME that spells the name a repeated one would get.
    let mut file = hdu(&image_cards(true, 8, &[1]), &[1]);
    for extname in ["'zarr.json'", "'__meta'", "'A_2'", "'A'", "'A'"] {
        let mut cards = image_cards(false, 8, &[1]);
        cards.push(card("EXTNAME", extname));
        file.extend(hdu(&cards, &[2]));
    }
    let names: Vec<String> = parse(&Bytes::from(file), &Limits::default()).unwrap().nodes.into_keys().collect();
    assert_eq!(names, ["", "1", "2", "A", "A_2", "A_5", "PRIMARY"]);
    assert_eq!(parsed.warnings.len(), 2, "{:?}", parsed.warnings);
    assert!(parsed.warnings[0].contains("HDU 4 (\"EVENTS\")") && parsed.warnings[0].contains("BINTABLE"));
    assert!(parsed.warnings[1].contains("HDU 5") && parsed.warnings[1].contains("tile-compressed"));
}

#[test]
fn large_images_are_cut_along_their_slowest_axes_into_contiguous_chunks() {
    // 64 planes of 1000 x 1000 int16 (2 MB a plane): two planes a chunk, each a byte range.
    let axes = [1000, 1000, 64];
    let cards = image_cards(true, 16, &axes);
    let head = header(&cards);
    let data_len = 2 * 1000 * 1000 * 64;
    let mut file = head.clone();
    file.resize(head.len() + data_len, 0);
    let parsed = parsed(&file);
    let node = &parsed.nodes["PRIMARY"];
    assert_eq!(node.metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([2, 1000, 1000]));
    assert_eq!(node.metadata["dimension_names"], json!(["z", "y", "x"]));
    assert_eq!(node.chunks.len(), 32);
    assert_eq!(
        node.chunks[1],
        (vec![1, 0, 0], Chunk::Range { offset: head.len() as u64 + 4_000_000, length: 4_000_000 })
    );

    // A prime number of 100 KB rows with no bytes after them: no near-target cut ends at the
    // data's end, so the rows go one a chunk (a divisor).
    let cards = image_cards(true, -32, &[25_000, 101]);
    let head = header(&cards);
    let mut file = head.clone();
    file.resize(head.len() + 4 * 25_000 * 101, 0);
    let node = &parse(&Bytes::from(file.clone()), &Limits::default()).unwrap().nodes["PRIMARY"];
    assert_eq!(node.metadata["chunk_grid"]["configuration"]["chunk_shape"], json!([1, 25_000]));
    // The same rows padded to a block: 41 rows a chunk, the last one reaching into the padding.
    file.resize(file.len().div_ceil(BLOCK as usize) * BLOCK as usize + 41 * 100_000, 0);
    let node = &parse(&Bytes::from(file.clone()), &Limits::default()).unwrap().nodes["PRIMARY"];
    let shape = &node.metadata["chunk_grid"]["configuration"]["chunk_shape"];
    let rows = shape[0].as_u64().unwrap();
    assert!((10..=83).contains(&rows) && shape[1] == 25_000, "{shape}");
    let Chunk::Range { offset, length } = node.chunks.last().unwrap().1 else { panic!() };
    assert!(offset + length <= file.len() as u64);
}

#[test]
fn hostile_headers_are_refused_saying_why() {
    let naxis = hdu(&[card("SIMPLE", "T"), card("BITPIX", 16), card("NAXIS", 100_000)], &[]);
    assert!(invalid(&naxis).contains("NAXIS = 100000"), "{}", invalid(&naxis));
    let overflow = hdu(&image_cards(true, 64, &[1 << 40, 1 << 40]), &[]);
    assert!(invalid(&overflow).contains("overflows"), "{}", invalid(&overflow));
    let huge = hdu(&image_cards(true, 64, &[1 << 20, 1 << 20]), &[]);
    assert!(invalid(&huge).contains("past the end"), "{}", invalid(&huge));
    let negative = hdu(&[card("SIMPLE", "T"), card("BITPIX", 16), card("NAXIS", 1), card("NAXIS1", -4)], &[]);
    assert!(invalid(&negative).contains("NAXIS1 = -4 is negative"));
    let bitpix = hdu(&image_cards(true, 24, &[4]), &[0; 12]);
    assert!(invalid(&bitpix).contains("BITPIX = 24"));
    let missing = hdu(&[card("SIMPLE", "T"), card("BITPIX", 16), card("NAXIS", 2), card("NAXIS1", 4)], &[]);
    assert!(invalid(&missing).contains("no NAXIS2"));
    let text = hdu(&[card("SIMPLE", "T"), card("BITPIX", 16), card("NAXIS", "'two'")], &[]);
    assert!(invalid(&text).contains("not an integer"));

    // No END: the header runs to the end of the file, or into bytes that are not text.
    let mut no_end: Vec<u8> = image_cards(true, 8, &[4]).iter().flat_map(|c| format!("{c:<80}").into_bytes()).collect();
    no_end.resize(BLOCK as usize, b' ');
    assert!(invalid(&no_end).contains("no END card"), "{}", invalid(&no_end));
    let mut into_binary = no_end.clone();
    into_binary.extend([0xFFu8; 2880]);
    assert!(invalid(&into_binary).contains("0xff"), "{}", invalid(&into_binary));
    assert!(invalid(&header(&image_cards(true, 8, &[4]))[..100]).contains("no END card"));
    assert!(invalid(b"").contains("no END card"));

    // Data past the end, in an extension.
    let mut file = hdu(&image_cards(true, 8, &[]), &[]);
    file.extend(header(&image_cards(false, 32, &[1000])));
    file.extend([0; 100]);
    assert!(invalid(&file).contains("HDU 1") && invalid(&file).contains("past the end"));
    // An extension that is not one.
    let mut file = hdu(&image_cards(true, 8, &[]), &[]);
    file.extend(hdu(&[card("XTENSIO", "'IMAGE'")], &[]));
    assert!(parsed(&file).warnings[0].contains("not a FITS extension"));
    // An IMAGE extension whose GCOUNT is 0 (the fuzzer's find: its first GCOUNT card, which is
    // the one read, says 0) declares no data: its image would be read past the file.
    let mut file = hdu(&image_cards(true, 8, &[]), &[]);
    let mut cards = image_cards(false, -64, &[4, 3, 2]);
    cards.retain(|c| !c.starts_with("GCOUNT"));
    cards.push(card("GCOUNT", 0));
    cards.push(card("GCOUNT", 1));
    file.extend(hdu(&cards, &[]));
    assert!(invalid(&file).contains("larger than its data unit of 0 bytes"), "{}", invalid(&file));
    let not_simple = hdu(&[card("SIMPLEX", "T")], &[]);
    assert!(invalid(&not_simple).contains("not SIMPLE"));
}

#[test]
fn limits_bound_hdus_cards_and_chunks() {
    let mut file = hdu(&image_cards(true, 8, &[]), &[]);
    for _ in 0..5 {
        file.extend(hdu(&image_cards(false, 8, &[2]), &[1, 2]));
    }
    let few = Limits { max_nodes: 3, ..Limits::default() };
    assert!(
        matches!(parse(&Bytes::from(file.clone()), &few), Err(FormatError::TooLarge(m)) if m.contains("max_nodes"))
    );
    let mut cards = image_cards(true, 8, &[2]);
    cards.extend((0..50).map(|i| card(&format!("KEY{i}"), i)));
    let few = Limits { max_attributes: 10, ..Limits::default() };
    let result = parse(&Bytes::from(hdu(&cards, &[1, 2])), &few);
    assert!(matches!(result, Err(FormatError::TooLarge(m)) if m.contains("max_attributes")));
    let mut cards = image_cards(true, 8, &[2]);
    cards.extend((0..200).map(|i| format!("HISTORY step {i}")));
    let result = parse(&Bytes::from(hdu(&cards, &[1, 2])), &few);
    assert!(matches!(result, Err(FormatError::TooLarge(ref m)) if m.contains("more than 100 cards")), "{result:?}");
    let many = hdu(&image_cards(true, 8, &[5_000_000, 4]), &vec![0; 20_000_000]);
    let few = Limits { max_chunks: 3, ..Limits::default() };
    let result = parse(&Bytes::from(many), &few);
    assert!(matches!(result, Err(FormatError::TooLarge(ref m)) if m.contains("max_chunks")), "{result:?}");
}

/// Parses `file`: an error or a hierarchy whose every chunk lies inside the file.
fn survives(file: &[u8]) {
    if let Ok(parsed) = parse(&Bytes::copy_from_slice(file), &Limits::default()) {
        for node in parsed.nodes.values() {
            for (_, chunk) in &node.chunks {
                let Chunk::Range { offset, length } = chunk else { panic!("{chunk:?}") };
                assert!(offset + length <= file.len() as u64);
            }
        }
    }
}

#[test]
fn every_truncation_and_byte_flip_is_survived() {
    for name in ["scaled", "multi"] {
        let file = fixture(name);
        for cut in 0..file.len() {
            survives(&file[..cut]);
        }
        // The headers (the first block of each of the file's HDUs).
        for at in (0..file.len()).filter(|at| at % (BLOCK as usize) < 1200) {
            for flip in [0xFF, 0x80, 0x01, 0x10] {
                let mut flipped = file.clone();
                flipped[at] ^= flip;
                survives(&flipped);
            }
        }
    }
}

proptest::proptest! {
    /// Headers of the structural keywords with any values, in any order and number.
    #[test]
    fn random_headers_are_survived(
        cards in proptest::collection::vec(
            (proptest::sample::select(vec![
                "BITPIX", "NAXIS", "NAXIS1", "NAXIS2", "NAXIS3", "BSCALE", "BZERO", "BLANK", "EXTNAME",
                "EXTVER", "PCOUNT", "GCOUNT", "GROUPS", "ZIMAGE", "CONTINUE", "END", "XTENSION", "HISTORY",
            ]),
            proptest::prop_oneof![
                proptest::prelude::any::<i64>().prop_map(|v| v.to_string()),
                (0i64..5).prop_map(|v| v.to_string()),
                proptest::sample::select(vec!["'IMAGE'", "'BINTABLE'", "T", "F", "-32", "16", "'a&'", "1.5D3", "'"])
                    .prop_map(str::to_owned),
            ]),
            0..24,
        ),
        data in 0usize..6000,
        extension in proptest::prelude::any::<bool>(),
    ) {
        let mut file = Vec::new();
        let first = if extension {
            file = hdu(&image_cards(true, 8, &[]), &[]);
            card("XTENSION", "'IMAGE'")
        } else {
            card("SIMPLE", "T")
        };
        let all: Vec<String> =
            std::iter::once(first).chain(cards.iter().map(|(keyword, value)| card(keyword, value))).collect();
        file.extend(header(&all));
        file.resize(file.len() + data, 7);
        survives(&file);
    }
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/fixtures/files/fits_{name}.fits", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// What astropy reads from the files `make_fits.py` writes with it.
#[test]
fn files_astropy_writes_read_as_astropy_reads_them() {
    let file = fixture("scaled");
    let scaled = parsed(&file);
    let meta = &scaled.nodes["PRIMARY"].metadata;
    assert_eq!((&meta["shape"], &meta["data_type"]), (&json!([6, 5]), &json!("int16")));
    let attributes = &meta["attributes"];
    assert_eq!(attributes["LONGSTR"], "x".repeat(100), "a long string over CONTINUE cards");
    assert_eq!(attributes["ESO DET CHIP"], "CCD", "a HIERARCH keyword, as astropy names it");
    assert_eq!((&attributes["scale_factor"], &attributes["add_offset"]), (&json!(0.5), &json!(3.0)));
    assert_eq!(attributes["_FillValue"], -32768);
    let raw: Vec<i16> =
        values(&file, &scaled, "PRIMARY").chunks_exact(2).map(|v| i16::from_be_bytes([v[0], v[1]])).collect();
    let expected: Vec<i16> = (0..30).map(|i| if i == 13 { i16::MIN } else { i - 10 }).collect();
    assert_eq!(raw, expected);

    let file = fixture("multi");
    let multi = parsed(&file);
    assert_eq!(multi.nodes.keys().collect::<Vec<_>>(), ["", "SCI"]);
    let sci = &multi.nodes["SCI"];
    assert_eq!(sci.chunks, [(vec![0, 0, 0], Chunk::Range { offset: 5760, length: 96 })], "astropy's datLoc");
    let floats: Vec<f32> =
        values(&file, &multi, "SCI").chunks_exact(4).map(|v| f32::from_be_bytes([v[0], v[1], v[2], v[3]])).collect();
    assert_eq!(floats, (0..24).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(multi.warnings.len(), 1);
    assert!(multi.warnings[0].starts_with("HDU 2 (\"EVENTS\"): a BINTABLE extension is left out"));
}
