//! `tessera admin`: operator actions on a stopped cluster.
//!
//! `tessera admin wipe-coordinator --data-dir D [--data-dir D2 ...]` removes the coordinator's
//! raft state (`cluster/raft.log`, `vote.json`, `committed.json`, `state.json`) from every
//! given data directory, so the nodes form a new cluster on their next start. It refuses while
//! any node is up: every directory's `LOCK` must be free (it is taken for the whole wipe), and
//! every member address recorded in any of the raft states must refuse a connection (each one
//! that accepts is named), and as many directories as the raft state has members must be given
//! (`--allow-missing` when a member's disk is lost): a member keeping its old raft state would
//! go on with the old cluster while the wiped ones form a new one. The fragments on the nodes' disks are not touched: the newest map
//! found is written to each directory as `cluster/prior-map.json`, and the re-formed cluster's
//! coordinator allocates each fragment to the node that held it (`cluster::prior`) once those
//! nodes are members again. Exit status 0 after a wipe, 1 when refused or failed.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::cluster::prior::{self, PriorMap};
use crate::cluster::store::{AppliedState, RAFT_FILES};

/// How long a recorded member address gets to accept a connection before it counts as down.
const MEMBER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The subdirectory of a data directory holding the raft state.
const CLUSTER_DIR: &str = "cluster";

/// Arguments of `tessera admin`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(clap::Subcommand, Debug)]
enum AdminCommand {
    /// Wipe the coordinator (raft) state of a stopped cluster, keeping every node's fragments
    /// where they are: the re-formed cluster adopts them.
    WipeCoordinator(WipeArgs),
}

/// Arguments of `tessera admin wipe-coordinator`.
#[derive(clap::Args, Debug)]
pub struct WipeArgs {
    /// A stopped node's data directory; give every member's directory (proxies too).
    #[arg(long = "data-dir", value_name = "DIR", required = true)]
    pub data_dirs: Vec<PathBuf>,
    /// Wipe even though fewer directories are given than the raft state has members (a
    /// member's disk is lost). A member left with its old raft state would go on with the old
    /// cluster while the wiped ones form a new one.
    #[arg(long)]
    pub allow_missing: bool,
}

