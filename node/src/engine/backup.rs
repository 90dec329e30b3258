//! Online backup: take a consistent cut of every fragment, copy it, write a manifest with
//! checksums; and the check `restore` runs on a backup before it copies anything.
//!
//! A backup directory looks like a data directory (`layout.json`, `catalog.json`,
//! `fragments/$n/*.seg`, every directory of [`DURABLE_DIRS`] that exists) plus `manifest.json`:
//! per file its size, a CRC-32 (IEEE, `crc32fast`) of the whole file and one per
//! [`CHECKSUM_BLOCK_BYTES`] block, so a damaged file is named with the offset of its first bad
//! block.
//!
//! The cut ([`take_cut`]) runs under the two-phase-commit gate: the coordinator journal is
//! opened, then one mesh call per executor takes every fragment's cut
//! (`storage::Fragment::backup_cut`: the durable log as open descriptors, writers blocked for
//! no time), then the catalog and layout are opened (at least as new as the data). The
//! copy runs on a blocking thread from the open descriptors, so compaction and writers go on.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::core::Core;
use super::error::EngineError;
use crate::runtime::{ExecutorIndex, Mesh};

/// Format of `manifest.json`.
pub const BACKUP_FORMAT: u32 = 1;
/// The manifest's file name in a backup directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The checksum algorithm named in the manifest.
pub const CHECKSUM: &str = "crc32";
/// Bytes covered by each block checksum.
pub const CHECKSUM_BLOCK_BYTES: u64 = 1 << 20;
/// Files of the data directory's root copied into a backup.
pub const META_FILES: &[&str] = &["layout.json", "catalog.json"];
/// Durable log directories besides the fragments, copied when they exist (the transaction
/// coordinator's log). Add a directory here and backup and restore carry it; a preallocated
/// log's file is copied only to the end of its records, which [`take_cut`] asks its owner for
/// (the coordinator's journal is preallocated).
pub const DURABLE_DIRS: &[&str] = &["coordinator"];
/// Directory of the fragments inside a data directory.
pub const FRAGMENTS_DIR: &str = "fragments";
/// The statement that takes a backup: `SET tessera.backup = '/absolute/dir'`.
pub const BACKUP_SETTING: &str = "tessera.backup";
/// A progress line is logged after each this many bytes copied.
pub const PROGRESS_BYTES: u64 = 256 << 20;

/// One file of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// Path relative to the backup directory, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// CRC-32 of each `block_bytes` block, in order.
    pub blocks: Vec<u32>,
}

/// One fragment of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ManifestFragment {
    /// Fragment number.
    pub id: u32,
    /// The last durable LSN in the backup.
    pub lsn_durable: u64,
    /// Bytes of its segment files.
    pub bytes: u64,
}

/// `manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`BACKUP_FORMAT`].
    pub format: u32,
    /// The version of tessera that wrote it.
    pub tessera_version: String,
    /// [`CHECKSUM`].
    pub checksum: String,
    /// [`CHECKSUM_BLOCK_BYTES`] when written.
    pub block_bytes: u64,
    /// Fragments.
    pub fragments: Vec<ManifestFragment>,
    /// Every file but the manifest.
    pub files: Vec<ManifestFile>,
}

/// What a backup copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupSummary {
    /// Files written (the manifest excluded).
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// A file to copy: relative path, open descriptor, bytes.
#[derive(Debug)]
struct CutEntry {
    path: String,
    file: File,
    len: u64,
}

/// A consistent cut of the node: what a backup copies.
#[derive(Debug)]
pub struct Cut {
    fragments: Vec<storage::BackupCut>,
    others: Vec<CutEntry>,
}

impl Cut {
    /// Bytes the cut covers.
    pub fn bytes(&self) -> u64 {
        self.fragments.iter().map(storage::BackupCut::bytes).sum::<u64>()
            + self.others.iter().map(|e| e.len).sum::<u64>()
    }
}

