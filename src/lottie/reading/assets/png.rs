//! What the fence reads of an embedded PNG, as stb_image reads it: its size from the IHDR,
//! the exact size its image data inflates to, and how far that data really inflates (counted,
//! never kept).

use super::{read_u32, INFLATE_SCRATCH_BYTES};

pub(super) const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// A PNG's size from its IHDR, which must be the first chunk. (stb_image also skips Apple's
/// `CgBI` chunks before IHDR; those are refused here rather than walked, so the size read is
/// always the one stb_image uses.)
pub(super) fn png_dimensions(bytes: &[u8]) -> Result<(u64, u64), String> {
    const IHDR_LENGTH: u32 = 13;
    let damaged = || "embedded PNG does not start with its IHDR header".to_owned();
    let length = read_u32(bytes, 8).ok_or_else(damaged)?;
    if length != IHDR_LENGTH || bytes.get(12..16) != Some(b"IHDR") {
        return Err(damaged());
    }
    let width = read_u32(bytes, 16).ok_or_else(damaged)?;
    let height = read_u32(bytes, 20).ok_or_else(damaged)?;
    Ok((u64::from(width), u64::from(height)))
}

/// The exact size of a PNG's inflated image data from its IHDR (already found there by
/// [`png_dimensions`]): per row a filter byte and the row's samples, for each of the seven
/// Adam7 passes of an interlaced image. A bit depth or colour type stb_image does not decode
/// is refused here.
pub(super) fn png_image_data_bytes(bytes: &[u8]) -> Result<u64, String> {
    let damaged = || "embedded PNG does not start with its IHDR header".to_owned();
    let width = u64::from(read_u32(bytes, 16).ok_or_else(damaged)?);
    let height = u64::from(read_u32(bytes, 20).ok_or_else(damaged)?);
    let (depth, colour, interlace) = match bytes.get(24..29) {
        Some(&[depth, colour, _compression, _filter, interlace]) => (depth, colour, interlace),
        _ => return Err(damaged()),
    };
    let channels: u64 = match (colour, depth) {
        (0, 1 | 2 | 4 | 8 | 16) => 1,
        (2, 8 | 16) => 3,
        (3, 1 | 2 | 4 | 8) => 1,
        (4, 8 | 16) => 2,
        (6, 8 | 16) => 4,
        _ => {
            return Err(format!(
                "embedded PNG has colour type {colour} at bit depth {depth}, which the renderer \
                 does not decode"
            ))
        }
    };
    let bits_per_pixel = channels * u64::from(depth);
    let data_bytes = |columns: u64, rows: u64| -> u64 {
        if columns == 0 || rows == 0 {
            return 0;
        }
        rows * (1 + (columns * bits_per_pixel).div_ceil(8))
    };
    if interlace == 0 {
        return Ok(data_bytes(width, height));
    }
    // Adam7: each pass's first column and row, and its steps.
    const PASSES: [(u64, u64, u64, u64); 7] = [
        (0, 0, 8, 8),
        (4, 0, 8, 8),
        (0, 4, 4, 8),
        (2, 0, 4, 4),
        (0, 2, 2, 4),
        (1, 0, 2, 2),
        (0, 1, 1, 2),
    ];
    Ok(PASSES
        .iter()
        .map(|&(x0, y0, dx, dy)| {
            let columns = width.saturating_sub(x0).div_ceil(dx);
            let rows = height.saturating_sub(y0).div_ceil(dy);
            data_bytes(columns, rows)
        })
        .sum())
}

/// How many bytes a PNG's image data (every IDAT chunk up to IEND, concatenated, as
/// stb_image reads them) inflates to, stopping as soon as it passes `limit`. Image data
/// that is not a zlib stream miniz_oxide can inflate is refused: stb_image accepts some
/// streams miniz_oxide does not (incomplete Huffman codes), and what it would inflate them to
/// cannot be counted here. A stream cut short is counted as far as it goes.
pub(super) fn png_inflated_bytes(
    bytes: &[u8],
    limit: u64,
    scratch: &mut Vec<u8>,
) -> Result<u64, String> {
    use miniz_oxide::inflate::stream::{inflate, InflateState};
    use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
    scratch.resize(INFLATE_SCRATCH_BYTES, 0);
    // stb_image does not check the Adler-32 checksum either.
    let mut state = InflateState::new_boxed(DataFormat::ZLibIgnoreChecksum);
    let mut inflated = 0u64;
    let mut at = PNG_SIGNATURE.len();
    while let Some(length) = read_u32(bytes, at) {
        let kind = bytes.get(at + 4..at + 8);
        let start = at + 8;
        let end = start.saturating_add(length as usize).min(bytes.len());
        at = end.saturating_add(4); // the CRC
        match kind {
            Some(b"IEND") | None => break,
            Some(b"IDAT") => {}
            Some(_) => continue,
        }
        let mut input = bytes.get(start..end).unwrap_or_default();
        loop {
            let result = inflate(&mut state, input, scratch, MZFlush::None);
            inflated = inflated.saturating_add(result.bytes_written as u64);
            if inflated > limit {
                return Ok(inflated);
            }
            input = input.get(result.bytes_consumed..).unwrap_or_default();
            match result.status {
                Ok(MZStatus::StreamEnd) => return Ok(inflated),
                Ok(_) if result.bytes_consumed > 0 || result.bytes_written > 0 => {}
                // No progress: this chunk is used up, the next one goes on.
                Ok(_) | Err(MZError::Buf) => break,
                Err(_) => {
                    return Err("embedded PNG's image data is not a valid zlib stream".to_owned())
                }
            }
        }
    }
    Ok(inflated)
}
