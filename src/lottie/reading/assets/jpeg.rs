//! What the fence reads of an embedded JPEG, walking its markers as stb_image does: the size
//! in its first frame header and the number of its scans.

use super::{read_u16, MAX_JPEG_SCANS};

/// A JPEG's size from its first frame header (SOF0, SOF1 or SOF2: the kinds stb_image
/// decodes). Hand-written rather than taken from an image-size crate because it must walk the
/// markers exactly as stb_image does (fill bytes before a marker code, padding between
/// segments, the segment kinds it accepts): a walker that reads another frame header than the
/// decoder's would let a small declared size hide a huge one.
pub(super) fn jpeg_dimensions(bytes: &[u8]) -> Result<(u64, u64), String> {
    let truncated = || "embedded JPEG ends before its frame header".to_owned();
    let mut at = 2; // after SOI (FF D8)
    loop {
        // A marker: 0xFF, any number of 0xFF fill bytes, the code. stb_image skips bytes
        // that are not 0xFF between segments.
        while *bytes.get(at).ok_or_else(truncated)? != 0xFF {
            at += 1;
        }
        while *bytes.get(at).ok_or_else(truncated)? == 0xFF {
            at += 1;
        }
        let code = bytes[at];
        at += 1;
        let length = usize::from(read_u16(bytes, at).ok_or_else(truncated)?);
        match code {
            // Baseline, extended and progressive frame headers: length, precision, height,
            // width.
            0xC0..=0xC2 => {
                let height = read_u16(bytes, at + 3).ok_or_else(truncated)?;
                let width = read_u16(bytes, at + 5).ok_or_else(truncated)?;
                return Ok((u64::from(width), u64::from(height)));
            }
            // Tables, restart interval, application data, comments: skipped by length.
            0xC4 | 0xDB | 0xDD | 0xE0..=0xEF | 0xFE if length >= 2 => at += length,
            _ => {
                return Err(format!(
                    "embedded JPEG has a marker the renderer does not decode (0x{code:02X}) \
                     before its frame header"
                ))
            }
        }
    }
}

/// How many scans (SOS segments) a JPEG has, stopping at [`MAX_JPEG_SCANS`] + 1. The walk
/// finds every marker stb_image finds after the frame header, and possibly more: it skips
/// segments by their length as stb_image does, and between segments (entropy-coded data,
/// padding) takes every 0xFF not followed by 0x00 for a marker, as stb_image's bit reader
/// does when it stops a scan; restart markers inside a scan are passed over. It ends at EOI,
/// at the end of the data, or at a marker stb_image stops decoding at.
pub(crate) fn jpeg_scan_count(bytes: &[u8]) -> usize {
    let mut scans = 0;
    let mut at = 2; // after SOI (FF D8)
    loop {
        // A marker: 0xFF, any fill bytes 0xFF, a code other than 0x00 (a stuffed zero in
        // entropy-coded data).
        let Some(offset) = bytes
            .get(at..)
            .and_then(|rest| rest.iter().position(|&b| b == 0xFF))
        else {
            return scans;
        };
        at += offset;
        while bytes.get(at) == Some(&0xFF) {
            at += 1;
        }
        let Some(&code) = bytes.get(at) else {
            return scans;
        };
        at += 1;
        match code {
            // A stuffed zero, restart markers: entropy-coded data goes on.
            0x00 | 0xD0..=0xD7 => {}
            0xD9 => return scans,
            // Frame headers, tables, restart interval, number of lines, application data,
            // comments, scan headers: skipped by length (a scan's data follows its header).
            0xC0..=0xC2 | 0xC4 | 0xDA | 0xDB | 0xDC | 0xDD | 0xE0..=0xEF | 0xFE => {
                if code == 0xDA {
                    scans += 1;
                    if scans > MAX_JPEG_SCANS {
                        return scans;
                    }
                }
                let Some(length) = read_u16(bytes, at) else {
                    return scans;
                };
                at += usize::from(length.max(2));
            }
            _ => return scans,
        }
    }
}