/// Takes the cut under the two-phase-commit gate: no commit decision is recorded and the
/// coordinator journal is not rewritten meanwhile. The durable directories (the coordinator
/// journal, to the end of its records now) are opened first, then every fragment of every
/// executor (one mesh call each), then the catalog and the layout (so the catalog is at least
/// as new as the data). So a cross-fragment transaction is whole in the backup or absent: one
/// decided before the cut has its PREPAREs in every participant's cut and its decision (or
/// every participant's COMMIT) in the copy; one not yet decided has no decision in the copy,
/// even when it is decided before the copy is made, and is aborted when the restored node
/// recovers. Writers are not blocked; decisions wait for the cut (well under a millisecond
/// per fragment), not for the copy.
pub async fn take_cut(core: &Rc<Core>, mesh: &Mesh<Core>) -> Result<Cut, EngineError> {
    let shared = Arc::clone(core.shared());
    let _pause = shared.two_phase_gate().pause().await;
    // The journal is preallocated: its file is longer than its records, and a decision
    // recorded after the gate reopens lands inside that length. The copy (made later, from
    // the open descriptor) must stop where the records stop now, or it would carry the
    // decision of a transaction whose PREPAREs only some fragments' cuts hold.
    let journal_tail = mesh
        .run_on(core.index(), core, ExecutorIndex::new(0), |c| async move {
            c.coordinator().and_then(|c| c.journal_tail())
        })
        .await?;
    // A closed journal (the node is shutting down) has no end to give: no backup then, rather
    // than a copy to the file's length.
    let Some(journal_tail) = journal_tail else {
        return Err(EngineError::Backup(
            "the coordinator journal is closed (the node is shutting down)".to_owned(),
        ));
    };
    let ends = vec![journal_tail];
    let open = |which, ends: Vec<(PathBuf, u64)>| {
        let root = shared.data_dir.clone();
        glommio::executor().spawn_blocking(move || open_others(&root, which, &ends))
    };
    let mut others = open(Others::DurableDirs, ends).await.map_err(EngineError::Backup)?;
    let mut fragments = Vec::new();
    for i in 0..mesh.len() {
        let cuts = mesh
            .run_on(core.index(), core, ExecutorIndex::new(i), |c| async move {
                c.backup_cuts().await.map_err(|e| e.to_string())
            })
            .await?;
        fragments.extend(cuts.map_err(EngineError::Backup)?);
    }
    fragments.sort_by_key(|c| c.fragment);
    others.extend(open(Others::Meta, Vec::new()).await.map_err(EngineError::Backup)?);
    Ok(Cut { fragments, others })
}

/// Which of the files beside the fragments [`open_others`] opens.
#[derive(Clone, Copy)]
enum Others {
    /// [`META_FILES`]: the catalog and the layout.
    Meta,
    /// Every file under [`DURABLE_DIRS`].
    DurableDirs,
}

/// Opens the files of `which` under `root`, each to be copied to its length now, or, for a
/// path of `ends`, only to the offset given there (a preallocated log's end of records).
fn open_others(
    root: &Path,
    which: Others,
    ends: &[(PathBuf, u64)],
) -> Result<Vec<CutEntry>, String> {
    let open = |path: &Path, rel: String| -> Result<Option<CutEntry>, String> {
        match File::open(path) {
            Ok(file) => {
                let size = file
                    .metadata()
                    .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
                    .len();
                let len =
                    ends.iter().find(|(p, _)| p == path).map_or(size, |&(_, end)| end.min(size));
                Ok(Some(CutEntry { path: rel, file, len }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot open {}: {e}", path.display())),
        }
    };
    let mut out: Vec<CutEntry> = Vec::new();
    if let Others::Meta = which {
        for name in META_FILES {
            out.extend(open(&root.join(name), (*name).to_owned())?);
        }
        return Ok(out);
    }
    for dir in DURABLE_DIRS {
        let mut stack = vec![(root.join(dir), (*dir).to_owned())];
        while let Some((path, rel)) = stack.pop() {
            let entries = match std::fs::read_dir(&path) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("cannot list {}: {e}", path.display())),
            };
            for entry in entries {
                let entry = entry.map_err(|e| format!("cannot list {}: {e}", path.display()))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let child = entry.path();
                let child_rel = format!("{rel}/{name}");
                if child.is_dir() {
                    stack.push((child, child_rel));
                } else if !name.ends_with(".tmp") && name != "LOCK" {
                    out.extend(open(&child, child_rel)?);
                }
            }
        }
    }
    // Every file given an end must be in the cut: one missing would have changed under it
    // (a rewrite runs only outside the gate), and copying it some other way would be wrong.
    for (path, _) in ends {
        if !out.iter().any(|e| root.join(&e.path) == *path) {
            return Err(format!("{} is not among the files of the cut", path.display()));
        }
    }
    Ok(out)
}

/// Checks a backup destination: absolute, and missing or empty.
pub fn check_target(to: &Path) -> Result<(), EngineError> {
    if !to.is_absolute() {
        return Err(EngineError::BackupTarget(format!(
            "{} is not an absolute path (it is resolved on the node)",
            to.display()
        )));
    }
    match std::fs::read_dir(to) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(EngineError::BackupTarget(format!("{} is not empty", to.display())));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(EngineError::BackupTarget(format!("cannot read {}: {e}", to.display()))),
    }
}

