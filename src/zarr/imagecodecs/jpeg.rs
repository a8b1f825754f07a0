//! imagecodecs' `jpeg`: a TIFF tile or strip that is a whole JPEG stream (no JPEGTables),
//! decoded with zune-jpeg to its 8-bit samples, interleaved as the chunk holds them. What
//! imagecodecs (libjpeg) gives without options: grey stays grey, YCbCr becomes RGB, RGB (a
//! stream written without the colour transform) stays RGB; CMYK and YCCK are refused.

use zune_jpeg::JpegDecoder;
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

/// A decoder of `input` with its headers read and its output colour space chosen.
fn headers(input: &[u8]) -> Result<JpegDecoder<ZCursor<&[u8]>>, String> {
    // Any size a JPEG can declare (zune-jpeg stops at 16384 by default, narrower than a wide
    // strip): the chunk's bound is what limits it.
    let largest = usize::from(u16::MAX);
    let options = DecoderOptions::default().set_max_width(largest).set_max_height(largest);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(input), options);
    decoder.decode_headers().map_err(|e| format!("JPEG: {e}"))?;
    let out = match decoder.input_colorspace() {
        Some(ColorSpace::Luma) => ColorSpace::Luma,
        Some(ColorSpace::YCbCr | ColorSpace::RGB) => ColorSpace::RGB,
        other => return Err(format!("a JPEG stream in colour space {other:?} (grey, YCbCr or RGB are decoded)")),
    };
    let options = decoder.options().jpeg_set_out_colorspace(out);
    decoder.set_options(options);
    Ok(decoder)
}

/// The bytes `input` decodes to, as its headers declare them (width x height x samples).
pub fn declared_size(input: &[u8]) -> Result<u64, String> {
    let decoder = headers(input)?;
    decoder.output_buffer_size().map(|n| n as u64).ok_or_else(|| "a JPEG stream of too many pixels".into())
}

/// Decodes `input`; a stream declaring more than `bound` bytes is refused before it is decoded.
/// The output is exactly the declared size; beside it zune-jpeg holds a progressive (or
/// non-interleaved) stream's coefficients, two bytes a sample padded to whole 8 x 8 blocks:
/// about twice the chunk at most, never sized by anything but the declared dimensions.
pub fn decode(input: &[u8], bound: u64) -> Result<Vec<u8>, String> {
    let mut decoder = headers(input)?;
    let size = decoder.output_buffer_size().ok_or("a JPEG stream of too many pixels")?;
    if size as u64 > bound {
        return Err(format!("a JPEG stream declaring {size} bytes, more than the {bound} the chunk takes"));
    }
    let mut out = vec![0u8; size];
    decoder.decode_into(&mut out).map_err(|e| format!("JPEG: {e}"))?;
    Ok(out)
}

/// A 16 x 16 grey tile written by tifffile 2026.3.3 (`imwrite(..., compression="jpeg",
/// photometric="minisblack")`): a whole JPEG stream, no JPEGTables.
#[cfg(test)]
pub(crate) fn tifffile_grey_tile() -> Vec<u8> {
    const GREY: [&str; 8] = [
        "ffd8ffe000104a46494600010100000100010000ffdb00430002010101010102010101020202020204030202020205040403040605060606",
        "05060606070908060709070606080b08090a0a0a0a0a06080b0c0b0a0c090a0a0affc0000b080010001001011100ffc4001f000001050101",
        "0101010100000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d010203000411051221314106",
        "13516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455",
        "565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9ba",
        "c2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00fccbf849fb2dc090",
        "45ff0012e4ddb07f0024923f4ff3f87d43f09ff65ab70228c69e9c95190a0f7eb9afa03e11fecbc05bc623d349f90676c67d39cd7d45f09f",
        "f65e42912ae9c76e54122238c647b57fffd9",
    ];
    let hex = GREY.concat();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What tifffile (libjpeg-turbo) decodes it to.
    const TIFFFILE: [u8; 256] = [
        0, 5, 9, 16, 18, 24, 32, 34, 41, 45, 50, 54, 61, 66, 68, 76, 10, 14, 22, 27, 35, 38, 46, 45, 49, 56, 63, 67,
        75, 80, 80, 85, 16, 27, 31, 40, 39, 47, 51, 53, 60, 67, 73, 74, 81, 87, 89, 94, 26, 35, 45, 43, 51, 51, 62, 61,
        71, 77, 81, 83, 89, 95, 98, 105, 36, 47, 46, 55, 59, 69, 70, 71, 79, 83, 90, 95, 102, 105, 107, 116, 45, 53,
        59, 60, 72, 73, 78, 78, 90, 92, 98, 103, 109, 111, 114, 125, 54, 66, 68, 74, 77, 81, 84, 90, 102, 105, 108,
        111, 116, 120, 124, 135, 62, 70, 72, 76, 85, 87, 92, 98, 101, 107, 114, 117, 123, 128, 131, 139, 73, 78, 83,
        91, 96, 103, 109, 107, 112, 120, 126, 130, 136, 144, 143, 147, 80, 88, 94, 100, 104, 108, 114, 116, 124, 131,
        135, 139, 144, 151, 152, 158, 90, 100, 105, 109, 115, 118, 123, 127, 133, 139, 143, 148, 152, 158, 159, 168,
        98, 108, 110, 115, 124, 128, 131, 134, 143, 148, 153, 159, 163, 168, 168, 178, 109, 118, 120, 125, 133, 137,
        140, 143, 152, 156, 160, 167, 171, 176, 177, 188, 117, 128, 132, 135, 140, 143, 148, 152, 164, 167, 171, 176,
        180, 186, 188, 199, 124, 132, 138, 143, 146, 151, 157, 159, 167, 171, 175, 181, 185, 192, 193, 202, 136, 140,
        145, 153, 159, 165, 172, 170, 176, 182, 188, 195, 200, 206, 205, 212,
    ];

    #[test]
    fn a_tifffile_jpeg_tile_decodes_to_within_one_of_what_libjpeg_gives() {
        assert_eq!(declared_size(&tifffile_grey_tile()).unwrap(), 256);
        let out = decode(&tifffile_grey_tile(), 256).unwrap();
        assert_eq!(out.len(), 256);
        // Decoders may round their inverse DCT differently (the standard allows it).
        let off = out.iter().zip(TIFFFILE).filter(|(a, b)| a.abs_diff(*b) > 0).count();
        assert!(out.iter().zip(TIFFFILE).all(|(a, b)| a.abs_diff(b) <= 1), "{out:?}");
        assert!(off <= 8, "{off} samples differ");
    }

    #[test]
    fn a_stream_declaring_more_than_the_chunk_is_refused_before_decoding_and_junk_is_an_error() {
        // The frame header (SOF0) says 16384 rows: 256 KiB for a chunk of 256 bytes.
        let mut bomb = tifffile_grey_tile();
        let sof = bomb.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        bomb[sof + 5..sof + 7].copy_from_slice(&16384u16.to_be_bytes());
        assert_eq!(declared_size(&bomb).unwrap(), 16384 * 16);
        assert!(decode(&bomb, 256).unwrap_err().contains("more than the 256"));
        assert!(decode(&tifffile_grey_tile(), 255).is_err());
        assert!(decode(b"not a jpeg", 256).is_err());
        assert!(decode(&tifffile_grey_tile()[..200], 256).map_or(true, |out| out.len() == 256));
    }
}
