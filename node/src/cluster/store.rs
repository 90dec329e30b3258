//! The coordinator's durable raft state under `<data-dir>/cluster/`, for openraft's storage-v2
//! traits.
//!
//! ```text
//! raft.log        frames: u32 LE body length | u32 LE crc32(body) | body (JSON LogRecord)
//!                 LogRecord = Append(entry) | Truncate(from index) | Purge(up to log id)
//! vote.json       the last vote            (written atomically: temp, fdatasync, rename)
//! committed.json  the last committed log id (same)
//! state.json      the applied ClusterState with its last applied log id and membership (same)
//! ```
//!
//! Appends are one `write` and one `fdatasync` per batch, and openraft hears of them only
//! after that. Opening replays `raft.log`; a frame cut short or failing its crc at the end of
//! the file is the torn tail of an unacknowledged batch and is cut off; a bad frame with good
//! bytes after it is corruption and refuses to open. The state machine is persisted after
//! every applied batch, so a restart resumes from `state.json` without replaying the log; a
//! snapshot is that same state serialized.
//!
//! This runs on the control-plane thread (blocking file I/O there delays only raft, never an
//! executor). Files are small: the log holds shard-map commands, not documents.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Cursor, Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::cluster::limits::RAFT_RECORD_BYTES_MAX;
use crate::cluster::state::{Applied, ClusterState, Command};
use crate::datadir::write_atomically;

