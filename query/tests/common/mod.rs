//! An in-memory fragment for tests: documents in a `BTreeMap` keyed by lower-cased id,
//! placed on shards by `router::shard_of` (SHARDING.md), split into fragments by
//! `router::ShardMap::even`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use query::plan::{Select, Statement};
use query::{
    CollectionName, DocVersion, FragmentSource, PagedSource, Partial, ResultSet, ScanPos,
    SourceDoc, execute_select, merge,
};
use router::prune::RoutePlan;
use router::{Owner, SHARD_COUNT, ShardId, ShardMap, ShardRange};

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

/// The shard of an id per SHARDING.md (ids in tests are valid and never end with `$`).
pub fn test_shard(id: &str) -> ShardId {
    router::shard_of(id).ok().and_then(|p| p.shard()).expect("a hashed or explicit id")
}

impl MemFragment {
    pub fn put(&mut self, collection: &str, id: &str, doc: serde_json::Value) {
        self.put_on(collection, id, test_shard(id), doc);
    }

    pub fn put_on(&mut self, collection: &str, id: &str, shard: ShardId, doc: serde_json::Value) {
        let key = (collection.to_owned(), id.to_lowercase());
        let version = DocVersion::new(self.docs.get(&key).map_or(1, |d| d.version.get() + 1));
        self.docs.insert(key, Stored { id: id.to_owned(), shard, version, doc });
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

impl PagedSource for MemFragment {
    // Written apart from storage's index: every document in the ranges, sorted by (shard,
    // lower-cased id), those after `after` visited.
    fn scan_after<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        after: Option<&ScanPos>,
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    ) {
        let mut docs: Vec<(&str, &Stored)> = self
            .docs
            .iter()
            .filter(|((c, _), s)| {
                c == collection.as_str() && ranges.iter().any(|r| r.contains(s.shard))
            })
            .map(|((_, key), s)| (key.as_str(), s))
            .collect();
        docs.sort_by_key(|(key, s)| (s.shard, *key));
        for (key, s) in docs {
            if after.is_some_and(|p| (s.shard, key) <= (p.shard, p.key.as_str())) {
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
    pub map: ShardMap,
    pub ranges: Vec<ShardRange>,
    pub fragments: Vec<MemFragment>,
}

impl Cluster {
    pub fn new(fragments: u32) -> Cluster {
        let map = ShardMap::even(fragments, &[Owner::new(0, 0)]).expect("map");
        let ranges: Vec<ShardRange> = map.fragments().iter().map(|f| f.range()).collect();
        let fragments = ranges.iter().map(|_| MemFragment::default()).collect();
        Cluster { map, ranges, fragments }
    }

    /// The shard ranges of `plan` inside fragment `i`.
    pub fn ranges_in(&self, i: usize, plan: &RoutePlan) -> Vec<ShardRange> {
        let f = self.ranges[i];
        plan.shards
            .iter()
            .filter_map(|r| ShardRange::new(r.start().max(f.start()), r.end().min(f.end())))
            .collect()
    }

    /// Runs a SELECT only on the fragments router names, over the routed shard ranges.
    pub fn select_routed(&self, select: &Select) -> (ResultSet, RoutePlan) {
        self.select_routed_with(select, None)
    }

    /// [`Cluster::select_routed`] for a collection with a content configuration.
    pub fn select_routed_with(
        &self,
        select: &Select,
        sharding: Option<&router::ShardingConfig>,
    ) -> (ResultSet, RoutePlan) {
        let plan = query::route_statement(&Statement::Select(select.clone()), sharding, &self.map)
            .expect("routed");
        let partials: Vec<Partial> = plan
            .fragments
            .iter()
            .map(|id| {
                let i = id.get() as usize;
                execute_select(select, &self.fragments[i], &self.ranges_in(i, &plan))
                    .expect("executes")
            })
            .collect();
        (merge(select, partials).expect("merges"), plan)
    }

    pub fn put(&mut self, collection: &str, id: &str, doc: serde_json::Value) {
        let shard = test_shard(id);
        self.put_on(collection, id, shard, doc);
    }

    /// Stores a document on a given shard (content-placed ids).
    pub fn put_on(&mut self, collection: &str, id: &str, shard: ShardId, doc: serde_json::Value) {
        let i = self.ranges.iter().position(|r| r.contains(shard)).expect("covered");
        self.fragments[i].put_on(collection, id, shard, doc);
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

/// The error planning `sql` gives (a panic if it plans).
pub fn err(sql: &str) -> query::PlanError {
    match query::parse(sql) {
        Ok(plan) => panic!("{sql:?} planned: {plan:?}"),
        Err(e) => e,
    }
}

/// The construct an unsupported `sql` is refused by (a panic for any other outcome).
pub fn unsupported(sql: &str) -> String {
    match err(sql) {
        query::PlanError::Unsupported { construct } => construct,
        other => panic!("{sql:?}: expected Unsupported, got {other:?}"),
    }
}

/// The single statement of `sql`.
pub fn one(sql: &str) -> Statement {
    let mut v = query::parse(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(v.len(), 1, "{sql}");
    v.remove(0)
}
