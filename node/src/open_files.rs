//! The open-file budget of a serving node (`RLIMIT_NOFILE`).
//!
//! Every fragment holds files (its lock, the active segment and the descriptor its chunk jobs
//! write through, a spare being filled, a compaction's output), and every client connection
//! is a socket. A node that ran out of descriptors would fail a segment roll (the fragment
//! then stops accepting writes) or refuse clients with an error that names neither cause.
//! So `serve` settles the budget before it opens anything: it raises the soft limit towards
//! what the node needs (never past the hard limit), reserves the files of the fragments, the
//! executors and the listeners, and admits only as many client connections as then fit. A
//! limit too low for the fragments alone, or for fewer than [`CONNECTIONS_MIN`] clients, is an
//! error at start, never a failure under load.

use crate::metrics::limits::HTTP_CONNECTIONS_MAX;
use crate::pg::limits::{PG_CONNECTIONS_MAX, PG_CONNECTIONS_STARTING_MAX};

/// Files one fragment may hold at once: its directory lock, the active segment and its
/// duplicate descriptor (chunk jobs on the blocking threads write through it), a spare segment
/// being zero-filled and its duplicate, a compaction's output segment and its duplicate, and
/// one transient open (a segment mapped for reading, a backup's copy).
pub const FILES_PER_FRAGMENT_MAX: u64 = 8;

/// Files of one executor: its io_uring rings, their eventfd, its PostgreSQL and metrics
/// listeners, the blocking threads' descriptors.
pub const FILES_PER_EXECUTOR: u64 = 8;

/// Files of the process apart from executors, fragments and clients: standard streams, the
/// coordinator journal (and its rewrite), the signal thread, the data directory's lock.
pub const FILES_BASE: u64 = 64;

/// More files of a cluster node: peer connections (control and data), the Raft log and
/// snapshots.
pub const FILES_CLUSTER: u64 = 256;

/// Fewest client connections a node starts with; a lower limit is an error at start.
pub const CONNECTIONS_MIN: usize = 8;

/// What the node needs and what it will use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The soft limit found at start.
    pub soft_before: u64,
    /// The soft limit to run with (raised towards `needed`, at most the hard limit).
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
    /// Files for everything with [`PG_CONNECTIONS_MAX`] clients.
    pub needed: u64,
    /// Client connections admitted (`PgRegistry`).
    pub connections: usize,
}

/// Files reserved for a node with `fragments` fragments on `executors` executors: everything
/// but the clients' sockets (clients still starting up and metrics scrapes included).
pub fn reserved_files(fragments: u64, executors: u64, clustered: bool) -> u64 {
    let cluster = if clustered { FILES_CLUSTER } else { 0 };
    let sockets = (PG_CONNECTIONS_STARTING_MAX + HTTP_CONNECTIONS_MAX) as u64;
    FILES_BASE
        .saturating_add(executors.saturating_mul(FILES_PER_EXECUTOR))
        .saturating_add(fragments.saturating_mul(FILES_PER_FRAGMENT_MAX))
        .saturating_add(cluster)
        .saturating_add(sockets)
}

/// The budget for limits `soft` and `hard` (`u64::MAX` for unlimited) and `reserved` files
/// (`reserved_files`); an error when not even [`CONNECTIONS_MIN`] clients would fit.
pub fn plan(soft: u64, hard: u64, reserved: u64) -> Result<Budget, String> {
    let needed = reserved.saturating_add(PG_CONNECTIONS_MAX as u64);
    // The kernel keeps soft <= hard, so raising to the need, capped by hard, never lowers it.
    let raised = if soft >= needed { soft } else { needed.min(hard) };
    let room = usize::try_from(raised.saturating_sub(reserved)).unwrap_or(usize::MAX);
    if room < CONNECTIONS_MIN {
        return Err(format!(
            "the open-file limit (RLIMIT_NOFILE) is {raised} (hard limit {}), too low: this \
             node needs {reserved} files for its fragments, executors and listeners and at \
             least {CONNECTIONS_MIN} more for clients; raise it to {needed} (`ulimit -n \
             {needed}`, or LimitNOFILE={needed} in a systemd unit)",
            shown(hard)
        ));
    }
    Ok(Budget {
        soft_before: soft,
        soft: raised,
        hard,
        needed,
        connections: room.min(PG_CONNECTIONS_MAX),
    })
}

fn shown(limit: u64) -> String {
    if limit == u64::MAX { "unlimited".to_owned() } else { limit.to_string() }
}