openraft::declare_raft_types!(
    /// The coordinator's raft types: commands change a `ClusterState`.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = u64,
        Node = BasicNode,
        Entry = Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Raft node ids are the operator's `--node-id`.
pub type RaftNodeId = u64;

type StorageResult<T> = Result<T, StorageError<RaftNodeId>>;

const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const COMMITTED_FILE: &str = "committed.json";
const STATE_FILE: &str = "state.json";
const FRAME_HEADER_BYTES: usize = 8;

/// Every file of the raft state under the cluster directory: what `tessera admin
/// wipe-coordinator` removes.
pub const RAFT_FILES: [&str; 4] = [LOG_FILE, VOTE_FILE, COMMITTED_FILE, STATE_FILE];

/// Why the raft state could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A file could not be read, created or repaired.
    #[error("cluster state {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file's content is damaged beyond a torn tail.
    #[error("cluster state {path} is corrupt at byte {offset}: {what}")]
    Corruption {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// One record of `raft.log`.
#[derive(Serialize, Deserialize, Debug)]
enum LogRecord {
    Append(Entry<TypeConfig>),
    Truncate(u64),
    Purge(LogId<RaftNodeId>),
}

/// The in-memory log, as replayed from and kept in step with `raft.log`.
#[derive(Debug, Default)]
struct LogInner {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<RaftNodeId>>,
    vote: Option<Vote<RaftNodeId>>,
    committed: Option<LogId<RaftNodeId>>,
}

/// openraft's log storage (and, cloned, its log reader).
#[derive(Clone, Debug)]
pub struct LogStore {
    dir: PathBuf,
    file: Arc<Mutex<File>>,
    inner: Arc<Mutex<LogInner>>,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> OpenError + '_ {
    move |source| OpenError::Io { path: path.to_owned(), source }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, OpenError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| OpenError::Corruption {
            path: path.to_owned(),
            offset: 0,
            what: e.to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(OpenError::Io { path: path.to_owned(), source: e }),
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
    // Bodies are built here from small commands; the limit is checked again on read.
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Splits `bytes` into frame bodies. Returns the bodies and the length of the valid prefix;
/// a bad or short frame that reaches the end of the file is a torn tail (the prefix stops
/// before it), one followed by more bytes is corruption.
fn split_frames(bytes: &[u8], path: &Path) -> Result<(Vec<Vec<u8>>, usize), OpenError> {
    let mut bodies = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let header = bytes.get(at..at + FRAME_HEADER_BYTES);
        let parsed = header.and_then(|h| {
            let len = u32::from_le_bytes(h.get(..4)?.try_into().ok()?);
            let crc = u32::from_le_bytes(h.get(4..)?.try_into().ok()?);
            Some((len, crc))
        });
        let Some((len, crc)) = parsed else {
            cov_mark::hit!(raft_log_torn_header);
            return Ok((bodies, at));
        };
        let body_start = at + FRAME_HEADER_BYTES;
        let body_end = body_start.saturating_add(len as usize);
        let body = bytes.get(body_start..body_end).filter(|_| len <= RAFT_RECORD_BYTES_MAX);
        match body {
            Some(body) if crc32fast::hash(body) == crc => {
                bodies.push(body.to_vec());
                at = body_end;
            }
            Some(_) if body_end < bytes.len() => {
                return Err(OpenError::Corruption {
                    path: path.to_owned(),
                    offset: at as u64,
                    what: "a record fails its checksum and later records follow".to_owned(),
                });
            }
            _ => {
                cov_mark::hit!(raft_log_torn_tail);
                return Ok((bodies, at));
            }
        }
    }
    Ok((bodies, at))
}

impl LogStore {
    /// Opens (or creates) the log under `dir`, replaying `raft.log` and cutting a torn tail.
    pub fn open(dir: &Path) -> Result<LogStore, OpenError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let path = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io_error(&path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_error(&path))?;
        let (bodies, valid) = split_frames(&bytes, &path)?;
        if valid < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                kept = valid,
                dropped = bytes.len() - valid,
                "cut the torn tail of the raft log"
            );
            file.set_len(valid as u64).map_err(io_error(&path))?;
            file.sync_data().map_err(io_error(&path))?;
        }
        let mut inner = LogInner {
            vote: read_json(&dir.join(VOTE_FILE))?,
            committed: read_json(&dir.join(COMMITTED_FILE))?,
            ..LogInner::default()
        };
        let mut offset = 0u64;
        for body in bodies {
            let record: LogRecord =
                serde_json::from_slice(&body).map_err(|e| OpenError::Corruption {
                    path: path.clone(),
                    offset,
                    what: format!("a record with a valid checksum does not parse: {e}"),
                })?;
            offset += (FRAME_HEADER_BYTES + body.len()) as u64;
            inner.replay(record);
        }
        Ok(LogStore {
            dir: dir.to_owned(),
            file: Arc::new(Mutex::new(file)),
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends records to `raft.log` with one write and one fdatasync.
    fn write_records(&self, records: &[LogRecord]) -> Result<(), std::io::Error> {
        let mut bytes = Vec::new();
        for r in records {
            let body = serde_json::to_vec(r).map_err(std::io::Error::other)?;
            if body.len() > RAFT_RECORD_BYTES_MAX as usize {
                return Err(std::io::Error::other(format!(
                    "raft log record of {} bytes exceeds {RAFT_RECORD_BYTES_MAX}",
                    body.len()
                )));
            }
            bytes.extend_from_slice(&frame(&body));
        }
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(&bytes)?;
        file.sync_data()
    }

    /// Replaces `raft.log` with what it holds now (the purge point and the entries after it),
    /// atomically: a crash before the rename leaves the old file, which only holds more.
    /// Bounds the file to the entries since the last snapshot.
    fn rewrite(&self) -> Result<(), std::io::Error> {
        let mut bytes = Vec::new();
        {
            let inner = self.inner();
            let purge = inner.last_purged.map(LogRecord::Purge);
            let entries = inner.entries.values().cloned().map(LogRecord::Append);
            for r in purge.into_iter().chain(entries) {
                let body = serde_json::to_vec(&r).map_err(std::io::Error::other)?;
                bytes.extend_from_slice(&frame(&body));
            }
        }
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        write_atomically(&self.dir, LOG_FILE, &bytes).map_err(std::io::Error::other)?;
        *file = OpenOptions::new().append(true).open(self.dir.join(LOG_FILE))?;
        Ok(())
    }

    /// The index of the last entry held (for tests).
    pub fn last_log_index(&self) -> Option<u64> {
        self.inner().entries.keys().next_back().copied()
    }
}

impl LogInner {
    fn replay(&mut self, record: LogRecord) {
        match record {
            LogRecord::Append(entry) => {
                self.entries.insert(entry.log_id.index, entry);
            }
            LogRecord::Truncate(from) => {
                self.entries.split_off(&from);
            }
            LogRecord::Purge(upto) => {
                self.entries = self.entries.split_off(&(upto.index + 1));
                self.last_purged = Some(upto);
            }
        }
    }
}

fn write_error(e: &std::io::Error) -> StorageError<RaftNodeId> {
    StorageIOError::write_logs(AnyError::new(e)).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Ok(self.inner().entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let inner = self.inner();
        let last = inner.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last.or(inner.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<RaftNodeId>) -> StorageResult<()> {
        let bytes = serde_json::to_vec(vote)
            .map_err(|e| StorageError::from(StorageIOError::write_vote(AnyError::new(&e))))?;
        write_atomically(&self.dir, VOTE_FILE, &bytes)
            .map_err(|e| StorageError::from(StorageIOError::write_vote(AnyError::new(&e))))?;
        self.inner().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<RaftNodeId>>> {
        Ok(self.inner().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<RaftNodeId>>) -> StorageResult<()> {
        let bytes = serde_json::to_vec(&committed)
            .map_err(|e| StorageError::from(StorageIOError::write(AnyError::new(&e))))?;
        write_atomically(&self.dir, COMMITTED_FILE, &bytes)
            .map_err(|e| StorageError::from(StorageIOError::write(AnyError::new(&e))))?;
        self.inner().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<RaftNodeId>>> {
        Ok(self.inner().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let records: Vec<_> = entries.iter().cloned().map(LogRecord::Append).collect();
        match self.write_records(&records) {
            Ok(()) => {
                let mut inner = self.inner();
                for e in entries {
                    inner.entries.insert(e.log_id.index, e);
                }
                drop(inner);
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = write_error(&e);
                callback.log_io_completed(Err(e));
                Err(err)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<RaftNodeId>) -> StorageResult<()> {
        self.write_records(&[LogRecord::Truncate(log_id.index)]).map_err(|e| write_error(&e))?;
        self.inner().replay(LogRecord::Truncate(log_id.index));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<RaftNodeId>) -> StorageResult<()> {
        self.inner().replay(LogRecord::Purge(log_id));
        self.rewrite().map_err(|e| write_error(&e))
    }
}

/// What `state.json` holds: the applied state and where it stands in the log.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedState {
    /// The last log id applied.
    pub last_applied: Option<LogId<RaftNodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<RaftNodeId, BasicNode>,
    /// The replicated state.
    pub state: ClusterState,
}

/// openraft's state machine over `ClusterState`; publishes every applied state on a watch.
#[derive(Clone, Debug)]
pub struct StateMachine {
    dir: PathBuf,
    inner: Arc<Mutex<AppliedState>>,
    publish: Arc<watch::Sender<AppliedState>>,
}

impl StateMachine {
    /// Opens the state machine under `dir` (empty if `state.json` does not exist).
    pub fn open(dir: &Path) -> Result<StateMachine, OpenError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let applied: AppliedState = read_json(&dir.join(STATE_FILE))?.unwrap_or_default();
        let (publish, _) = watch::channel(applied.clone());
        Ok(StateMachine {
            dir: dir.to_owned(),
            inner: Arc::new(Mutex::new(applied)),
            publish: Arc::new(publish),
        })
    }

    /// A receiver of every applied state.
    pub fn subscribe(&self) -> watch::Receiver<AppliedState> {
        self.publish.subscribe()
    }

    /// The applied state now.
    pub fn current(&self) -> AppliedState {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Writes `state.json` atomically, then publishes the state.
    fn persist(&self, applied: &AppliedState) -> Result<(), std::io::Error> {
        let bytes = serde_json::to_vec(applied).map_err(std::io::Error::other)?;
        write_atomically(&self.dir, STATE_FILE, &bytes).map_err(std::io::Error::other)?;
        self.publish.send_replace(applied.clone());
        Ok(())
    }

    fn snapshot_of(applied: &AppliedState) -> Result<Snapshot<TypeConfig>, serde_json::Error> {
        let data = serde_json::to_vec(&applied.state)?;
        let snapshot_id = applied
            .last_applied
            .map_or_else(|| "empty".to_owned(), |l| format!("{}-{}", l.leader_id, l.index));
        Ok(Snapshot {
            meta: SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership.clone(),
                snapshot_id,
            },
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        StateMachine::snapshot_of(&self.current())
            .map_err(|e| StorageIOError::read_state_machine(AnyError::new(&e)).into())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<RaftNodeId>>, StoredMembership<RaftNodeId, BasicNode>)> {
        let applied = self.current();
        Ok((applied.last_applied, applied.membership))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Applied>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut applied = self.current();
        let mut results = Vec::new();
        for entry in entries {
            applied.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => results.push(Ok(applied.state.epoch)),
                EntryPayload::Normal(command) => {
                    let result = applied.state.apply(&command);
                    if let Err(e) = &result {
                        tracing::debug!(?command, "coordinator command refused: {e}");
                    }
                    results.push(result);
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    results.push(Ok(applied.state.epoch));
                }
            }
        }
        self.persist(&applied)
            .map_err(|e| StorageIOError::write_state_machine(AnyError::new(&e)))?;
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = applied;
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<RaftNodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let state: ClusterState = serde_json::from_slice(snapshot.get_ref()).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::new(&e),
            ))
        })?;
        let applied = AppliedState {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            state,
        };
        self.persist(&applied).map_err(|e| {
            StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e))
        })?;
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = applied;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let applied = self.current();
        if applied.last_applied.is_none() {
            return Ok(None);
        }
        StateMachine::snapshot_of(&applied)
            .map(Some)
            .map_err(|e| StorageIOError::read_state_machine(AnyError::new(&e)).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir()
            .join(format!("tessera-cluster-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Command::Allocate { owners: vec![1], min_members: 1 }),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime")
    }

    // Appending needs openraft's callback, which only openraft can make; these tests write
    // records the way `append` does (write_records, then the in-memory insert) and check what a
    // reopen replays.
    fn append(store: &LogStore, entries: &[Entry<TypeConfig>]) {
        let records: Vec<_> = entries.iter().cloned().map(LogRecord::Append).collect();
        store.write_records(&records).expect("write");
        for e in entries {
            store.inner().entries.insert(e.log_id.index, e.clone());
        }
    }

    // Checks appends, a truncation, a purge and the vote survive a reopen exactly.
    #[test]
    fn reopen_replays_log_and_vote() {
        let d = dir("reopen");
        rt().block_on(async {
            let mut store = LogStore::open(&d).expect("open");
            append(&store, &[entry(1, 1), entry(1, 2), entry(1, 3), entry(2, 4)]);
            store.truncate(entry(2, 4).log_id).await.expect("truncate");
            store.purge(entry(1, 1).log_id).await.expect("purge");
            let vote = Vote::new(2, 1);
            store.save_vote(&vote).await.expect("vote");
            store.save_committed(Some(entry(1, 2).log_id)).await.expect("committed");
            let mut again = LogStore::open(&d).expect("reopen");
            let state = again.get_log_state().await.expect("state");
            assert_eq!(state.last_log_id, Some(entry(1, 3).log_id));
            assert_eq!(state.last_purged_log_id, Some(entry(1, 1).log_id));
            let got = again.try_get_log_entries(0..10).await.expect("read");
            let indexes: Vec<u64> = got.iter().map(|e| e.log_id.index).collect();
            assert_eq!(indexes, [2, 3]);
            // The purge rewrote the file: no record of entry 1 or of the truncated 4 is left.
            let text = String::from_utf8_lossy(&std::fs::read(d.join(LOG_FILE)).expect("log"))
                .into_owned();
            assert_eq!(text.matches("\"Append\"").count(), 2, "{text}");
            assert!(!text.contains("Truncate"), "{text}");
            // Appends after a rewrite go to the new file.
            append(&again, &[entry(3, 4)]);
            let third = LogStore::open(&d).expect("reopen after rewrite");
            assert_eq!(third.last_log_index(), Some(4));
            assert_eq!(again.read_vote().await.expect("vote"), Some(vote));
            assert_eq!(again.read_committed().await.expect("c"), Some(entry(1, 2).log_id));
        });
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

    // Checks a torn last record (cut anywhere inside it) is dropped at reopen and the file is
    // cut back, keeping every earlier record.
    #[test]
    fn crash_torn_tail_is_cut() {
        let d = dir("torn");
        {
            let store = LogStore::open(&d).expect("open");
            append(&store, &[entry(1, 1), entry(1, 2)]);
        }
        let path = d.join(LOG_FILE);
        let full = std::fs::read(&path).expect("read");
        let one = {
            let store_len = full.len();
            // The second record starts where the first ends.
            let first_len =
                FRAME_HEADER_BYTES + u32::from_le_bytes(full[..4].try_into().expect("4")) as usize;
            assert!(first_len < store_len);
            first_len
        };
        for cut in [one + FRAME_HEADER_BYTES + 1, full.len() - 1] {
            std::fs::write(&path, &full[..cut]).expect("tear");
            cov_mark::check!(raft_log_torn_tail);
            let store = LogStore::open(&d).expect("a torn tail opens");
            assert_eq!(store.last_log_index(), Some(1), "cut at {cut}");
            assert_eq!(std::fs::metadata(&path).expect("meta").len(), one as u64);
        }
        std::fs::write(&path, &full[..one + 3]).expect("tear header");
        {
            cov_mark::check!(raft_log_torn_header);
            LogStore::open(&d).expect("a torn header opens");
        }
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

    // Checks a bit flip in a record followed by a good one refuses to open (corruption, not a
    // torn tail), naming the offset.
    #[test]
    fn crash_bit_flip_before_good_record_is_corruption() {
        let d = dir("flip");
        {
            let store = LogStore::open(&d).expect("open");
            append(&store, &[entry(1, 1), entry(1, 2)]);
        }
        let path = d.join(LOG_FILE);
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[FRAME_HEADER_BYTES + 2] ^= 0x10;
        std::fs::write(&path, &bytes).expect("flip");
        let e = LogStore::open(&d).expect_err("corrupt");
        assert!(matches!(e, OpenError::Corruption { offset: 0, .. }), "{e}");
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

    // Checks the state machine applies commands, persists after each batch (a reopen sees the
    // same state and last applied id), and that a snapshot installs into a fresh one.
    #[test]
    fn state_machine_persists_and_snapshots() {
        let d = dir("sm");
        let d2 = dir("sm2");
        rt().block_on(async {
            let mut sm = StateMachine::open(&d).expect("open");
            let member = crate::cluster::state::Member {
                role: crate::cluster::wire::Role::Data,
                peer_addr: "a".into(),
                pg_addr: "b".into(),
                executors: 1,
            };
            let add = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
                payload: EntryPayload::Normal(Command::AddMember { node: 1, member }),
            };
            let results = sm.apply([add, entry(1, 2)]).await.expect("apply");
            assert_eq!(results, [Ok(0), Ok(1)]);
            let reopened = StateMachine::open(&d).expect("reopen").current();
            assert_eq!(reopened, sm.current());
            assert_eq!(reopened.last_applied.map(|l| l.index), Some(2));
            assert_eq!(reopened.state.epoch, 1);
            let snap = sm.build_snapshot().await.expect("snapshot");
            let mut other = StateMachine::open(&d2).expect("open other");
            other.install_snapshot(&snap.meta, snap.snapshot).await.expect("install");
            assert_eq!(other.current(), sm.current());
            assert_eq!(StateMachine::open(&d2).expect("reopen").current(), sm.current());
        });
        std::fs::remove_dir_all(&d).expect("cleanup");
        std::fs::remove_dir_all(&d2).expect("cleanup");
    }
}