/// Takes a backup into `to` (absolute, missing or empty): cut, copy, manifest. Progress and
/// the result are logged.
pub async fn run(
    core: &Rc<Core>,
    mesh: &Mesh<Core>,
    to: PathBuf,
) -> Result<BackupSummary, EngineError> {
    check_target(&to)?;
    let started = Instant::now();
    let cut = take_cut(core, mesh).await?;
    tracing::info!(
        to = %to.display(),
        fragments = cut.fragments.len(),
        bytes = cut.bytes(),
        cut_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "backup started"
    );
    let target = to.clone();
    let summary = glommio::executor()
        .spawn_blocking(move || copy_cut(cut, &target))
        .await
        .map_err(EngineError::Backup)?;
    tracing::info!(
        to = %to.display(),
        files = summary.files,
        bytes = summary.bytes,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "backup finished"
    );
    Ok(summary)
}

/// Copies a cut into `to` and writes the manifest last (its presence means complete).
/// Blocking.
pub fn copy_cut(cut: Cut, to: &Path) -> Result<BackupSummary, String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut files = Vec::new();
    let mut fragments = Vec::new();
    let mut copied = 0u64;
    let mut next_progress = PROGRESS_BYTES;
    let mut copy = |rel: String, file: &File, len: u64| -> Result<ManifestFile, String> {
        let entry = copy_file(file, len, to, &rel)?;
        copied += len;
        if copied >= next_progress {
            tracing::info!(bytes = copied, file = %rel, "backup progress");
            next_progress = copied + PROGRESS_BYTES;
        }
        Ok(entry)
    };
    for f in &cut.fragments {
        let dir = format!("{FRAGMENTS_DIR}/${}", f.fragment.get());
        for seg in &f.files {
            files.push(copy(format!("{dir}/{}", seg.name), &seg.file, seg.len)?);
        }
        fragments.push(ManifestFragment {
            id: f.fragment.get(),
            lsn_durable: f.lsn_durable,
            bytes: f.bytes(),
        });
    }
    for e in &cut.others {
        files.push(copy(e.path.clone(), &e.file, e.len)?);
    }
    let summary =
        BackupSummary { files: files.len() as u64, bytes: files.iter().map(|f| f.bytes).sum() };
    let manifest = Manifest {
        format: BACKUP_FORMAT,
        tessera_version: env!("CARGO_PKG_VERSION").to_owned(),
        checksum: CHECKSUM.to_owned(),
        block_bytes: CHECKSUM_BLOCK_BYTES,
        fragments,
        files,
    };
    let mut bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    crate::datadir::write_atomically(to, MANIFEST_FILE, &bytes).map_err(|e| e.to_string())?;
    Ok(summary)
}

/// Turns read-ahead off for reads through `from`: an active segment or the coordinator journal
/// is zero-filled past the cut, and read-ahead would cache those blocks, so the node's next
/// direct writes there could not be issued inline (`storage::segment`'s module comment). The
/// copy reads whole blocks of up to `CHECKSUM_BLOCK_BYTES` anyway. A failure only costs speed.
fn read_without_read_ahead(from: &File) {
    if let Err(e) = storage::pagecache::advise(from, 0, 0, storage::pagecache::Advice::Random) {
        tracing::debug!(error = %e, "POSIX_FADV_RANDOM failed");
    }
}

