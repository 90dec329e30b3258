//! The catalog: collections that have a sharding configuration, durable in `catalog.json`.
//!
//! A collection without a configuration needs no entry (it exists once written to). Changes
//! are rare (CREATE TABLE … WITH, ALTER TABLE … SET) and are serialised through one executor
//! (executor 0), which writes the file atomically before any session sees the change, then
//! hands every executor the new snapshot. Readers hold an `Arc<Catalog>` snapshot: a statement
//! plans against one version from start to end.
//!
//! **Invariant:** `version` grows by one on every durable change; an executor never installs a
//! snapshot older than the one it has.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::datadir::{DataDirError, write_atomically};

/// Version of `catalog.json`'s shape.
pub const CATALOG_FORMAT: u32 = 1;

const CATALOG_FILE: &str = "catalog.json";

/// One collection's durable settings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollectionEntry {
    /// The content-based sharding configuration, as the user gave it (RavenDB-shaped JSON).
    pub sharding: serde_json::Value,
}

/// Every configured collection, at one version.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// `CATALOG_FORMAT` when written.
    pub format: u32,
    /// Bumped on every durable change.
    pub version: u64,
    /// By collection name (case as stored: SQL identifiers are folded before they get here).
    pub collections: BTreeMap<String, CollectionEntry>,
}

impl Catalog {
    /// Reads the catalog in `dir`; a directory without one has an empty catalog.
    pub fn load(dir: &Path) -> Result<Catalog, DataDirError> {
        let path = dir.join(CATALOG_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let catalog: Catalog = serde_json::from_slice(&bytes).map_err(|e| {
                    DataDirError::BadLayout { path: path.clone(), reason: e.to_string() }
                })?;
                if catalog.format != CATALOG_FORMAT {
                    return Err(DataDirError::BadLayout {
                        path,
                        reason: format!(
                            "format {} is not one this build reads ({CATALOG_FORMAT})",
                            catalog.format
                        ),
                    });
                }
                Ok(catalog)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Catalog { format: CATALOG_FORMAT, ..Catalog::default() })
            }
            Err(source) => Err(DataDirError::Io { what: "cannot read", path, source }),
        }
    }

    /// A copy with `collection` set to `entry` (removed for `None`) and the version bumped,
    /// written durably to `dir` before it is returned. Blocking file I/O: run it off the
    /// executor.
    pub fn with_entry(
        &self,
        dir: &Path,
        collection: &str,
        entry: Option<CollectionEntry>,
    ) -> Result<Catalog, DataDirError> {
        let mut next = self.clone();
        next.format = CATALOG_FORMAT;
        next.version += 1;
        match entry {
            Some(entry) => next.collections.insert(collection.to_owned(), entry),
            None => next.collections.remove(collection),
        };
        let mut bytes = serde_json::to_vec_pretty(&next).unwrap_or_default();
        bytes.push(b'\n');
        write_atomically(dir, CATALOG_FILE, &bytes)?;
        Ok(next)
    }

    /// The entry of `collection`, if it has a configuration.
    pub fn get(&self, collection: &str) -> Option<&CollectionEntry> {
        self.collections.get(collection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks that a change is durable (a fresh load sees it) and bumps the version, and that
    // a missing file is an empty catalog.
    #[test]
    fn changes_are_durable_and_versioned() {
        let dir = std::env::temp_dir().join(format!("tessera-catalog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let empty = Catalog::load(&dir).expect("empty");
        assert_eq!(empty.version, 0);
        assert!(empty.collections.is_empty());
        let entry = CollectionEntry { sharding: serde_json::json!({"Fields": ["Customer"]}) };
        let next = empty.with_entry(&dir, "orders", Some(entry.clone())).expect("write");
        assert_eq!(next.version, 1);
        let loaded = Catalog::load(&dir).expect("load");
        assert_eq!(loaded, next);
        assert_eq!(loaded.get("orders"), Some(&entry));
        let removed = loaded.with_entry(&dir, "orders", None).expect("remove");
        assert_eq!(removed.version, 2);
        assert_eq!(Catalog::load(&dir).expect("load").get("orders"), None, "removal is durable");
        std::fs::write(dir.join(CATALOG_FILE), b"{").expect("damage");
        assert!(Catalog::load(&dir).is_err(), "a damaged catalog is refused, not emptied");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
