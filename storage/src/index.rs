//! The in-memory index: per collection, the lower-cased document id to its location, version
//! and shard, plus an ordered set by (shard, id) for range scans, and per-shard counters.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use router::{ShardId, ShardRange};

use crate::Version;
use crate::archive::RecordSpan;
use crate::growmap::GrowMap;
use crate::segment::Segment;

/// Where a document's current version lives: a record of a segment, and the op inside it.
#[derive(Debug, Clone)]
pub struct Loc {
    /// The segment (kept mapped while referenced).
    pub seg: Rc<Segment>,
    /// The record.
    pub span: RecordSpan,
    /// The op inside the record.
    pub op: u32,
}

/// One live document.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Where it is.
    pub loc: Loc,
    /// Its version.
    pub version: Version,
    /// Its shard.
    pub shard: ShardId,
    /// Log bytes it accounts for (its share of its record's frame).
    pub bytes: u64,
}

/// Documents and bytes of one shard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Live documents.
    pub docs: u64,
    /// Log bytes of those documents.
    pub bytes: u64,
}

/// Keys up to this many bytes are stored inside the hash table's slot.
const KEY_INLINE_BYTES: usize = 22;

/// An index key (a lower-cased id). Short keys live inline, so a point read compares the key
/// without following a pointer to another cache line; longer ones share one allocation between
/// the two maps. Hash, equality and order are those of the `str`, as `Borrow<str>` requires.
#[derive(Clone, Debug)]
enum Key {
    Inline { len: u8, bytes: [u8; KEY_INLINE_BYTES] },
    Heap(Rc<str>),
}

impl Key {
    fn new(s: &str) -> Key {
        let mut bytes = [0u8; KEY_INLINE_BYTES];
        match (bytes.get_mut(..s.len()), u8::try_from(s.len())) {
            (Some(head), Ok(len)) => {
                head.copy_from_slice(s.as_bytes());
                Key::Inline { len, bytes }
            }
            _ => Key::Heap(Rc::from(s)),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // The bytes were copied from a `str` and never change; the check cannot fail.
            Key::Inline { len, bytes } => bytes
                .get(..usize::from(*len))
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or_default(),
            Key::Heap(s) => s,
        }
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Key {
    /// The key's bytes (no UTF-8 check: equality and order need none).
    fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Key::Heap(s) => s.as_bytes(),
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        // `str`'s order is its bytes' order.
        self.as_bytes().cmp(other.as_bytes())
    }
}

#[derive(Debug, Default)]
struct Collection {
    /// Grows incrementally (`growmap`): no write waits for a rehash of every document.
    by_key: GrowMap<Key, Entry>,
    by_shard: BTreeSet<(ShardId, Key)>,
}

impl Collection {
    /// The ordered set's (shard, key) pairs in `range`, strictly after `after` when given
    /// (`Index::scan_after`, `Index::count`).
    fn keys_in(
        &self,
        range: ShardRange,
        after: Option<(ShardId, Key)>,
    ) -> impl Iterator<Item = &(ShardId, Key)> {
        use std::ops::Bound;
        let start = ShardId::new(range.start());
        let lower = match (after, start) {
            (Some((shard, key)), Some(s)) if shard >= s => Some(Bound::Excluded((shard, key))),
            (_, Some(s)) => Some(Bound::Included((s, Key::new("")))),
            (_, None) => None,
        };
        let upper = match ShardId::new(range.end()) {
            Some(hi) => Bound::Excluded((hi, Key::new(""))),
            None => Bound::Unbounded,
        };
        lower.into_iter().flat_map(move |lo| self.by_shard.range((lo, upper.clone())))
    }
}

/// The index of one fragment.
#[derive(Debug, Default)]
pub struct Index {
    collections: BTreeMap<Box<str>, Collection>,
    /// Per-shard counters. Grows incrementally too: ids spread over up to `SHARD_COUNT`
    /// shards, so this table can hold about as many entries as the id table.
    shards: GrowMap<ShardId, ShardStats>,
    docs: u64,
    live_bytes: u64,
}

impl Index {
    /// The entry of `key` (already lower-cased).
    pub fn get(&self, collection: &str, key: &str) -> Option<&Entry> {
        self.collections.get(collection)?.by_key.get(key)
    }

