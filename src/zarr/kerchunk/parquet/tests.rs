//! The parquet reader on files written with kerchunk's schema.
use std::sync::Arc;

use ::parquet::basic::{Compression, ZstdLevel};
use ::parquet::data_type::ByteArray;
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use ::parquet::schema::parser::parse_message_type;
use serde_json::json;

use super::*;

/// A row as kerchunk writes it.
#[derive(Clone, Copy)]
enum R<'a> {
    Null,
    Url(&'a str, i64, i64),
    Raw(&'a [u8]),
}

/// A `refs.k.parq` file with kerchunk's schema, in row groups of `group` rows.
fn refs_file(rows: &[R], group: usize) -> Vec<u8> {
    let schema = parse_message_type(
        "message schema { OPTIONAL BYTE_ARRAY path (UTF8); REQUIRED INT64 offset; REQUIRED INT64 size; \
         OPTIONAL BYTE_ARRAY raw; }",
    )
    .unwrap();
    let props = WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default())).build();
    let mut out = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut out, Arc::new(schema), Arc::new(props)).unwrap();
    for rows in rows.chunks(group) {
        let mut rg = writer.next_row_group().unwrap();
        let bytes = |f: fn(R) -> Option<Vec<u8>>| {
            let defs: Vec<i16> = rows.iter().map(|r| i16::from(f(*r).is_some())).collect();
            let values: Vec<ByteArray> = rows.iter().filter_map(|r| f(*r)).map(ByteArray::from).collect();
            (defs, values)
        };
        let (defs, values) = bytes(|r| if let R::Url(p, ..) = r { Some(p.as_bytes().to_vec()) } else { None });
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<ByteArrayType>().write_batch(&values, Some(&defs), None).unwrap();
        col.close().unwrap();
        for f in
            [|r: &R| if let R::Url(_, o, _) = r { *o } else { 0 }, |r: &R| if let R::Url(.., s) = r { *s } else { 0 }]
        {
            let values: Vec<i64> = rows.iter().map(f).collect();
            let mut col = rg.next_column().unwrap().unwrap();
            col.typed::<Int64Type>().write_batch(&values, None, None).unwrap();
            col.close().unwrap();
        }
        let (defs, values) = bytes(|r| if let R::Raw(b) = r { Some(b.to_vec()) } else { None });
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<ByteArrayType>().write_batch(&values, Some(&defs), None).unwrap();
        col.close().unwrap();
        rg.close().unwrap();
    }
    writer.close().unwrap();
    out
}

fn tar(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data) in entries {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        builder.append_data(&mut header, path, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn zmetadata(record_size: u64) -> Vec<u8> {
    let zarray = |shape: Value, chunks: Value| {
        json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<f4", "fill_value": null,
               "order": "C", "filters": null, "compressor": null, "dimension_separator": "."})
    };
    let meta = json!({"metadata": {
        ".zgroup": {"zarr_format": 2},
        ".zattrs": {"title": "parquet"},
        "g/air/.zarray": zarray(json!([4, 6]), json!([2, 2])),
        "g/air/.zattrs": {"_ARRAY_DIMENSIONS": ["y", "x"]},
        "s/.zarray": zarray(json!([]), json!([])),
        "s/.zattrs": {"_ARRAY_DIMENSIONS": [], "_FillValue": "NAN_TOKEN"},
    }, "record_size": record_size});
    meta.to_string().replace("\"NAN_TOKEN\"", "NaN").into_bytes()
}

fn entries(doc: &Document, array: &str) -> Vec<(Vec<u64>, RawRef)> {
    doc.nodes[array].manifest.as_ref().unwrap().entries().unwrap()
}

