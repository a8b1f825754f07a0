//! Conversion of hand-written Zarr v2 metadata, checked against zarrs and against what
//! zarr-python and xarray read.

use serde_json::{Map, Value, json};

use super::*;

fn convert(zarray: Value, zattrs: Value) -> Map<String, Value> {
    array_to_v3(&zarray, zattrs.as_object().cloned().unwrap_or_default()).unwrap()
}

/// zarrs' own conversion (`zarrs::convert::array_metadata_v2_to_v3`) is the reference for
/// Zarr v2 metadata as zarr-python writes it (array-to-array filters, one compressor): on
/// those, everything but the attributes must come out the same. It is not used for the
/// conversion itself because kerchunk documents are not always like that: kerchunk puts
/// HDF5's whole filter pipeline (shuffle, zlib...) under `filters`, which zarrs places before
/// `bytes`, an invalid chain, while zarr-python reads them after it; zarrs has no `|S<n>`
/// (netCDF char); and a `null` float fill value becomes 0 there, NaN in VirtualiZarr.
#[test]
fn agrees_with_zarrs_on_zarr_python_metadata() {
    let cases = [
        json!({"dtype": "<f4", "fill_value": -9999.0, "compressor": {"id": "zlib", "level": 4}}),
        json!({"dtype": ">f8", "fill_value": "NaN", "order": "F", "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}}),
        json!({"dtype": "<f8", "fill_value": "-Infinity", "compressor": {"id": "zstd", "level": 3}, "dimension_separator": "/"}),
        json!({"dtype": "<i2", "fill_value": -32767, "compressor": {"id": "gzip", "level": 5}}),
        json!({"dtype": "|u1", "fill_value": 7, "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0}}),
        json!({"dtype": "|b1", "fill_value": true, "compressor": null}),
        json!({"dtype": ">i8", "fill_value": 0, "compressor": {"id": "bz2", "level": 9}}),
        json!({"dtype": "<c8", "fill_value": [1.0, -1.0], "compressor": null}),
        json!({"dtype": "<f4", "fill_value": 1.5, "compressor": null, "filters": [{"id": "fixedscaleoffset", "offset": 0.0, "scale": 10.0, "dtype": "<f4", "astype": "<i4"}]}),
    ];
    for extra in cases {
        let mut zarray = json!({"zarr_format": 2, "shape": [10, 6], "chunks": [4, 3], "order": "C", "filters": null});
        for (k, v) in extra.as_object().unwrap() {
            zarray[k] = v.clone();
        }
        let v2: zarrs::metadata::v2::ArrayMetadataV2 = serde_json::from_value(zarray.clone()).unwrap();
        let mut theirs = serde_json::to_value(zarrs::convert::array_metadata_v2_to_v3(&v2).unwrap()).unwrap();
        if zarray["dtype"].as_str().is_some_and(|d| d.starts_with('|')) {
            // Single bytes have no order: zarrs says little, zarr-python says nothing.
            theirs["codecs"][0] = json!({"name": "bytes"});
        }
        let ours = Value::Object(convert(zarray.clone(), json!({})));
        for field in ["shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"] {
            assert_eq!(ours[field], theirs[field], "{field} of {zarray}");
        }
        let mut ours = ours.as_object().cloned().unwrap();
        assert!(crate::zarr::metadata::validate_node(&mut ours).is_ok(), "{zarray}");
    }
}

#[test]
fn virtualizarr_netcdf4_array() {
    // As VirtualiZarr writes it: every codec under filters, compressor null.
    let v3 = convert(
        json!({"zarr_format": 2, "shape": [4, 5, 6], "chunks": [2, 3, 4], "dtype": "<f4", "fill_value": -9999.0, "order": "C",
               "compressor": null, "filters": [{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}], "dimension_separator": "."}),
        json!({"_ARRAY_DIMENSIONS": ["time", "lat", "lon"], "units": "K"}),
    );
    assert_eq!(
        v3["codecs"],
        json!([{"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, {"name": "numcodecs.zlib", "configuration": {"level": 4}}])
    );
    assert_eq!(v3["dimension_names"], json!(["time", "lat", "lon"]));
    assert_eq!(v3["chunk_key_encoding"], json!({"name": "v2", "configuration": {"separator": "."}}));
    assert_eq!(
        v3["attributes"],
        json!({"units": "K", "_FillValue": "AAAAAICHw8A="}),
        "fill value added the way xarray encodes it"
    );
    assert_eq!(v3["fill_value"], json!(-9999.0));
    let mut v3 = v3;
    assert!(crate::zarr::metadata::validate_node(&mut v3).is_ok());
}

#[test]
fn big_endian_fortran_order_filters_and_compressors() {
    let v3 = convert(
        json!({"zarr_format": 2, "shape": [4, 3], "chunks": [4, 3], "dtype": ">f8", "fill_value": "NaN", "order": "F",
               "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
               "filters": [{"id": "delta", "dtype": ">f8"}]}),
        json!({"_FillValue": "NaN", "missing_value": -1.0}),
    );
    assert_eq!(
        v3["codecs"],
        json!([
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "numcodecs.delta", "configuration": {"dtype": ">f8"}},
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0, "typesize": 8}},
        ])
    );
    assert_eq!(v3["fill_value"], "NaN");
    assert_eq!(v3["attributes"]["_FillValue"], "AAAAAAAA+H8=");
    assert_eq!(v3["attributes"]["missing_value"], -1.0, "missing_value stays a number");
}

#[test]
fn data_types() {
    let dt = |d: &str| data_type(d).map(|(v, _, _)| v);
    assert_eq!(dt(">i2").unwrap(), "int16");
    assert_eq!(dt("|O").unwrap(), "string");
    assert_eq!(dt("<U3").unwrap(), json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}}));
    assert_eq!(dt("|S4").unwrap(), json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 4}}));
    assert_eq!(
        dt("<M8[ns]").unwrap(),
        json!({"name": "numpy.datetime64", "configuration": {"unit": "ns", "scale_factor": 1}})
    );
    assert!(dt("[('a', '<i4')]").is_err());
    let strings = convert(
        json!({"shape": [2], "chunks": [2], "dtype": "|O", "fill_value": null, "filters": [{"id": "vlen-utf8"}]}),
        json!({}),
    );
    assert_eq!(strings["codecs"], json!([{"name": "vlen-utf8"}]));
    assert_eq!((&strings["data_type"], &strings["fill_value"]), (&json!("string"), &json!("")));
    let mut bytes = convert(
        json!({"shape": [2], "chunks": [2], "dtype": "|O", "fill_value": null, "filters": [{"id": "vlen-bytes"}]}),
        json!({}),
    );
    assert_eq!((&bytes["data_type"], &bytes["fill_value"]), (&json!("variable_length_bytes"), &json!("")));
    crate::zarr::metadata::validate_node(&mut bytes).expect("zarrs reads variable_length_bytes");
}