/// Copies `len` bytes of `from` to `root/rel`, synced, with its checksums.
fn copy_file(from: &File, len: u64, root: &Path, rel: &str) -> Result<ManifestFile, String> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let mut out =
        File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    read_without_read_ahead(from);
    let mut buf = vec![0u8; usize::try_from(CHECKSUM_BLOCK_BYTES).unwrap_or(1 << 20)];
    let mut whole = crc32fast::Hasher::new();
    let mut blocks = Vec::new();
    let mut at = 0u64;
    while at < len {
        let n = usize::try_from((len - at).min(CHECKSUM_BLOCK_BYTES)).unwrap_or(0);
        let chunk = buf.get_mut(..n).ok_or("block buffer too small")?;
        from.read_exact_at(chunk, at).map_err(|e| format!("cannot read {rel} at {at}: {e}"))?;
        whole.update(chunk);
        blocks.push(crc32fast::hash(chunk));
        out.write_all(chunk).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        at += n as u64;
    }
    out.sync_data().map_err(|e| format!("cannot sync {}: {e}", path.display()))?;
    if let Some(parent) = path.parent() {
        File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("cannot sync {}: {e}", parent.display()))?;
    }
    Ok(ManifestFile { path: rel.to_owned(), bytes: len, crc32: whole.finalize(), blocks })
}

/// Why a backup cannot be restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupDamage {
    /// The manifest is missing or unreadable.
    #[error("manifest {path}: {reason}")]
    Manifest {
        /// The manifest's path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file the manifest names is missing or unreadable.
    #[error("{path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file has another size than the manifest says.
    #[error("{path}: {found} bytes, the manifest says {expected}")]
    Size {
        /// The file.
        path: PathBuf,
        /// From the manifest.
        expected: u64,
        /// On disk.
        found: u64,
    },
    /// A block's checksum does not match.
    #[error("{path}: checksum mismatch in the block at offset {offset}")]
    Checksum {
        /// The file.
        path: PathBuf,
        /// Offset of the first bad block.
        offset: u64,
    },
    /// A path in the manifest leaves the backup directory.
    #[error("manifest names an unsafe path {0:?}")]
    UnsafePath(String),
}

