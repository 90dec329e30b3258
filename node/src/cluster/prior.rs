//! The shard map a cluster had before its coordinator state was wiped (`tessera admin
//! wipe-coordinator`), and how the re-formed cluster adopts it.
//!
//! A wipe removes the raft state (log, vote, applied state) of every given data directory but
//! not the fragments on the nodes' disks. So that the re-formed cluster finds each fragment
//! where it is, the wipe writes `prior-map.json` (the owners of the newest map it found, in
//! fragment order) into every wiped directory's `cluster/`. The coordinator of a cluster
//! whose map is not allocated yet reads its own copy: it waits until every node named there is
//! a data member again, then proposes an `Allocate` with exactly those owners instead of the
//! strategy's choice. Once a map exists the file is never consulted again (a later wipe
//! rewrites it).

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cluster::state::ClusterState;
use crate::config::FRAGMENTS_MAX;

/// The file under a data directory's `cluster/` holding the map before a wipe.
pub const PRIOR_MAP_FILE: &str = "prior-map.json";

/// The shard map before a wipe: who owned each fragment, in fragment order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct PriorMap {
    /// The map's epoch when it was wiped (for the operator; the new map starts again at 1).
    pub epoch: u64,
    /// The owner node of fragment `i`.
    pub owners: Vec<u32>,
}

/// What the coordinator does about a prior map while no map is allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PriorDecision {
    /// Allocate with these owners (every one is a data member now).
    Allocate(Vec<u32>),
    /// Wait: these nodes held fragments and are not data members yet.
    Wait {
        /// The nodes still missing, by id.
        missing: Vec<u32>,
    },
}

/// Decides from the prior map and the current members.
pub fn decide(prior: &PriorMap, state: &ClusterState) -> PriorDecision {
    let members: BTreeSet<u32> = state.data_members().collect();
    let owners: BTreeSet<u32> = prior.owners.iter().copied().collect();
    let missing: Vec<u32> = owners.difference(&members).copied().collect();
    if missing.is_empty() {
        PriorDecision::Allocate(prior.owners.clone())
    } else {
        PriorDecision::Wait { missing }
    }
}

/// Reads `dir/prior-map.json`: `Ok(None)` when there is none, an error naming the file when
/// it cannot be read or is not a valid prior map.
pub fn read(dir: &Path) -> Result<Option<PriorMap>, String> {
    let path = dir.join(PRIOR_MAP_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let prior: PriorMap = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not a prior shard map: {e}", path.display()))?;
    let count = u32::try_from(prior.owners.len()).unwrap_or(u32::MAX);
    if count == 0 || count > FRAGMENTS_MAX {
        return Err(format!(
            "{} names {count} fragments; a map has 1 to {FRAGMENTS_MAX}",
            path.display()
        ));
    }
    Ok(Some(prior))
}

/// Writes `dir/prior-map.json` atomically (temp file, fdatasync, rename, directory fsync).
pub fn write(dir: &Path, prior: &PriorMap) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(prior).map_err(|e| e.to_string())?;
    crate::datadir::write_atomically(dir, PRIOR_MAP_FILE, &bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::state::{Command, Member};
    use crate::cluster::wire::Role;

    fn with_members(nodes: &[(u32, Role)]) -> ClusterState {
        let mut s = ClusterState::default();
        for (node, role) in nodes {
            let member = Member {
                role: *role,
                peer_addr: format!("127.0.0.1:{node}"),
                pg_addr: "127.0.0.1:1".into(),
                executors: 2,
            };
            s.apply(&Command::AddMember { node: *node, member }).expect("member");
        }
        s
    }

    // Checks the coordinator waits for every node that held fragments (a proxy does not count)
    // and then allocates exactly the prior owners, even where the strategy would choose others.
    #[test]
    fn decide_waits_for_holders_then_adopts_them() {
        let prior = PriorMap { epoch: 7, owners: vec![3, 3, 1, 2, 3, 1] };
        let s = with_members(&[(1, Role::Data), (3, Role::Proxy)]);
        assert_eq!(decide(&prior, &s), PriorDecision::Wait { missing: vec![2, 3] });
        let s = with_members(&[(1, Role::Data), (2, Role::Data), (3, Role::Data), (4, Role::Data)]);
        let PriorDecision::Allocate(owners) = decide(&prior, &s) else { panic!("allocates") };
        assert_eq!(owners, prior.owners);
        let mut s = s;
        assert_eq!(s.apply(&Command::Allocate { owners, min_members: 3 }), Ok(1));
        assert_eq!(s.fragments_of(3), 3);
        assert_eq!(s.fragments_of(4), 0, "a new node gets nothing it did not hold");
    }

    // Checks the file round-trips, a missing file is None and a bad one is an error naming it.
    #[test]
    fn prior_map_file_roundtrip_and_bad_input() {
        let dir = std::env::temp_dir().join(format!("tessera-prior-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        assert_eq!(read(&dir), Ok(None));
        let prior = PriorMap { epoch: 2, owners: vec![1, 2] };
        write(&dir, &prior).expect("write");
        assert_eq!(read(&dir), Ok(Some(prior)));
        for bad in [&b"{"[..], b"{\"epoch\":1,\"owners\":[]}", b"[1,2]"] {
            std::fs::write(dir.join(PRIOR_MAP_FILE), bad).expect("write bad");
            let e = read(&dir).expect_err("bad file");
            assert!(e.contains(PRIOR_MAP_FILE), "{e}");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
