//! The node's data directory: an exclusive lock, and the durable layout file that fixes the
//! fragments' shard ranges when the directory is created.
//!
//! ```text
//! tessera-data/
//!   LOCK                 flock(LOCK_EX) held by the running node
//!   layout.json          {"format":1,"fragments":[{"id":0,"start":0,"end":131072},...]}
//!   fragments/$0/ ...    one directory per fragment, owned by storage
//! ```
//!
//! **Invariant:** the layout is written once, atomically (temporary file, fsync, rename, fsync
//! of the directory), before any fragment exists; later starts read it and never re-derive it
//! from flags, so a changed `--fragments` cannot move a document to another fragment.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of `layout.json`. Bump on any change of its shape, and keep reading old versions.
pub const LAYOUT_FORMAT: u32 = 1;

const LOCK_FILE: &str = "LOCK";
const LAYOUT_FILE: &str = "layout.json";
const FRAGMENTS_DIR: &str = "fragments";

/// One fragment's entry in the layout: its number and its shard range `[start, end)`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FragmentEntry {
    /// Fragment number (`$id`).
    pub id: u32,
    /// First shard.
    pub start: u32,
    /// One past the last shard.
    pub end: u32,
}

/// The durable layout of a node's fragments.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    /// `LAYOUT_FORMAT` when written.
    pub format: u32,
    /// Fragments in shard order.
    pub fragments: Vec<FragmentEntry>,
}

/// Why the data directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What we were doing.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another process holds the lock.
    #[error(
        "data directory {0} is in use by another tessera process; stop it or choose another --data-dir"
    )]
    Locked(PathBuf),
    /// The layout file is damaged or from an unknown version.
    #[error("layout file {path} is unusable: {reason}")]
    BadLayout {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// An opened, locked data directory. The lock is released when this is dropped.
#[derive(Debug)]
pub struct DataDir {
    root: PathBuf,
    // Held for the flock; closing the file releases it.
    _lock: File,
    layout: Layout,
    created: bool,
}

impl DataDir {
    /// Opens (creating if needed) and locks the directory. A new directory gets the layout
    /// `make_layout` returns; an existing one keeps the layout it has.
    pub fn open(
        root: &Path,
        make_layout: impl FnOnce() -> Layout,
    ) -> Result<DataDir, DataDirError> {
        let io = |what, path: &Path| {
            let path = path.to_owned();
            move |source| DataDirError::Io { what, path, source }
        };
        std::fs::create_dir_all(root).map_err(io("cannot create", root))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io("cannot open", &lock_path))?;
        lock_exclusive(&lock).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock => DataDirError::Locked(root.to_owned()),
            _ => DataDirError::Io { what: "cannot lock", path: lock_path.clone(), source: e },
        })?;
        let layout_path = root.join(LAYOUT_FILE);
        let (layout, created) = match std::fs::read(&layout_path) {
            Ok(bytes) => (parse_layout(&layout_path, &bytes)?, false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let layout = make_layout();
                write_atomically(root, LAYOUT_FILE, &layout_bytes(&layout))?;
                (layout, true)
            }
            Err(e) => return Err(io("cannot read", &layout_path)(e)),
        };
        let fragments = root.join(FRAGMENTS_DIR);
        std::fs::create_dir_all(&fragments).map_err(io("cannot create", &fragments))?;
        Ok(DataDir { root: root.to_owned(), _lock: lock, layout, created })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The fragments' layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether this open created the directory's layout.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The directory of fragment `id`.
    pub fn fragment_dir(&self, id: u32) -> PathBuf {
        self.root.join(FRAGMENTS_DIR).join(format!("${id}"))
    }
}

fn layout_bytes(layout: &Layout) -> Vec<u8> {
    // Serializing plain integers and vectors cannot fail.
    let mut bytes = serde_json::to_vec_pretty(layout).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn parse_layout(path: &Path, bytes: &[u8]) -> Result<Layout, DataDirError> {
    let bad = |reason: String| DataDirError::BadLayout { path: path.to_owned(), reason };
    let layout: Layout = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if layout.format != LAYOUT_FORMAT {
        return Err(bad(format!(
            "format {} is not one this build reads ({LAYOUT_FORMAT})",
            layout.format
        )));
    }
    Ok(layout)
}

/// Writes `name` in `dir` so that after a crash it is either absent or whole: temporary file,
/// fdatasync, rename, fsync of the directory.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), DataDirError> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let target = dir.join(name);
    let io = |what, path: &Path| {
        let path = path.to_owned();
        move |source| DataDirError::Io { what, path, source }
    };
    let mut file = File::create(&tmp).map_err(io("cannot create", &tmp))?;
    file.write_all(bytes).map_err(io("cannot write", &tmp))?;
    file.sync_data().map_err(io("cannot sync", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, &target).map_err(io("cannot rename into", &target))?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(io("cannot sync directory", dir))?;
    Ok(())
}

fn lock_exclusive(file: &File) -> std::io::Result<()> {
    // SAFETY: flock only reads the descriptor, which `file` keeps open for the call's duration.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tessera-datadir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn two() -> Layout {
        Layout {
            format: LAYOUT_FORMAT,
            fragments: vec![
                FragmentEntry { id: 0, start: 0, end: 10 },
                FragmentEntry { id: 1, start: 10, end: 20 },
            ],
        }
    }

    // Checks that a new directory gets the given layout and a reopen keeps it, ignoring what
    // a later start would have chosen.
    #[test]
    fn layout_is_fixed_at_creation() {
        let root = scratch("fixed");
        let first = DataDir::open(&root, two).expect("create");
        assert!(first.created());
        drop(first);
        let again = DataDir::open(&root, || panic!("an existing layout is never re-derived"))
            .expect("reopen");
        assert!(!again.created());
        assert_eq!(again.layout(), &two());
        assert!(again.fragment_dir(1).ends_with("fragments/$1"));
        drop(again);
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    // Checks that a second open while the first holds the lock is refused with `Locked`.
    #[test]
    fn second_open_is_refused() {
        let root = scratch("locked");
        let _first = DataDir::open(&root, two).expect("create");
        let err = DataDir::open(&root, two).expect_err("locked");
        assert!(matches!(err, DataDirError::Locked(_)), "{err}");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    // Checks that a damaged or future-format layout is refused with the file named.
    #[test]
    fn bad_layout_is_refused() {
        let root = scratch("bad");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join(LAYOUT_FILE), b"{\"format\":1,\"fragm").expect("write");
        let err = DataDir::open(&root, two).expect_err("truncated");
        assert!(err.to_string().contains("layout.json"), "{err}");
        std::fs::write(root.join(LAYOUT_FILE), b"{\"format\":9,\"fragments\":[]}").expect("write");
        let err = DataDir::open(&root, two).expect_err("future format");
        assert!(err.to_string().contains("format 9"), "{err}");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
