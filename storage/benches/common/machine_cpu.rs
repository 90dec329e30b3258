//! The whole machine's CPU time, from `/proc/stat`: shared by the `log` bench and the
//! `sync_cost` example (`#[path]`-included by both).

/// CPU ticks the whole machine spent busy so far: user, nice, system, irq, softirq and steal
/// (all but idle and iowait; guest time is already inside user and nice).
pub fn busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or_default();
    line.split_whitespace()
        .skip(1)
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

/// Ticks per second of [`busy_ticks`] (`_SC_CLK_TCK`).
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf takes a constant and reads a system setting.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}