#[test]
fn rows_are_chunks_in_c_order_across_files() {
    // g/air has a 2 x 3 chunk grid: refs.0 holds chunks 0..4, refs.1 chunks 4..6 and 2 padding rows.
    let file0 = refs_file(&[R::Url("/d/a.nc", 10, 5), R::Raw(b"abc"), R::Null, R::Url("s3://b/whole.nc", 0, 0)], 3);
    let file1 = refs_file(&[R::Url("/d/a.nc", 20, 5), R::Url("/d/b.nc", 0, 7), R::Null, R::Null], 4);
    let scalar = refs_file(&[R::Raw(b"\0\0\xc0\x7f"), R::Null, R::Null, R::Null], 4);
    // .zmetadata last, under a leading directory: the parquet files wait for it.
    let body = tar(&[
        ("refs.parq/g/air/refs.1.parq", &file1),
        ("refs.parq/s/refs.0.parq", &scalar),
        ("refs.parq/g/air/refs.0.parq", &file0),
        ("refs.parq/.zmetadata", &zmetadata(4)),
    ]);
    // The files that wait are kept like references: in memory, or past the budget on disk.
    let on_disk = parse_tar(body.as_slice(), &Scratch::new(0, None)).unwrap();
    let doc = parse_tar(body.as_slice(), &Scratch::in_memory()).unwrap();
    assert_eq!(entries(&on_disk, "g/air"), entries(&doc, "g/air"));
    assert!(doc.problems.is_empty(), "{:?}", doc.problems.clone().into_vec());
    assert_eq!(doc.nodes.keys().collect::<Vec<_>>(), ["", "g/air", "s"]);
    assert_eq!(doc.nodes[""].metadata()["attributes"], json!({"title": "parquet"}));
    assert_eq!(doc.nodes["g/air"].metadata()["dimension_names"], json!(["y", "x"]));
    assert_eq!(doc.nodes["s"].metadata()["attributes"]["_FillValue"], "AAAAAAAA+H8=", "bare NaN read");
    let air = entries(&doc, "g/air");
    let url = |u: &str| doc.urls.all().iter().position(|x| &**x == u).unwrap() as u32;
    assert_eq!(air.len(), 5);
    assert_eq!(air[0], (vec![1, 1], RawRef::Virtual { url: url("file:///d/a.nc"), offset: 20, length: 5 }));
    assert_eq!(air[1], (vec![1, 2], RawRef::Virtual { url: url("file:///d/b.nc"), offset: 0, length: 7 }));
    assert_eq!(air[2], (vec![0, 0], RawRef::Virtual { url: url("file:///d/a.nc"), offset: 10, length: 5 }));
    assert!(matches!(air[3], (ref k, RawRef::Inline { len: 3, .. }) if k == &[0, 1]));
    assert_eq!(air[4], (vec![1, 0], RawRef::Virtual { url: url("s3://b/whole.nc"), offset: 0, length: WHOLE_OBJECT }));
    let scalar = entries(&doc, "s");
    assert_eq!(scalar.len(), 1);
    assert!(matches!(scalar[0], (ref k, RawRef::Inline { len: 4, .. }) if k.is_empty()));
}

#[test]
fn bad_files_are_problems_naming_them() {
    let ok = refs_file(&[R::Url("/d/a.nc", 0, 4)], 1);
    let too_long = refs_file(&[R::Null; 5], 5);
    let padded = refs_file(&[R::Null, R::Null, R::Url("/d/a.nc", 0, 4), R::Null], 4);
    let negative = refs_file(&[R::Url("/d/a.nc", -1, 4), R::Url("data/rel.nc", 0, 4)], 2);
    let mut truncated = ok.clone();
    truncated.truncate(ok.len() - 9);
    let mut flipped = ok.clone();
    let middle = flipped.len() / 2;
    flipped[4..middle].iter_mut().for_each(|b| *b ^= 0x5a);
    let mut meta: Value = serde_json::from_str(&String::from_utf8(zmetadata(4)).unwrap().replace("NaN", "0")).unwrap();
    meta["metadata"]["u/.zarray"] = json!({"shape": [2]});
    let body = tar(&[
        ("./.zmetadata", meta.to_string().as_bytes()),
        ("./u/refs.0.parq", &ok),
        ("./g/air/refs.0.parq", &negative),
        ("./g/air/refs.0.parq", &ok),
        ("./g/air/refs.1.parq", &padded),
        ("./g/air/refs.2.parq", b"PAR1 not really PAR1"),
        ("./g/air/refs.3.parq", &truncated),
        ("./g/air/refs.4.parq", &flipped),
        ("./s/refs.0.parq", &too_long),
        ("./t/refs.0.parq", &ok),
    ]);
    let doc = parse_tar(body.as_slice(), &Scratch::in_memory()).unwrap();
    let problems = doc.problems.into_vec().join("\n");
    for expected in [
        "g/air/refs.0.parq row 0: offset -1 and size 4 must be non-negative",
        "relative path \"data/rel.nc\"",
        "g/air/refs.0.parq: appears twice",
        "g/air/refs.1.parq row 2: chunk number 6 is outside the chunk grid [2, 3] of array g/air",
        "g/air/refs.2.parq: not a valid kerchunk parquet file",
        "g/air/refs.3.parq: not a valid kerchunk parquet file",
        "g/air/refs.4.parq: not a valid kerchunk parquet file",
        "s/refs.0.parq: not a valid kerchunk parquet file (5 rows, more than the record_size 4",
        "t/refs.0.parq: .zmetadata has no .zarray for array \"t\"",
        "array \"u\": `.zarray` has no chunks",
    ] {
        assert!(problems.contains(expected), "{expected:?} not in\n{problems}");
    }
    assert!(!problems.contains("u/refs"), "an array whose metadata is reported once: {problems}");
}

