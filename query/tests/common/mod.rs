//! An in-memory fragment for tests: documents in a `BTreeMap` keyed by lower-cased id,
//! placed on shards by a deterministic test hash (not SHARDING.md's: placement is router's
//! contract, these tests only need a stable spread over fragments).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use query::plan::{Select, Statement};
use query::{
    CollectionName, DocVersion, FragmentSource, Partial, ResultSet, SourceDoc, execute_select,
    merge,
};
use router::{SHARD_COUNT, ShardId, ShardRange};

/// One stored document.
pub struct Stored {
    pub id: String,
    pub shard: ShardId,
    pub version: DocVersion,
    pub doc: serde_json::Value,
}

/// One fake fragment: every collection's documents on its shards.
#[derive(Default)]
pub struct MemFragment {
    pub docs: BTreeMap<(String, String), Stored>,
}

/// FNV-1a of the lower-cased id, modulo the shard count.
pub fn test_shard(id: &str) -> ShardId {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.to_lowercase().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ShardId::from_u64_mod(h)
}

impl MemFragment {
    pub fn put(&mut self, collection: &str, id: &str, doc: serde_json::Value) {
        let key = (collection.to_owned(), id.to_lowercase());
        let version = DocVersion::new(self.docs.get(&key).map_or(1, |d| d.version.get() + 1));
        self.docs.insert(key, Stored { id: id.to_owned(), shard: test_shard(id), version, doc });
    }
}

impl FragmentSource for MemFragment {
    type Doc<'a> = &'a serde_json::Value;

    fn get<'a>(
        &'a self,
        collection: &CollectionName,
        id: &str,
    ) -> Option<SourceDoc<'a, Self::Doc<'a>>> {
        self.docs.get(&(collection.as_str().to_owned(), id.to_lowercase())).map(|s| SourceDoc {
            id: &s.id,
            shard: s.shard,
            version: s.version,
            doc: &s.doc,
        })
    }

    fn scan<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        for ((c, _), s) in &self.docs {
            if c != collection.as_str() || !ranges.iter().any(|r| r.contains(s.shard)) {
                continue;
            }
            if visit(SourceDoc { id: &s.id, shard: s.shard, version: s.version, doc: &s.doc })
                .is_break()
            {
                return;
            }
        }
    }
}

/// `n` equal shard ranges covering every shard.
pub fn split_ranges(n: u32) -> Vec<ShardRange> {
    let n = n.max(1);
    (0..n)
        .map(|i| {
            let start = SHARD_COUNT / n * i;
            let end = if i + 1 == n { SHARD_COUNT } else { SHARD_COUNT / n * (i + 1) };
            ShardRange::new(start, end).expect("valid range")
        })
        .collect()
}

/// Documents spread over fragments by shard range.
pub struct Cluster {
    pub ranges: Vec<ShardRange>,
    pub fragments: Vec<MemFragment>,
}

impl Cluster {
    pub fn new(fragments: u32) -> Cluster {
        let ranges = split_ranges(fragments);
        let fragments = ranges.iter().map(|_| MemFragment::default()).collect();
        Cluster { ranges, fragments }
    }

    pub fn put(&mut self, collection: &str, id: &str, doc: serde_json::Value) {
        let shard = test_shard(id);
        let i = self.ranges.iter().position(|r| r.contains(shard)).expect("covered");
        self.fragments[i].put(collection, id, doc);
    }

    /// Runs a SELECT on every fragment (in reverse order, to show order does not matter) and
    /// merges.
    pub fn select(&self, select: &Select) -> ResultSet {
        let partials: Vec<Partial> = self
            .fragments
            .iter()
            .zip(&self.ranges)
            .rev()
            .map(|(f, r)| execute_select(select, f, std::slice::from_ref(r)).expect("executes"))
            .collect();
        merge(select, partials).expect("merges")
    }

    /// Parses, binds (no parameters) and runs one SELECT.
    pub fn query(&self, sql: &str) -> ResultSet {
        match one(sql) {
            Statement::Select(s) => self.select(&s),
            other => panic!("not a select: {other:?}"),
        }
    }
}

/// The single statement of `sql`.
pub fn one(sql: &str) -> Statement {
    let mut v = query::parse(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(v.len(), 1, "{sql}");
    v.remove(0)
}
