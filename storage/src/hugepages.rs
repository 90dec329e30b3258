//! Transparent huge pages: only where the log asks for them.
//!
//! A point read touches a record somewhere in a segment's address range, and a random read over
//! a range of hundreds of megabytes misses the TLB nearly every time with 4 KiB pages (on a
//! virtual machine each miss walks two page tables). The active segment, staged in anonymous
//! memory (`segment`'s module comment), is advised `MADV_HUGEPAGE`, so its records sit in 2 MiB
//! pages (BENCHMARKS.md, "Session 35": point reads 1.1-1.6× on dev-2c).
//!
//! Everything else stays on 4 KiB pages: the allocator's large regions backing the index's
//! tables, freshly doubled and then touched at random, fault 2 MiB zeroed pages in bursts of
//! 0.1-0.5 s (session 7). mimalloc is built with `no_thp`, so it never advises its regions, and
//! a process calls [`only_where_advised`] first thing, so a system set to `always` gives huge
//! pages to advised ranges alone.

use std::io;

/// `PR_THP_DISABLE_EXCEPT_ADVISED` (Linux 6.18; not in the `libc` crate): with
/// `PR_SET_THP_DISABLE`, huge pages stay off except in ranges advised `MADV_HUGEPAGE`.
const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// What [`only_where_advised`] could arrange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// The kernel keeps huge pages to advised ranges for this process.
    OnlyWhereAdvised,
    /// An older kernel, a system set to `madvise` or `never`: the system's own rule already
    /// keeps them to advised ranges (or gives none).
    SystemAdvisedOnly,
    /// An older kernel and a system set to `always`: huge pages are off for the whole process,
    /// segments included (the index's bursts would cost more than the reads gain).
    Off,
}

/// Keeps transparent huge pages to the ranges this process advises `MADV_HUGEPAGE` (the staged
/// segments), for this process and the threads it starts afterwards. Call it before starting
/// threads. Returns what it could arrange, or the error of turning them off entirely when
/// nothing else would do.
pub fn only_where_advised() -> io::Result<HugePages> {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and only sets a flag of this
    // process's memory map.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_THP_DISABLE,
            1 as libc::c_ulong,
            PR_THP_DISABLE_EXCEPT_ADVISED,
            0,
            0,
        )
    };
    if rc == 0 {
        return Ok(HugePages::OnlyWhereAdvised);
    }
    let always = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|mode| mode.contains("[always]"));
    if !always {
        return Ok(HugePages::SystemAdvisedOnly);
    }
    // SAFETY: as above.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0, 0, 0) };
    if rc == 0 { Ok(HugePages::Off) } else { Err(io::Error::last_os_error()) }
}

/// Advises `len` bytes at `addr` `MADV_HUGEPAGE`.
///
/// # Safety
/// `[addr, addr + len)` must be a mapping this process owns; the advice changes no byte of it.
pub(crate) unsafe fn advise(addr: *mut libc::c_void, len: usize) -> io::Result<()> {
    // SAFETY: the caller's range; MADV_HUGEPAGE only sets a flag of its mapping.
    let rc = unsafe { libc::madvise(addr, len, libc::MADV_HUGEPAGE) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks the process's flag matches what was reported: with EXCEPT_ADVISED the kernel reports
    // both bits (3), fully off 1; a system left to its own rule 0.
    #[test]
    fn reported_policy_matches_the_kernel_flag() {
        let got = only_where_advised().expect("huge page policy");
        // SAFETY: PR_GET_THP_DISABLE takes no pointer.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        let want = match got {
            HugePages::OnlyWhereAdvised => 1 | (1 << 1),
            HugePages::Off => 1,
            HugePages::SystemAdvisedOnly => 0,
        };
        assert_eq!(flag, want, "{got:?}");
    }
}