/// Runs `tessera admin`.
pub fn main(args: &Args) -> ExitCode {
    match &args.command {
        AdminCommand::WipeCoordinator(wipe) => {
            match wipe_coordinator(&wipe.data_dirs, wipe.allow_missing) {
                Ok(report) => {
                    print!("{report}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("tessera admin wipe-coordinator: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Why a wipe was refused or failed. Nothing was removed unless the variant says so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WipeError {
    /// A directory is not a Tessera data directory.
    #[error("{0} is not a tessera data directory (no LOCK file)")]
    NotDataDir(PathBuf),
    /// A running node holds a directory.
    #[error("{0} is held by a running node; stop it first")]
    Locked(PathBuf),
    /// Recorded members still accept connections.
    #[error("refusing while members are up: {}", up.join(", "))]
    MembersUp {
        /// Each member that answered, as `node N at ADDR`.
        up: Vec<String>,
    },
    /// Fewer directories than members: the others would keep the old raft state.
    #[error(
        "the raft state has {members} members but {given} data directories were given; give \
         every member's directory (proxies too), or --allow-missing if a member's disk is lost"
    )]
    Missing {
        /// Members recorded.
        members: usize,
        /// Directories given.
        given: usize,
    },
    /// A file could not be read, removed or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// One locked data directory and the raft state found in it.
struct Held {
    root: PathBuf,
    _lock: File,
    applied: Option<AppliedState>,
}

/// Wipes the coordinator state of every directory in `dirs`; returns what it did, one line
/// per directory.
pub fn wipe_coordinator(dirs: &[PathBuf], allow_missing: bool) -> Result<String, WipeError> {
    let mut held = Vec::with_capacity(dirs.len());
    for root in dirs {
        held.push(lock(root)?);
    }
    // Every member any state records, by node id (the newest state's address wins).
    let mut members: BTreeMap<u64, String> = BTreeMap::new();
    let mut by_age: Vec<&AppliedState> = held.iter().filter_map(|h| h.applied.as_ref()).collect();
    by_age.sort_by_key(|a| a.last_applied);
    for applied in &by_age {
        for (node, m) in applied.membership.membership().nodes() {
            members.insert(*node, m.addr.clone());
        }
        for (node, m) in &applied.state.members {
            members.insert(u64::from(*node), m.peer_addr.clone());
        }
    }
    let up: Vec<String> = members
        .iter()
        .filter(|(_, addr)| accepts(addr))
        .map(|(node, addr)| format!("node {node} at {addr}"))
        .collect();
    if !up.is_empty() {
        return Err(WipeError::MembersUp { up });
    }
    if !allow_missing && dirs.len() < members.len() {
        return Err(WipeError::Missing { members: members.len(), given: dirs.len() });
    }
    let newest = by_age.iter().rev().find(|a| a.state.allocated());
    let prior = newest.map(|a| PriorMap {
        epoch: a.state.epoch,
        owners: a.state.fragments.iter().map(|f| f.node).collect(),
    });
    let mut report = String::new();
    for h in &held {
        let dir = h.root.join(CLUSTER_DIR);
        let mut removed = 0;
        for name in RAFT_FILES {
            let path = dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(WipeError::Io { path, reason: e.to_string() }),
            }
        }
        if let Some(prior) = &prior {
            std::fs::create_dir_all(&dir)
                .map_err(|e| WipeError::Io { path: dir.clone(), reason: e.to_string() })?;
            prior::write(&dir, prior).map_err(|reason| WipeError::Io {
                path: dir.join(prior::PRIOR_MAP_FILE),
                reason,
            })?;
        }
        if dir.exists() {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| WipeError::Io { path: dir.clone(), reason: e.to_string() })?;
        }
        let kept = if prior.is_some() {
            ", kept the shard map in cluster/prior-map.json"
        } else if matches!(prior::read(&dir), Ok(Some(_))) {
            ", its cluster/prior-map.json of an earlier wipe stays"
        } else {
            ""
        };
        report
            .push_str(&format!("{}: removed {removed} raft state files{kept}\n", h.root.display()));
    }
    match &prior {
        Some(p) => report.push_str(&format!(
            "the re-formed cluster adopts the map of epoch {} ({} fragments on nodes {:?}) once \
             those nodes are members again\n",
            p.epoch,
            p.owners.len(),
            p.owners.iter().collect::<std::collections::BTreeSet<_>>()
        )),
        None => report.push_str("no allocated shard map in the raft state\n"),
    }
    Ok(report)
}

/// Locks `root` exclusively (as a running node does) and reads its applied raft state.
fn lock(root: &Path) -> Result<Held, WipeError> {
    let lock_path = root.join("LOCK");
    let file = match File::options().write(true).open(&lock_path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(WipeError::NotDataDir(root.to_owned()));
        }
        Err(e) => return Err(WipeError::Io { path: lock_path, reason: e.to_string() }),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Err(WipeError::Locked(root.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(WipeError::Io { path: lock_path, reason: e.to_string() });
        }
    }
    let state_path = root.join(CLUSTER_DIR).join("state.json");
    let applied = match std::fs::read(&state_path) {
        Ok(bytes) => Some(serde_json::from_slice::<AppliedState>(&bytes).map_err(|e| {
            WipeError::Io { path: state_path.clone(), reason: format!("not a raft state: {e}") }
        })?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(WipeError::Io { path: state_path, reason: e.to_string() }),
    };
    Ok(Held { root: root.to_owned(), _lock: file, applied })
}

/// Whether something accepts TCP connections at `addr` (any of its resolved addresses).
fn accepts(addr: &str) -> bool {
    addr.to_socket_addrs().is_ok_and(|mut addrs| {
        addrs.any(|a| TcpStream::connect_timeout(&a, MEMBER_CONNECT_TIMEOUT).is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-admin-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(CLUSTER_DIR)).expect("dir");
        std::fs::write(dir.join("LOCK"), b"").expect("lock file");
        dir
    }

    // Checks a directory without LOCK is refused, one whose LOCK is held is refused, and a
    // state that does not parse is refused naming the file; nothing is removed.
    #[test]
    fn wipe_refuses_bad_directories() {
        let missing = std::env::temp_dir().join("tessera-admin-no-such-dir");
        assert!(matches!(wipe_coordinator(&[missing], false), Err(WipeError::NotDataDir(_))));
        let dir = scratch("locked");
        let holder = File::options().write(true).open(dir.join("LOCK")).expect("open");
        holder.try_lock().expect("hold the lock");
        std::fs::write(dir.join("cluster/vote.json"), b"{}").expect("vote");
        assert!(matches!(
            wipe_coordinator(std::slice::from_ref(&dir), true),
            Err(WipeError::Locked(_))
        ));
        assert!(dir.join("cluster/vote.json").exists(), "nothing removed");
        drop(holder);
        std::fs::write(dir.join("cluster/state.json"), b"{nonsense").expect("state");
        let e = wipe_coordinator(std::slice::from_ref(&dir), true).expect_err("bad state");
        assert!(e.to_string().contains("state.json"), "{e}");
        assert!(dir.join("cluster/vote.json").exists(), "nothing removed");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    // Checks a recorded member that accepts connections refuses the wipe, naming it, and that
    // once it is gone the raft files are removed and the map kept as prior-map.json.
    #[test]
    fn wipe_refuses_while_a_member_is_up_then_keeps_the_map() {
        use crate::cluster::state::{Command, Member};
        use crate::cluster::wire::Role;
        let dir = scratch("member-up");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        let up_addr = listener.local_addr().expect("addr").to_string();
        let mut applied = AppliedState::default();
        for (node, addr) in [(1, up_addr.clone()), (2, "127.0.0.1:1".to_owned())] {
            let member =
                Member { role: Role::Data, peer_addr: addr, pg_addr: String::new(), executors: 1 };
            applied.state.apply(&Command::AddMember { node, member }).expect("member");
        }
        applied
            .state
            .apply(&Command::Allocate { owners: vec![2, 1, 2], min_members: 2 })
            .expect("map");
        let json = serde_json::to_vec(&applied).expect("json");
        std::fs::write(dir.join("cluster/state.json"), json).expect("state");
        std::fs::write(dir.join("cluster/raft.log"), b"").expect("log");
        let e = wipe_coordinator(std::slice::from_ref(&dir), true).expect_err("member up");
        assert!(e.to_string().contains(&format!("node 1 at {up_addr}")), "{e}");
        assert!(dir.join("cluster/state.json").exists(), "nothing removed");
        drop(listener);
        let e = wipe_coordinator(std::slice::from_ref(&dir), false).expect_err("one of two");
        assert!(matches!(e, WipeError::Missing { members: 2, given: 1 }), "{e}");
        assert!(dir.join("cluster/state.json").exists(), "nothing removed");
        let report = wipe_coordinator(std::slice::from_ref(&dir), true).expect("wiped");
        assert!(report.contains("removed 2 raft state files"), "{report}");
        for name in RAFT_FILES {
            assert!(!dir.join(CLUSTER_DIR).join(name).exists(), "{name} removed");
        }
        let prior = prior::read(&dir.join(CLUSTER_DIR)).expect("read").expect("kept");
        assert_eq!(prior, PriorMap { epoch: 1, owners: vec![2, 1, 2] });
        // A second wipe finds no raft state and keeps what the first left.
        let report = wipe_coordinator(std::slice::from_ref(&dir), true).expect("wiped again");
        assert!(report.contains("removed 0 raft state files"), "{report}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