/// Whether a manifest path stays inside the directory (relative, no `..`).
fn safe(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

/// Reads a backup's manifest and checks every file it names: size and every block checksum.
/// Returns the manifest when the backup is intact.
pub fn verify_backup(dir: &Path) -> Result<Manifest, BackupDamage> {
    let manifest = read_manifest(dir)?;
    check_files(dir, &manifest)?;
    Ok(manifest)
}

/// Reads and checks `manifest.json` of a backup directory (not the files it names).
pub fn read_manifest(dir: &Path) -> Result<Manifest, BackupDamage> {
    let manifest_path = dir.join(MANIFEST_FILE);
    let bad = |reason: String| BackupDamage::Manifest { path: manifest_path.clone(), reason };
    let text = std::fs::read(&manifest_path).map_err(|e| bad(e.to_string()))?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
    if manifest.format != BACKUP_FORMAT || manifest.checksum != CHECKSUM {
        return Err(bad(format!(
            "format {} / checksum {} is not one this build reads",
            manifest.format, manifest.checksum
        )));
    }
    if manifest.block_bytes == 0 || manifest.block_bytes > (64 << 20) {
        return Err(bad(format!("block size {} is out of range", manifest.block_bytes)));
    }
    Ok(manifest)
}

/// Checks every file `manifest` names under `dir`: size, each block's checksum, the whole
/// file's checksum. Names the file and the offset of the first bad block.
pub fn check_files(dir: &Path, manifest: &Manifest) -> Result<(), BackupDamage> {
    let mut buf = vec![0u8; usize::try_from(manifest.block_bytes).unwrap_or(1 << 20)];
    for f in &manifest.files {
        if !safe(&f.path) {
            return Err(BackupDamage::UnsafePath(f.path.clone()));
        }
        let path = dir.join(&f.path);
        let unreadable = |e: std::io::Error| BackupDamage::Unreadable {
            path: path.clone(),
            reason: e.to_string(),
        };
        let file = File::open(&path).map_err(unreadable)?;
        let found = file.metadata().map_err(unreadable)?.len();
        if found != f.bytes {
            return Err(BackupDamage::Size { path, expected: f.bytes, found });
        }
        let mut at = 0u64;
        let mut i = 0usize;
        let mut whole = crc32fast::Hasher::new();
        while at < f.bytes {
            let n = usize::try_from((f.bytes - at).min(manifest.block_bytes)).unwrap_or(0);
            let chunk = buf.get_mut(..n).unwrap_or_default();
            file.read_exact_at(chunk, at).map_err(unreadable)?;
            whole.update(chunk);
            if f.blocks.get(i) != Some(&crc32fast::hash(chunk)) {
                return Err(BackupDamage::Checksum { path, offset: at });
            }
            at += n as u64;
            i += 1;
        }
        if i != f.blocks.len() || whole.finalize() != f.crc32 {
            return Err(BackupDamage::Checksum { path, offset: 0 });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A backup copies an active segment or the journal only up to its cut; the blocks past it
    // are zeroed ahead of the node's next writes and must not end up in the page cache (with
    // read-ahead, reading the first 64 KiB of an uncached file cached the next ones too).
    #[test]
    fn unit_copy_leaves_the_blocks_past_the_cut_uncached() {
        use std::os::unix::fs::FileExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        let path = dir.join("segment");
        let len = 16usize << 20;
        let file = File::create(&path).expect("create");
        file.write_all_at(&vec![7u8; len], 0).expect("write");
        file.sync_all().expect("sync");
        drop(file);
        let from = File::open(&path).expect("open");
        use storage::pagecache::{Advice, advise, cached_pages};
        advise(&from, 0, 0, Advice::DontNeed).expect("drop the cached pages");
        assert_eq!(cached_pages(&from, 0).expect("mincore"), 0, "the premise: nothing cached");
        let cut = 64 << 10;
        copy_file(&from, cut as u64, &dir.join("copy"), "segment").expect("copy");
        assert_eq!(cached_pages(&from, cut as u64).expect("mincore"), 0, "past the cut");
        assert_eq!(std::fs::read(dir.join("copy").join("segment")).expect("read").len(), cut);
    }

    // Checks that a backup's copy of the coordinator journal holds the decisions recorded
    // before the cut and none recorded after it, although the preallocated file already had
    // room for them when the cut opened it. (A CI run restored a cross-fragment transfer's
    // balance updates without its record: the decision, recorded after the cut, rode in the
    // copy while one participant's PREPARE was past that fragment's cut.)
    #[test]
    fn unit_journal_copy_stops_at_the_cut() {
        use super::super::coordinator::{Coordinator, TwoPhaseGate, read_decisions};
        super::super::on_executor_with_dir("backup-cut", |d| async move {
            let (root, to, whole) = (d.join("data"), d.join("backup"), d.join("whole"));
            let c = Coordinator::open(&root).await.expect("open");
            let gate = TwoPhaseGate::default();
            let frags = [router::FragmentId::new(0), router::FragmentId::new(1)];
            let (before, after) = (storage::TxId::new(1), storage::TxId::new(2));
            c.decide(&gate, before, true, &frags, 2).await.expect("decide");
            let ends: Vec<_> = c.journal_tail().into_iter().collect();
            let cut = open_others(&root, Others::DurableDirs, &ends).expect("cut");
            let uncut = open_others(&root, Others::DurableDirs, &[]).expect("uncut");
            let stray = [(root.join("coordinator").join("journal-gone.jrn"), 0)];
            let err = open_others(&root, Others::DurableDirs, &stray).expect_err("stray end");
            assert!(err.contains("journal-gone.jrn"), "{err}");
            c.decide(&gate, after, true, &frags, 2).await.expect("decide");
            copy_cut(Cut { fragments: Vec::new(), others: cut }, &to).expect("copy");
            copy_cut(Cut { fragments: Vec::new(), others: uncut }, &whole).expect("copy");
            let copied = read_decisions(&to).expect("read the copy");
            assert_eq!(copied.get(&before), Some(&true), "decided before the cut: copied");
            assert_eq!(copied.get(&after), None, "decided after the cut: not copied");
            // The premise: the file's length at the cut already covered the later decision.
            let whole = read_decisions(&whole).expect("read the whole copy");
            assert_eq!(whole.get(&after), Some(&true), "the preallocated file holds it");
            c.close().await;
        });
    }

    // Checks that manifest paths cannot leave the backup directory.
    #[test]
    fn refuses_unsafe_paths() {
        assert!(safe("fragments/$0/0000000000000000-0000.seg"));
        assert!(safe("catalog.json"));
        for bad in ["", "/etc/passwd", "../x", "a/../../b", "a//b", "./a"] {
            assert!(!safe(bad), "{bad:?}");
        }
    }
}