#[test]
fn integer_fill_values_and_unknown_codecs() {
    let v3 = convert(
        json!({"shape": [2], "chunks": [2], "dtype": "<i2", "fill_value": -32768.0, "compressor": {"id": "zlib", "level": 1}}),
        json!({"scale_factor": 0.01}),
    );
    assert_eq!(v3["fill_value"], -32768);
    assert_eq!(v3["attributes"]["_FillValue"], -32768, "packed: kerchunk moved it there, declared again");
    let plain = convert(json!({"shape": [2], "chunks": [2], "dtype": "<i4", "fill_value": -2147483647}), json!({}));
    assert!(plain["attributes"].get("_FillValue").is_none(), "a plain integer's fill may be HDF5's default");
    let zero =
        convert(json!({"shape": [2], "chunks": [2], "dtype": "<i4", "fill_value": 0, "compressor": null}), json!({}));
    assert!(zero["attributes"].get("_FillValue").is_none(), "0 is a storage default, not a declared fill");
    let unknown = convert(
        json!({"shape": [2], "chunks": [2], "dtype": "<i2", "fill_value": 0, "compressor": {"id": "snappy", "x": 1}}),
        json!({}),
    );
    assert_eq!(
        unknown["codecs"],
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.snappy", "configuration": {"x": 1}}]),
        "a compressor zarrgate does not know is a bytes-to-bytes codec, as every v2 compressor"
    );
}

