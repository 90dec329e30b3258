//! A consistent cut of one fragment for a backup, and the fragment's I/O counters.
//!
//! A cut is the fragment's durable log at one moment: every sealed segment whole, and the
//! active segment up to the end of its last durable chunk. Segments are append-only and a
//! block holding a chunk is never rewritten, so a prefix of the log is a consistent state that
//! recovery opens without truncating anything acknowledged.
//!
//! Compaction is not held off for the length of the copy. Instead, the cut waits for a running
//! compaction to finish, then reads the segment list and opens every file in one step without
//! yielding (no other task of the executor runs in between), and hands out the open file
//! descriptors: a compaction that later removes a segment unlinks its name, but the descriptor
//! keeps the file's bytes readable until the copy is done. So the copy may take as long as it
//! needs while writers and compaction go on.

use std::fs::File;
use std::time::{Duration, Instant};

use router::FragmentId;

use crate::error::{AppendError, CutError};
use crate::fragment::{Fragment, FragmentStats};
use crate::iostats::IoStats;

/// How often a cut checks whether a running compaction has finished.
pub const CUT_COMPACTION_POLL: Duration = Duration::from_millis(2);

/// Longest a cut waits for a running compaction before giving up (the caller may retry).
pub const CUT_COMPACTION_WAIT_MAX: Duration = Duration::from_secs(600);

/// One file of a cut: copy `len` bytes of `file` to `name` in the fragment's directory.
#[derive(Debug)]
pub struct CutFile {
    /// The file name inside the fragment directory (e.g. `0000000000000003-0000.seg`).
    pub name: String,
    /// An open descriptor: stays readable even if compaction removes the name.
    pub file: File,
    /// Bytes to copy: the whole file for sealed segments, the durable prefix for the active one.
    pub len: u64,
}

/// A fragment's log at one moment. `Send`: it may be copied on another thread.
#[derive(Debug)]
pub struct BackupCut {
    /// The fragment.
    pub fragment: FragmentId,
    /// The last durable LSN included.
    pub lsn_durable: u64,
    /// Segment files in log order.
    pub files: Vec<CutFile>,
}

impl BackupCut {
    /// Bytes the cut covers.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.len).sum()
    }
}

impl Fragment {
    /// Takes a backup cut (see the module docs). Blocks nothing but this call: writers go on.
    pub async fn backup_cut(&self) -> Result<BackupCut, CutError> {
        let inner = &self.inner;
        let started = Instant::now();
        while inner.compacting.get() {
            if started.elapsed() > CUT_COMPACTION_WAIT_MAX {
                return Err(AppendError::Fatal {
                    fragment: inner.id,
                    reason: "a compaction is still running; backup cut abandoned".to_owned(),
                }
                .into());
            }
            glommio::timer::sleep(CUT_COMPACTION_POLL).await;
        }
        // From here to the end: no `.await`, so the segment list cannot change under us.
        let st = inner.st.borrow();
        if let Some(reason) = &st.fatal {
            return Err(AppendError::Fatal { fragment: inner.id, reason: reason.clone() }.into());
        }
        let active = st.active.as_ref().map(|a| (a.seg.uid(), a.pos));
        let mut files = Vec::with_capacity(st.segments.len());
        for seg in &st.segments {
            let path = seg.path();
            let file = File::open(path).map_err(|source| CutError::Io {
                fragment: inner.id,
                path: path.to_path_buf(),
                source,
            })?;
            let len = match active {
                Some((uid, pos)) if uid == seg.uid() => pos,
                _ => seg.len(),
            };
            let name =
                path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            files.push(CutFile { name, file, len });
        }
        Ok(BackupCut { fragment: inner.id, lsn_durable: st.lsn_durable, files })
    }

    /// Group-commit I/O counters since open.
    pub fn io_stats(&self) -> IoStats {
        self.inner.io.snapshot()
    }

    /// [`Fragment::stats`] without the per-shard map (`shards` is left empty): constant cost
    /// however many shards hold documents, for metrics scraped often.
    pub fn totals(&self) -> FragmentStats {
        let st = self.inner.st.borrow();
        FragmentStats {
            docs: st.index.docs(),
            live_bytes: st.index.live_bytes(),
            dead_bytes: st.log_bytes.saturating_sub(st.index.live_bytes()),
            segments: st.segments.len() as u64,
            torn_tails: st.torn_tails,
            lsn_durable: st.lsn_durable,
            compactions: st.compactions,
            shards: std::collections::BTreeMap::new(),
        }
    }
}
