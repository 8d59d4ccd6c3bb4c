//! How much address space the worker executable's own image takes once mapped: the sum of its
//! ELF loadable segments. A worker whose memory limit is below it plus what the loader needs
//! is killed by the kernel (SIGSEGV) before it runs an instruction or writes a line, which
//! would otherwise read as a crash of the render. Hand-written rather than a crate (`object`,
//! `goblin`): two fields of the ELF64 header and of each program header are all it reads.

use std::io::Read;
use std::path::Path;

/// Address space a worker needs beyond its own image before it can say anything: the dynamic
/// loader, the stack, and the first of its shared libraries (FFmpeg's alone are larger).
pub(super) const LOADER_HEADROOM_BYTES: u64 = 16 * 1024 * 1024;
/// Bytes read from the executable's start: the ELF header and its program headers sit there
/// (a few dozen entries of 56 bytes).
const HEADERS_READ_BYTES: usize = 16 * 1024;
/// `PT_LOAD`: a segment mapped into memory.
const PT_LOAD: u32 = 1;

/// The bytes `executable`'s loadable segments take in memory; `None` when it is not a
/// little-endian ELF64 file whose program headers are within its first bytes.
pub(super) fn loadable_bytes(executable: &Path) -> Option<u64> {
    let mut headers = Vec::with_capacity(HEADERS_READ_BYTES);
    std::fs::File::open(executable)
        .ok()?
        .take(HEADERS_READ_BYTES as u64)
        .read_to_end(&mut headers)
        .ok()?;
    loadable_bytes_of(&headers)
}

fn loadable_bytes_of(headers: &[u8]) -> Option<u64> {
    // ELF64 (class 2), little-endian (data 1).
    if headers.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| {
        Some(u16::from_le_bytes(
            headers.get(at..at + 2)?.try_into().ok()?,
        ))
    };
    let u32_at = |at: usize| {
        Some(u32::from_le_bytes(
            headers.get(at..at + 4)?.try_into().ok()?,
        ))
    };
    let u64_at = |at: usize| {
        Some(u64::from_le_bytes(
            headers.get(at..at + 8)?.try_into().ok()?,
        ))
    };
    let table = usize::try_from(u64_at(0x20)?).ok()?;
    let (entry, count) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    let mut total: u64 = 0;
    for index in 0..count {
        let header = table.checked_add(index.checked_mul(entry)?)?;
        if u32_at(header)? == PT_LOAD {
            total = total.checked_add(u64_at(header.checked_add(0x28)?)?)?;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_binary_has_loadable_segments_and_other_files_have_none() {
        let own = std::env::current_exe().unwrap();
        let loadable = loadable_bytes(&own).unwrap();
        // At least its code, at most the file plus its zero-filled data (this binary's .bss is
        // small).
        assert!(loadable > 1024 * 1024, "{loadable}");
        let file = std::fs::metadata(&own).unwrap().len();
        assert!(loadable < file + 64 * 1024 * 1024, "{loadable} of {file}");
        assert_eq!(loadable_bytes_of(b"#!/bin/sh\n"), None);
        assert_eq!(loadable_bytes_of(b"\x7fELF\x02\x01"), None);
    }
}
