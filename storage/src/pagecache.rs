//! A file's pages in the page cache: hints for reading it (`posix_fadvise`) and which of its
//! pages are cached (`mincore`). The log keeps the active segment's file uncached past its
//! durable end (`segment`'s module comment), and the node's backup copy reads without
//! read-ahead for the same reason; tests check both with `cached_pages`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// How a file's bytes will be read (the `posix_fadvise` advice used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// No read-ahead for reads through this descriptor.
    Random,
    /// Drop the clean, unmapped cached pages of the range.
    DontNeed,
}

/// Gives `advice` for `len` bytes of `file` from `offset` (`len` 0: to the end of the file).
pub fn advise(file: &File, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    let advice = match advice {
        Advice::Random => libc::POSIX_FADV_RANDOM,
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
    };
    let offset = i64::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    let len = i64::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: a plain system call on a descriptor `file` owns for the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) };
    if rc == 0 { Ok(()) } else { Err(io::Error::from_raw_os_error(rc)) }
}

/// How many pages of `file` from byte `from` (rounded down to a page) to its end are in the
/// page cache. Reads no byte of the file.
pub fn cached_pages(file: &File, from: u64) -> io::Result<usize> {
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: a read-only shared mapping, dropped below; no byte of it is read.
    let map = unsafe { memmap2::Mmap::map(file)? };
    // From the page holding `from`; past the end, nothing.
    let skip = (usize::try_from(from).unwrap_or(usize::MAX) / 4096).saturating_mul(4096).min(len);
    resident_pages(map.as_ptr().wrapping_add(skip), len - skip)
}

/// How many pages of the `len` bytes mapped at `addr` (page-aligned) are resident: in the page
/// cache for a file mapping, backed by memory for an anonymous one (`mincore`, which reads no
/// byte of the range and fails on a range not mapped).
pub fn resident_pages(addr: *const u8, len: usize) -> io::Result<usize> {
    if len == 0 {
        return Ok(0);
    }
    let mut resident = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `mincore` only writes `resident`, one byte per page of the range; the kernel
    // checks the range itself.
    let rc = unsafe { libc::mincore(addr.cast_mut().cast(), len, resident.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(resident.iter().filter(|&&r| r & 1 == 1).count())
}