    /// Inserts or replaces; returns the previous entry. One probe of the hash table; the
    /// ordered set changes only when the document is new or moved to another shard.
    pub fn put(&mut self, collection: &str, key: &str, entry: Entry) -> Option<Entry> {
        let coll = match self.collections.get_mut(collection) {
            Some(c) => c,
            None => self.collections.entry(collection.into()).or_default(),
        };
        let (shard, bytes) = (entry.shard, entry.bytes);
        // A new key is made once and copied here for the ordered set: reading it back from the
        // table slot just written waits for that (cold) cache line.
        let mut made = None;
        let make = || {
            let k = Key::new(key);
            made = Some(k.clone());
            k
        };
        let old = match coll.by_key.upsert(key, make, entry) {
            Some(old) => {
                if old.shard != shard {
                    let k = Key::new(key);
                    coll.by_shard.remove(&(old.shard, k.clone()));
                    coll.by_shard.insert((shard, k));
                }
                Some(old)
            }
            None => {
                if let Some(k) = made {
                    coll.by_shard.insert((shard, k));
                }
                None
            }
        };
        match &old {
            // Overwritten in place (the common case): one counter changes its bytes, and only
            // when they differ (a same-size rewrite does not probe the shard table).
            Some(o) if o.shard == shard => {
                if o.bytes != bytes
                    && let Some(s) = self.shards.get_mut(&shard)
                {
                    s.bytes = s.bytes - o.bytes + bytes;
                }
                self.live_bytes = self.live_bytes - o.bytes + bytes;
                return old;
            }
            Some(o) => self.forget(o.shard, o.bytes),
            None => {}
        }
        self.shards.update_or_insert(
            &shard,
            || shard,
            || ShardStats { docs: 1, bytes },
            |s| {
                s.docs += 1;
                s.bytes += bytes;
            },
        );
        self.docs += 1;
        self.live_bytes += bytes;
        old
    }

    /// Takes one document of `bytes` log bytes out of the counters of `shard`.
    fn forget(&mut self, shard: ShardId, bytes: u64) {
        if let Some(s) = self.shards.get_mut(&shard) {
            s.docs -= 1;
            s.bytes -= bytes;
            if s.docs == 0 {
                self.shards.remove_entry(&shard);
            }
        }
        self.docs -= 1;
        self.live_bytes -= bytes;
    }

    /// Replaces the location of an entry whose version is `version`; false when it changed.
    pub fn relocate(
        &mut self,
        collection: &str,
        key: &str,
        version: Version,
        loc: Loc,
        bytes: u64,
    ) -> bool {
        let Some(entry) = self.collections.get_mut(collection).and_then(|c| c.by_key.get_mut(key))
        else {
            return false;
        };
        if entry.version != version {
            return false;
        }
        if let Some(s) = self.shards.get_mut(&entry.shard) {
            s.bytes = s.bytes - entry.bytes + bytes;
        }
        self.live_bytes = self.live_bytes - entry.bytes + bytes;
        entry.loc = loc;
        entry.bytes = bytes;
        true
    }

    /// Removes; returns the removed entry.
    pub fn remove(&mut self, collection: &str, key: &str) -> Option<Entry> {
        let coll = self.collections.get_mut(collection)?;
        let (k, entry) = coll.by_key.remove_entry(key)?;
        coll.by_shard.remove(&(entry.shard, k));
        if coll.by_key.is_empty() {
            self.collections.remove(collection);
        }
        self.forget(entry.shard, entry.bytes);
        Some(entry)
    }

