//! `tessera verify --data-dir D`: checks a stopped node's data directory (or a backup) without
//! changing a byte: the layout, the catalog, every segment of every fragment (headers, chunk
//! and frame CRCs, rkyv validation, LSN order, the torn-tail rule, the rebuilt index against
//! its records; `storage::verify_dir`), and, in a backup, the manifest's checksums. One line
//! per fragment. Exit status 0 when everything is sound, 1 on any problem, 2 when the
//! directory cannot be checked.
//!
//! A directory a running node holds is refused (its `LOCK` is taken shared, which fails while
//! the node holds it exclusively): a live log changes under the reader, so verify a backup of
//! a running node instead (`tessera backup`, then `tessera verify --data-dir BACKUP`). A torn
//! tail is reported but is not a problem: it is the interrupted, unacknowledged last write
//! that the next start truncates.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use router::FragmentId;

use crate::datadir::Layout;
use crate::engine::backup::{self, FRAGMENTS_DIR, MANIFEST_FILE};

/// Arguments of `tessera verify`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The data directory (of a stopped node) or a backup directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
}

/// A data directory opened for reading: locked shared, layout read.
#[derive(Debug)]
pub struct OfflineDir {
    root: PathBuf,
    layout: Layout,
    _lock: Option<std::fs::File>,
}

impl OfflineDir {
    /// Opens `root` read-only; refuses a directory a running node holds.
    pub fn open(root: &Path) -> Result<OfflineDir, String> {
        let lock_path = root.join("LOCK");
        let lock = match std::fs::File::open(&lock_path) {
            Ok(file) => match file.try_lock_shared() {
                Ok(()) => Some(file),
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "{} is held by a running node; stop it, or back it up (tessera backup) \
                         and check the backup",
                        root.display()
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(format!("cannot lock {}: {e}", lock_path.display()));
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot open {}: {e}", lock_path.display())),
        };
        let layout_path = root.join("layout.json");
        let text = std::fs::read(&layout_path)
            .map_err(|e| format!("cannot read {}: {e}", layout_path.display()))?;
        let layout: Layout = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is invalid: {e}", layout_path.display()))?;
        if layout.format != crate::datadir::LAYOUT_FORMAT {
            return Err(format!("{} has unknown format {}", layout_path.display(), layout.format));
        }
        Ok(OfflineDir { root: root.to_owned(), layout, _lock: lock })
    }

    /// The fragments' layout, in shard order.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The directory of fragment `id`.
    pub fn fragment_dir(&self, id: u32) -> PathBuf {
        self.root.join(FRAGMENTS_DIR).join(format!("${id}"))
    }
}

/// Runs the subcommand, printing to stdout.
pub fn main(args: &Args) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run(&args.data_dir, &mut out) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            let _ = out.flush();
            eprintln!("tessera verify: {e}");
            ExitCode::from(2)
        }
    }
}

/// Checks `root`, one line per finding to `out`; `Ok(true)` when everything is sound.
pub fn run(root: &Path, out: &mut impl Write) -> Result<bool, String> {
    let dir = OfflineDir::open(root)?;
    let w = |e: std::io::Error| e.to_string();
    let mut sound = true;
    if root.join(MANIFEST_FILE).exists() {
        match backup::verify_backup(root) {
            Ok(m) => writeln!(out, "backup manifest: ok, {} files", m.files.len()).map_err(w)?,
            Err(e) => {
                sound = false;
                writeln!(out, "backup manifest: PROBLEM: {e}").map_err(w)?;
            }
        }
    }
    match crate::catalog::Catalog::load(root) {
        Ok(c) => writeln!(out, "catalog: ok, {} collections", c.collections.len()).map_err(w)?,
        Err(e) => {
            sound = false;
            writeln!(out, "catalog: PROBLEM: {e}").map_err(w)?;
        }
    }
    for f in &dir.layout().fragments {
        let path = dir.fragment_dir(f.id);
        match storage::verify_dir(&path, FragmentId::new(f.id)) {
            Ok(r) => {
                write!(
                    out,
                    "fragment ${}: ok, {} segments, {} bytes, {} records, {} documents, last lsn {}",
                    f.id, r.segments, r.bytes, r.records, r.docs, r.last_lsn
                )
                .map_err(w)?;
                if r.in_doubt > 0 {
                    write!(out, ", {} in-doubt transactions", r.in_doubt).map_err(w)?;
                }
                if r.unfinished_batches > 0 {
                    write!(
                        out,
                        ", {} unacknowledged batches cut off before their commit record (dropped)",
                        r.unfinished_batches
                    )
                    .map_err(w)?;
                }
                if let Some(t) = &r.torn_tail {
                    write!(
                        out,
                        ", torn tail in {} at offset {} (the next start truncates it)",
                        t.segment.display(),
                        t.offset
                    )
                    .map_err(w)?;
                }
                writeln!(out).map_err(w)?;
            }
            Err(e) => {
                sound = false;
                writeln!(out, "fragment ${}: PROBLEM: {e}", f.id).map_err(w)?;
            }
        }
    }
    writeln!(out, "{}", if sound { "verify: ok" } else { "verify: PROBLEMS FOUND" }).map_err(w)?;
    out.flush().map_err(w)?;
    Ok(sound)
}