#[test]
fn unusable_archives_are_refused() {
    let refused = |body: &[u8]| match parse_tar(body, &Scratch::in_memory()) {
        Err(ArchiveError::Invalid(why) | ArchiveError::NotTar(why)) => why,
        other => panic!("{other:?}"),
    };
    let file = refs_file(&[R::Null], 1);
    assert!(refused(&tar(&[("x/refs.0.parq", &file)])).contains("has no .zmetadata (found 1 refs.*.parq"));
    assert!(refused(&tar(&[])).contains("has no .zmetadata"));
    assert!(refused(b"{\"version\": 1, \"refs\": {}}").contains("not a valid tar archive"));
    assert!(matches!(parse_tar(&b"{}"[..], &Scratch::in_memory()), Err(ArchiveError::NotTar(_))), "not a tar: 400");
    let mut cut = tar(&[(".zmetadata", &zmetadata(4)), ("g/air/refs.0.parq", &file)]);
    cut.truncate(1100);
    assert!(refused(&cut).contains("not a valid tar archive"), "{}", refused(&cut));
    assert!(refused(&tar(&[(".zmetadata", b"{\"metadata\": {}}")])).contains("record_size"));
    assert!(refused(&tar(&[(".zmetadata", b"{nope")])).contains(".zmetadata: not valid JSON"));
    let two = tar(&[("a/.zmetadata", &zmetadata(4)), ("b/.zmetadata", &zmetadata(4))]);
    assert!(refused(&two).contains("two .zmetadata files"));
}

#[test]
fn a_failing_body_is_an_io_error_not_a_bad_archive() {
    struct Failing(usize);
    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::new(io::ErrorKind::FileTooLarge, "body too large"));
            }
            let n = buf.len().min(self.0);
            buf[..n].fill(0);
            self.0 -= n;
            Ok(n)
        }
    }
    let Err(ArchiveError::Io(e)) = parse_tar(Failing(100), &Scratch::in_memory()) else { panic!() };
    assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
}

mod prop {
    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Damaged parquet files are problems, never a panic or an abort.
        #[test]
        fn damaged_files_never_panic(flips in proptest::collection::vec((any::<Index>(), 1u8..), 1..4)) {
            let row = |i: i64| if i % 3 == 2 { R::Raw(b"xyz") } else { R::Url("/d/a.nc", i * 8, 8) };
            let rows: Vec<R> = (0..6).map(row).collect();
            let mut file = refs_file(&rows, 4);
            for (at, xor) in flips {
                let i = at.index(file.len());
                file[i] ^= xor;
            }
            let body = tar(&[(".zmetadata", &zmetadata(8)), ("g/air/refs.0.parq", &file)]);
            let doc = parse_tar(body.as_slice(), &Scratch::in_memory()).unwrap();
            prop_assert!(doc.nodes.contains_key("g/air"));
        }
    }
}