/// Settles the process's budget: reads `RLIMIT_NOFILE`, raises the soft limit as [`plan`]
/// says, logs what it did (a warning when fewer than [`PG_CONNECTIONS_MAX`] clients fit) and
/// returns the budget. An error when the limit cannot be read or set, or is too low.
pub fn settle(fragments: u64, executors: u64, clustered: bool) -> Result<Budget, String> {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit(2) writes one `rlimit` through a valid pointer to a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) } != 0 {
        return Err(format!(
            "cannot read the open-file limit: {}",
            std::io::Error::last_os_error()
        ));
    }
    let unlimited = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { u64::MAX } else { v };
    let reserved = reserved_files(fragments, executors, clustered);
    let budget = plan(unlimited(current.rlim_cur), unlimited(current.rlim_max), reserved)?;
    if budget.soft != budget.soft_before {
        let raised = libc::rlimit { rlim_cur: budget.soft, rlim_max: current.rlim_max };
        // SAFETY: setrlimit(2) reads one `rlimit` through a valid pointer to a local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(format!(
                "cannot raise the open-file limit from {} to {}: {}",
                budget.soft_before,
                budget.soft,
                std::io::Error::last_os_error()
            ));
        }
        tracing::info!(
            from = budget.soft_before,
            to = budget.soft,
            "raised the open-file limit (RLIMIT_NOFILE) to what the node needs"
        );
    }
    if budget.connections < PG_CONNECTIONS_MAX {
        tracing::warn!(
            "the open-file limit (RLIMIT_NOFILE) {} (hard limit {}) leaves room for {} client \
             connections, not {PG_CONNECTIONS_MAX}: this node admits {} (raise the limit to {} \
             for all of them)",
            budget.soft,
            shown(budget.hard),
            budget.connections,
            budget.connections,
            budget.needed
        );
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESERVED: u64 = 500;
    const NEEDED: u64 = RESERVED + PG_CONNECTIONS_MAX as u64;

    // Checks that a soft limit below the need is raised to the need when the hard limit allows
    // it, and that every client connection then fits.
    #[test]
    fn a_low_soft_limit_is_raised_to_the_need() {
        let b = plan(1024, 1 << 20, RESERVED).expect("plan");
        assert_eq!((b.soft_before, b.soft, b.needed), (1024, NEEDED, NEEDED));
        assert_eq!(b.connections, PG_CONNECTIONS_MAX);
        let unlimited = plan(1024, u64::MAX, RESERVED).expect("plan");
        assert_eq!(unlimited.soft, NEEDED);
    }

    // Checks that a soft limit already above the need is left alone (never lowered).
    #[test]
    fn a_high_soft_limit_is_kept() {
        let b = plan(1 << 20, 1 << 20, RESERVED).expect("plan");
        assert_eq!(b.soft, 1 << 20);
        assert_eq!(b.connections, PG_CONNECTIONS_MAX);
    }

    // Checks that a hard limit below the need caps the raise and the connections: the
    // fragments keep their reserve, clients get what is left.
    #[test]
    fn a_low_hard_limit_admits_fewer_connections() {
        let b = plan(256, RESERVED + 100, RESERVED).expect("plan");
        assert_eq!(b.soft, RESERVED + 100);
        assert_eq!(b.connections, 100);
        let at_min = plan(RESERVED + 8, RESERVED + 8, RESERVED).expect("plan");
        assert_eq!(at_min.connections, CONNECTIONS_MIN);
    }

    // Checks that a limit leaving fewer than CONNECTIONS_MIN clients is an error that names the
    // limit, the need and how to raise it.
    #[test]
    fn a_limit_too_low_to_serve_is_an_error() {
        let e = plan(RESERVED + 7, RESERVED + 7, RESERVED).expect_err("too low");
        assert!(e.contains(&format!("is {}", RESERVED + 7)), "{e}");
        assert!(e.contains(&format!("ulimit -n {NEEDED}")), "{e}");
        let below = plan(100, 100, RESERVED).expect_err("below the reserve");
        assert!(below.contains("needs 500 files"), "{below}");
    }

    // Checks the reserve's arithmetic: per fragment, per executor, a cluster's extra, and the
    // sockets of starting clients and scrapes.
    #[test]
    fn the_reserve_counts_fragments_executors_and_the_cluster() {
        let sockets = (PG_CONNECTIONS_STARTING_MAX + HTTP_CONNECTIONS_MAX) as u64;
        let one = reserved_files(1, 1, false);
        assert_eq!(one, FILES_BASE + FILES_PER_EXECUTOR + FILES_PER_FRAGMENT_MAX + sockets);
        assert_eq!(reserved_files(9, 1, false) - one, 8 * FILES_PER_FRAGMENT_MAX);
        assert_eq!(reserved_files(1, 3, false) - one, 2 * FILES_PER_EXECUTOR);
        assert_eq!(reserved_files(1, 1, true) - one, FILES_CLUSTER);
        assert_eq!(reserved_files(u64::MAX, 1, false), u64::MAX);
    }
}