    /// Entries of `collection` in `range`, in (shard, key) order.
    pub fn scan<'a>(
        &'a self,
        collection: &str,
        range: ShardRange,
    ) -> impl Iterator<Item = (&'a str, &'a Entry)> + 'a {
        self.scan_after(collection, range, None)
    }

    /// Like `scan`, starting strictly after `(shard, key)` when given.
    pub fn scan_after<'a>(
        &'a self,
        collection: &str,
        range: ShardRange,
        after: Option<(ShardId, &str)>,
    ) -> impl Iterator<Item = (&'a str, &'a Entry)> + 'a {
        let after = after.map(|(shard, key)| (shard, Key::new(key)));
        self.collections.get(collection).into_iter().flat_map(move |c| {
            c.keys_in(range, after.clone()).filter_map(move |(_, k)| {
                c.by_key.get_key_value(k.as_str()).map(|(k, e)| (k.as_str(), e))
            })
        })
    }

    /// How many documents of `collection` lie in `range`: `scan(..).count()` without looking
    /// each one up in the id table (a walk of the ordered set alone). A transaction's range
    /// check counts a whole range at its commit, in one go: 200,000 documents took ~70 ms
    /// through `scan` (session 26).
    pub fn count(&self, collection: &str, range: ShardRange) -> usize {
        self.collections.get(collection).map_or(0, |c| c.keys_in(range, None).count())
    }

    /// Every (collection, key, entry).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Entry)> {
        self.collections
            .iter()
            .flat_map(|(c, coll)| coll.by_key.iter().map(move |(k, e)| (&**c, k.as_str(), e)))
    }

    /// Collection names, sorted.
    pub fn collections(&self) -> impl Iterator<Item = &str> {
        self.collections.keys().map(|c| &**c)
    }

    /// Collection names with their document counts, sorted by name (a collection whose last
    /// document is removed leaves the index, so every count is at least one).
    pub fn collection_docs(&self) -> impl Iterator<Item = (&str, u64)> {
        self.collections.iter().map(|(c, coll)| (&**c, coll.by_key.len() as u64))
    }

    /// Per-shard counters of the shards in `range` that have documents, in shard order. Walks
    /// every shard with documents (a hash table: a write updates one counter without a tree
    /// descent over up to `SHARD_COUNT` shards).
    pub fn shards_in(&self, range: ShardRange) -> BTreeMap<ShardId, ShardStats> {
        self.shards.iter().filter(|(s, _)| range.contains(**s)).map(|(s, v)| (*s, *v)).collect()
    }

    /// Live documents.
    pub fn docs(&self) -> u64 {
        self.docs
    }

    /// Log bytes of live documents.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::rc::Rc;

    use proptest::prelude::*;
    use router::{ShardId, ShardRange};

    use super::{Entry, Index, Loc, ShardStats};
    use crate::Version;
    use crate::archive::written;
    use crate::format::{SegmentHeader, SegmentKind};
    use crate::segment::Segment;

    fn segment() -> Rc<Segment> {
        let map = memmap2::MmapMut::map_anon(4096).and_then(|m| m.make_read_only()).expect("map");
        let header = SegmentHeader {
            fragment: 1,
            kind: SegmentKind::Normal,
            seq: 1,
            generation: 0,
            salt: 0,
            lsn_through: 0,
        };
        Rc::new(Segment::from_map(map, PathBuf::from("index-test"), header))
    }

    fn shard(s: u32) -> ShardId {
        ShardId::new(s).expect("shard")
    }

    /// Short keys live inline, the last one on the heap (over `KEY_INLINE_BYTES`).
    fn key(k: u8) -> String {
        if k == 7 { "k7-a-key-longer-than-twenty-two-bytes".to_owned() } else { format!("k{k}") }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put { coll: u8, key: u8, shard: u32, bytes: u64 },
        Remove { coll: u8, key: u8 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..2, 0u8..8, 0u32..5, 1u64..4)
                .prop_map(|(coll, key, shard, bytes)| Op::Put { coll, key, shard, bytes }),
            1 => (0u8..2, 0u8..8).prop_map(|(coll, key)| Op::Remove { coll, key }),
        ]
    }

    proptest! {
        // Against a map of (collection, key) to (shard, bytes): overwrites of the same and of
        // another size, moves to another shard, removals; then the counters, the per-shard
        // and per-collection counters and every scan form agree with the model.
        #[test]
        fn model_counters_and_scans(ops in proptest::collection::vec(op(), 0..200), from in 0u32..6, after in proptest::option::of((0u32..5, 0u8..8))) {
            let seg = segment();
            let mut index = Index::default();
            let mut model: BTreeMap<(String, String), (u32, u64)> = BTreeMap::new();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Put { coll, key: k, shard: s, bytes } => {
                        let entry = Entry {
                            loc: Loc { seg: seg.clone(), span: written(0, 0), op: 0 },
                            version: Version::new(i as u64 + 1),
                            shard: shard(s),
                            bytes,
                        };
                        let old = index.put(&format!("c{coll}"), &key(k), entry);
                        let want = model.insert((format!("c{coll}"), key(k)), (s, bytes));
                        prop_assert_eq!(old.map(|o| (o.shard.get(), o.bytes)), want);
                    }
                    Op::Remove { coll, key: k } => {
                        let old = index.remove(&format!("c{coll}"), &key(k));
                        let want = model.remove(&(format!("c{coll}"), key(k)));
                        prop_assert_eq!(old.map(|o| (o.shard.get(), o.bytes)), want);
                    }
                }
            }
            prop_assert_eq!(index.docs(), model.len() as u64);
            prop_assert_eq!(index.live_bytes(), model.values().map(|v| v.1).sum::<u64>());
            let mut per_collection: BTreeMap<&str, u64> = BTreeMap::new();
            for (c, _) in model.keys() {
                *per_collection.entry(c.as_str()).or_default() += 1;
            }
            let got: BTreeMap<&str, u64> = index.collection_docs().collect();
            prop_assert_eq!(got, per_collection);
            let mut shards: BTreeMap<ShardId, ShardStats> = BTreeMap::new();
            for (s, bytes) in model.values() {
                let st = shards.entry(shard(*s)).or_default();
                st.docs += 1;
                st.bytes += bytes;
            }
            prop_assert_eq!(&index.shards_in(ShardRange::ALL), &shards);
            let range = ShardRange::new(from, 5).unwrap_or(ShardRange::ALL);
            let in_range: BTreeMap<_, _> =
                shards.into_iter().filter(|(s, _)| range.contains(*s)).collect();
            prop_assert_eq!(index.shards_in(range), in_range);
            for coll in ["c0", "c1"] {
                let mut want: Vec<(u32, String)> = model
                    .iter()
                    .filter(|((c, _), (s, _))| c == coll && range.contains(shard(*s)))
                    .map(|((_, k), (s, _))| (*s, k.clone()))
                    .collect();
                want.sort();
                let got: Vec<(u32, String)> =
                    index.scan(coll, range).map(|(k, e)| (e.shard.get(), k.to_owned())).collect();
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(index.count(coll, range), want.len());
                if let Some((s, k)) = after {
                    let cursor = (s, key(k));
                    let rest: Vec<_> = want
                        .iter()
                        .filter(|w| s < range.start() || **w > cursor)
                        .cloned()
                        .collect();
                    let got: Vec<(u32, String)> = index
                        .scan_after(coll, range, Some((shard(s), cursor.1.as_str())))
                        .map(|(k, e)| (e.shard.get(), k.to_owned()))
                        .collect();
                    prop_assert_eq!(got, rest);
                }
            }
        }
    }
}