#[test]
fn python_json_tokens() {
    let v = lenient_json(r#"{"a": NaN, "b": [-Infinity, Infinity], "s": "NaN is fine \" here"}"#).unwrap();
    assert_eq!(v, json!({"a": "NaN", "b": ["-Infinity", "Infinity"], "s": "NaN is fine \" here"}));
    assert!(lenient_json("{").is_err());
}

#[test]
fn fill_values_are_declared_as_the_references_can_tell() {
    let declared = |dtype: &str, fill: Value, attrs: Value| {
        let v3 = convert(json!({"shape": [2], "chunks": [2], "dtype": dtype, "fill_value": fill}), attrs);
        v3["attributes"].get("_FillValue").cloned()
    };
    let dims = json!({"_ARRAY_DIMENSIONS": ["x"]});
    let phony = json!({"_ARRAY_DIMENSIONS": ["phony_dim_0"]});
    // kerchunk moved the file's _FillValue here: declared, as an integer
    assert_eq!(declared("<i2", json!(-1), dims.clone()), Some(json!(-1)));
    assert_eq!(declared("|u1", json!(200.0), dims.clone()), Some(json!(200)));
    // netCDF's defaults, and 0, are storage fills: not declared
    for (dtype, fill) in [("<i2", json!(-32767)), ("|i1", json!(-127)), ("|u1", json!(255)), ("<i4", json!(0))] {
        assert_eq!(declared(dtype, fill.clone(), dims.clone()), None, "{dtype} {fill}");
    }
    assert_eq!(declared("<u8", json!(18_446_744_073_709_551_614u64), dims.clone()), None);
    // a plain HDF5 dataset's storage fill (h5netcdf's phony dimensions): not declared...
    assert_eq!(declared("<i4", json!(-1), phony.clone()), None);
    assert_eq!(declared("<f4", json!(-1.0), phony.clone()), None);
    // ...unless packed, which only CF variables are
    let packed = json!({"_ARRAY_DIMENSIONS": ["phony_dim_0"], "scale_factor": 0.5});
    assert_eq!(declared("<i2", json!(-32767), packed), Some(json!(-32767)));
    assert_eq!(declared("<f8", json!(-9999.0), dims), Some(json!("AAAAAICHw8A=")));
}

#[test]
fn fill_value_attributes_xarray_cannot_decode_are_dropped() {
    let attrs = |dtype: &str, fill: Value| {
        let v3 = convert(
            json!({"shape": [2], "chunks": [2], "dtype": dtype, "fill_value": null}),
            json!({"_FillValue": fill, "units": "1"}),
        );
        v3["attributes"].clone()
    };
    for (dtype, fill) in [("|S1", json!(" ")), ("<U4", json!("none")), ("<M8[s]", json!(-1)), ("<m8[ns]", json!(0))] {
        assert_eq!(attrs(dtype, fill), json!({"units": "1"}), "{dtype}: xarray fails the dataset on it");
    }
    // complex: a pair of base64 float64s, as xarray's FillValueCoder decodes it
    let one = "AAAAAAAA8D8=";
    let zero = "AAAAAAAAAAA=";
    assert_eq!(attrs("<c16", json!([1.0, 0.0]))["_FillValue"], json!([one, zero]));
    assert_eq!(attrs("<c8", json!(1.0))["_FillValue"], json!([one, zero]));
    assert_eq!(attrs("|b1", json!(1))["_FillValue"], json!(true));
    assert_eq!(attrs("|O", json!("n/a"))["_FillValue"], json!("n/a"), "v3 strings: decoded as str");
}

#[test]
fn time_native_order_and_large_integer_fills() {
    let time = convert(json!({"shape": [2], "chunks": [2], "dtype": "<M8[s]", "fill_value": null}), json!({}));
    assert_eq!(time["fill_value"], json!(i64::MIN), "NaT, as zarr-python reads a null datetime fill");
    let native = convert(json!({"shape": [2], "chunks": [2], "dtype": "=f4", "fill_value": 0.5}), json!({}));
    assert_eq!(native["codecs"], json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
    let mut native = native;
    assert!(crate::zarr::metadata::validate_node(&mut native).is_ok(), "zarrs reads it");
    let big = convert(
        json!({"shape": [2], "chunks": [2], "dtype": "<u8", "fill_value": 1.844_674_407_370_955e19}),
        json!({}),
    );
    assert_eq!(big["fill_value"], json!(18_446_744_073_709_549_568u64), "not saturated to i64::MAX");
}

/// `.zarray` as kerchunk's scanners write it, with `extra` merged in.
fn scanned(extra: Value) -> Map<String, Value> {
    let mut zarray = json!({"zarr_format": 2, "shape": [256, 300], "chunks": [64, 300], "fill_value": 0, "order": "C", "filters": null});
    for (k, v) in extra.as_object().unwrap() {
        zarray[k] = v.clone();
    }
    let mut v3 = convert(zarray.clone(), json!({"_ARRAY_DIMENSIONS": ["Y", "X"]}));
    let validated = crate::zarr::metadata::validate_node(&mut v3);
    assert!(validated.is_ok(), "{zarray}: {validated:?}");
    v3
}

#[test]
fn tiff_references_from_tifffile() {
    // tifffile's ZarrTiffStore.write_fsspec (kerchunk.tiff.tiff_to_zarr): deflate as a bare
    // zlib, which numcodecs reads at level 1 and zarrs refuses without a level.
    let zlib = scanned(json!({"dtype": "<u2", "compressor": {"id": "zlib"}}));
    assert_eq!(
        zlib["codecs"],
        json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.zlib", "configuration": {"level": 1}}])
    );
    // LZW with a horizontal predictor: the predictor works on the typed chunk, before `bytes`.
    let predictor = json!({"id": "imagecodecs_delta", "axis": -1, "dist": 1, "dtype": "<u2", "shape": [64, 300]});
    let lzw = scanned(json!({"dtype": "<u2", "compressor": {"id": "imagecodecs_lzw"}, "filters": [predictor]}));
    assert_eq!(
        lzw["codecs"],
        json!([
            {"name": "numcodecs.imagecodecs_delta", "configuration": {"axis": -1, "dist": 1, "dtype": "<u2", "shape": [64, 300]}},
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "numcodecs.imagecodecs_lzw", "configuration": {}},
        ])
    );
    let zstd = scanned(json!({"dtype": "|u1", "compressor": {"id": "imagecodecs_zstd"}}));
    assert_eq!(zstd["codecs"], json!([{"name": "bytes"}, {"name": "numcodecs.imagecodecs_zstd", "configuration": {}}]));
    let float = json!({"id": "imagecodecs_floatpred", "axis": -1, "dist": 1, "dtype": "<f4", "shape": [64, 300]});
    let geotiff = scanned(json!({"dtype": "<f4", "compressor": {"id": "zlib"}, "filters": [float], "fill_value": 0.0}));
    let names: Vec<&str> = geotiff["codecs"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["numcodecs.imagecodecs_floatpred", "bytes", "numcodecs.zlib"]);
    assert_eq!(geotiff["dimension_names"], json!(["Y", "X"]));
}

#[test]
fn scaled_fits_images_hold_what_their_filter_decodes() {
    // kerchunk.fits.process_file, BZERO = 32768 (unsigned 16-bit data stored as signed): the
    // array is declared as stored, the filter decodes to float64.
    let filter = json!({"id": "fixedscaleoffset", "scale": 1.0, "offset": 32768.0, "dtype": "<f8", "astype": ">i2"});
    let fits = scanned(json!({"dtype": ">i2", "filters": [filter.clone()]}));
    assert_eq!(fits["data_type"], "float64");
    assert_eq!(fits["fill_value"], json!(0));
    assert_eq!(
        fits["codecs"],
        json!([
            {"name": "numcodecs.fixedscaleoffset", "configuration": {"scale": 1.0, "offset": 32768.0, "dtype": "<f8", "astype": ">i2"}},
            {"name": "bytes", "configuration": {"endian": "big"}},
        ])
    );
    // as zarr-python writes it (the array declared as decoded), nothing changes
    let written = json!({"id": "fixedscaleoffset", "scale": 10, "offset": 0, "dtype": "<f4", "astype": "<i2"});
    let packed = scanned(json!({"dtype": "<f4", "filters": [written]}));
    assert_eq!(packed["data_type"], "float32");
}

#[test]
fn grib_references_from_kerchunk() {
    // kerchunk.grib2.scan_grib: the whole message decodes to the array (kerchunk's GRIBCodec).
    let grib = scanned(json!({"shape": [8, 16], "chunks": [8, 16], "dtype": "<f8", "fill_value": null,
                              "filters": [{"id": "grib", "var": "t2m", "dtype": "float64"}], "compressor": null}));
    assert_eq!(
        grib["codecs"],
        json!([{"name": "numcodecs.grib", "configuration": {"var": "t2m", "dtype": "float64"}}])
    );
    assert_eq!(grib["fill_value"], "NaN");
    let err = array_to_v3(
        &json!({"shape": [2], "chunks": [2], "dtype": "<f8", "compressor": {"id": "zlib"}, "filters": [{"id": "grib", "var": "t"}]}),
        Map::new(),
    );
    assert!(err.is_ok(), "filters come first: grib, then the compressor after it");
    let err = array_to_v3(
        &json!({"shape": [2], "chunks": [2], "dtype": "<f8", "filters": [{"id": "zlib"}, {"id": "grib", "var": "t"}]}),
        Map::new(),
    )
    .unwrap_err();
    assert!(err.contains("grib turns arrays into bytes but comes after a bytes codec"), "{err}");
}

#[test]
fn numcodecs_defaults_fill_what_v2_metadata_leaves_out() {
    let codecs = |compressor: Value, filters: Value| {
        convert(
            json!({"shape": [4], "chunks": [4], "dtype": "<i2", "fill_value": 0, "compressor": compressor, "filters": filters}),
            json!({}),
        )["codecs"]
            .clone()
    };
    assert_eq!(
        codecs(json!({"id": "shuffle"}), json!(null))[1],
        json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}})
    );
    assert_eq!(
        codecs(json!({"id": "blosc"}), json!(null))[1],
        json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0, "typesize": 2}})
    );
    assert_eq!(
        codecs(json!({"id": "zstd"}), json!(null))[1],
        json!({"name": "zstd", "configuration": {"level": 0, "checksum": false}})
    );
    assert_eq!(
        codecs(json!({"id": "bz2"}), json!(null))[1],
        json!({"name": "numcodecs.bz2", "configuration": {"level": 1}})
    );
    assert_eq!(
        codecs(json!(null), json!([{"id": "fixedscaleoffset", "offset": 1, "scale": 2, "dtype": "<f4"}]))[0]["configuration"],
        json!({"offset": 1, "scale": 2, "dtype": "<f4"}),
        "astype defaults to dtype: readers fill it"
    );
    assert_eq!(
        codecs(json!({"id": "zlib", "level": 9}), json!(null))[1]["configuration"],
        json!({"level": 9}),
        "given values stay"
    );
}

#[test]
fn what_cannot_be_expressed_is_still_refused() {
    let structured =
        array_to_v3(&json!({"shape": [2], "chunks": [2], "dtype": [["a", "<i4"], ["b", "<f8"]]}), Map::new());
    assert!(structured.unwrap_err().contains("structured dtypes"));
    let after = array_to_v3(
        &json!({"shape": [2], "chunks": [2], "dtype": "<u2", "filters": [{"id": "zlib"}, {"id": "imagecodecs_delta"}]}),
        Map::new(),
    );
    assert!(after.unwrap_err().contains("imagecodecs_delta runs on arrays but comes after a bytes codec"));
}
