//! The memory the fragments' staged segments may take (`storage::segment`: each fragment holds
//! the segment its log appends to in memory, up to `--segment-bytes`).
//!
//! Checked once at start against the machine's memory (the smaller of `MemTotal` and the
//! process's cgroup limit): staged segments that could outgrow the memory are an error at
//! start, naming the `--segment-bytes` that fits; more than [`STAGED_MEMORY_WARN_PERCENT`] of
//! it is a warning. Without the check, a node with many fragments and large segments would be
//! killed for memory once its writes filled the segments, long after it started.

use storage::limits::{BLOCK_BYTES, SEGMENT_BYTES_MIN};

/// Staged segments above this share of the machine's memory are warned about at start.
pub const STAGED_MEMORY_WARN_PERCENT: u64 = 50;

/// What the staged segments of a node may take against the machine's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within [`STAGED_MEMORY_WARN_PERCENT`] of the memory.
    Fits,
    /// Above it, still within the memory: the warning to log.
    Warn(String),
    /// Above the memory: the error to refuse the start with.
    TooLarge(String),
}

/// The largest segment size (a multiple of `BLOCK_BYTES`) whose staging by `fragments`
/// fragments stays within [`STAGED_MEMORY_WARN_PERCENT`] of `memory`, if one is at least
/// `SEGMENT_BYTES_MIN`.
fn fitting_segment_bytes(fragments: u64, memory: u64) -> Option<u64> {
    let share = warn_share(memory);
    let each = share / fragments.max(1) / BLOCK_BYTES * BLOCK_BYTES;
    (each >= SEGMENT_BYTES_MIN).then_some(each)
}

/// [`STAGED_MEMORY_WARN_PERCENT`] of `memory`, rounded down.
fn warn_share(memory: u64) -> u64 {
    let share = u128::from(memory) * u128::from(STAGED_MEMORY_WARN_PERCENT) / 100;
    u64::try_from(share).unwrap_or(u64::MAX)
}

/// Judges `fragments` segments of `segment_bytes` staged against `memory` bytes.
pub fn judge(fragments: u64, segment_bytes: u64, memory: u64) -> Verdict {
    let staged = fragments.saturating_mul(segment_bytes);
    if staged <= warn_share(memory) {
        return Verdict::Fits;
    }
    let advice = match fitting_segment_bytes(fragments, memory) {
        Some(fits) => format!("lower --segment-bytes to {fits} or less"),
        None => {
            "use fewer fragments (a new data directory) or a machine with more memory".to_owned()
        }
    };
    let what = format!(
        "{fragments} fragments each staging up to {segment_bytes} bytes of their active segment \
         in memory can take {staged} bytes, and this machine has {memory}"
    );
    if staged > memory {
        Verdict::TooLarge(format!("{what}: {advice}"))
    } else {
        Verdict::Warn(format!(
            "{what} (more than {STAGED_MEMORY_WARN_PERCENT}% of it): {advice} to leave room"
        ))
    }
}

/// The machine's memory for this process: `MemTotal`, or the process's cgroup memory limit
/// when lower (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`). `None` when `MemTotal`
/// cannot be read.
pub fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    let total = kib.saturating_mul(1024);
    Some(cgroup_limit().map_or(total, |limit| limit.min(total)))
}

/// The memory limit of this process's cgroup, if it has one.
fn cgroup_limit() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    groups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = if id == "0" && controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            return None;
        };
        // "max" (v2) or a huge number (v1) means no limit; either way `min` with MemTotal.
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    })
}

/// Checks the node's staged segments against the machine's memory at start: logs a warning
/// or returns the error to refuse the start with. Unknown memory is not checked.
pub fn check(fragments: u64, segment_bytes: u64) -> Result<(), String> {
    let Some(memory) = machine_memory() else {
        tracing::warn!("cannot read the machine's memory; staged segments not checked against it");
        return Ok(());
    };
    match judge(fragments, segment_bytes, memory) {
        Verdict::Fits => Ok(()),
        Verdict::Warn(w) => {
            tracing::warn!("{w}");
            Ok(())
        }
        Verdict::TooLarge(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    // Checks the three verdicts at their edges: half the memory fits, just over it warns, just
    // over the whole memory refuses.
    #[test]
    fn staged_segments_fit_warn_or_refuse() {
        assert_eq!(judge(8, GIB, 16 * GIB), Verdict::Fits);
        assert!(matches!(judge(9, GIB, 16 * GIB), Verdict::Warn(_)));
        assert!(matches!(judge(16, GIB, 16 * GIB), Verdict::Warn(_)));
        assert!(matches!(judge(17, GIB, 16 * GIB), Verdict::TooLarge(_)));
        assert!(matches!(judge(u64::MAX, GIB, 16 * GIB), Verdict::TooLarge(_)));
    }

    // Checks that the refusal names the sizes and a --segment-bytes that fits (a block
    // multiple, whose staging is within the warning share), or fewer fragments when even the
    // smallest segment would not fit.
    #[test]
    fn a_refusal_names_a_segment_size_that_fits() {
        let Verdict::TooLarge(e) = judge(4096, GIB, 24 * GIB) else { panic!("too large") };
        assert!(e.contains("4096 fragments"), "{e}");
        assert!(e.contains(&format!("can take {}", 4096 * GIB)), "{e}");
        let fits = fitting_segment_bytes(4096, 24 * GIB).expect("a size fits");
        assert!(e.contains(&format!("lower --segment-bytes to {fits} or less")), "{e}");
        assert_eq!(fits % BLOCK_BYTES, 0);
        assert_eq!(judge(4096, fits, 24 * GIB), Verdict::Fits);
        // 4,096 of the smallest segments (64 KiB) take 256 MiB: more than half of 256 MiB.
        let Verdict::TooLarge(none) = judge(4096, GIB, 256 << 20) else { panic!("too large") };
        assert!(none.contains("use fewer fragments"), "{none}");
    }

    // Checks that this machine's memory is read and is at least the smallest staged segment.
    #[test]
    fn the_machine_memory_is_read() {
        let memory = machine_memory().expect("MemTotal");
        assert!(memory >= SEGMENT_BYTES_MIN, "{memory}");
    }
}
