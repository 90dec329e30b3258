//! A hash map that grows without a stall: when its table is full it allocates one twice the
//! size and moves the old table's entries over a few buckets at a time, on later inserts,
//! instead of rehashing every entry inside one insert (`std`'s `HashMap` does the latter: at
//! millions of documents one insert took tens of milliseconds, and every write queued behind it
//! waited). Lookups and removals look in both tables while a move is under way.
//!
//! Bounds: an insert moves the entries of at most `GROW_MOVE_BUCKETS` buckets of the old
//! table. The new table holds twice the old one's capacity, and the old one has at most 8/7 of
//! its capacity in buckets, so the move ends after about a seventh of the old entry count in
//! inserts, long before the new table is full. Should it still be under way then (not
//! reachable by that arithmetic), the rest is moved at once before the table grows again.
//!
//! Each slot keeps its key's hash, so moving an entry hashes nothing and a probe compares
//! hashes before keys. The hasher is keyed (`keyhash`: foldhash with secret seeds from the OS
//! random source): document ids come from clients, so a keyed hash is what keeps a client from
//! choosing ids that collide (HashDoS).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use crate::keyhash::{KeyedState, keyed_state};
use crate::limits::GROW_MOVE_BUCKETS;

/// One entry and its key's hash.
#[derive(Debug)]
struct Slot<K, V> {
    hash: u64,
    key: K,
    value: V,
}

/// A hash map with incremental growth (module docs).
#[derive(Debug)]
pub(crate) struct GrowMap<K, V> {
    hasher: KeyedState,
    /// Where new entries go.
    cur: HashTable<Slot<K, V>>,
    /// The table before the last growth, being emptied into `cur` (empty when not growing).
    old: HashTable<Slot<K, V>>,
    /// The next bucket of `old` to move.
    cursor: usize,
}

impl<K, V> Default for GrowMap<K, V> {
    fn default() -> Self {
        GrowMap { hasher: keyed_state(), cur: HashTable::new(), old: HashTable::new(), cursor: 0 }
    }
}

impl<K: Hash + Eq, V> GrowMap<K, V> {
    fn hash<Q: Hash + ?Sized>(&self, q: &Q) -> u64 {
        self.hasher.hash_one(q)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.cur.len() + self.old.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether entries of an earlier table are still being moved.
    #[cfg(test)]
    pub fn growing(&self) -> bool {
        !self.old.is_empty()
    }

    /// The entry of `q`.
    pub fn get_key_value<Q>(&self, q: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(q);
        let eq = |s: &Slot<K, V>| s.hash == hash && s.key.borrow() == q;
        let slot = match self.cur.find(hash, eq) {
            Some(s) => Some(s),
            None if !self.old.is_empty() => self.old.find(hash, eq),
            None => None,
        };
        slot.map(|s| (&s.key, &s.value))
    }

    /// The value of `q`.
    pub fn get<Q>(&self, q: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get_key_value(q).map(|(_, v)| v)
    }

    /// The value of `q`, writable.
    pub fn get_mut<Q>(&mut self, q: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(q);
        let eq = |s: &Slot<K, V>| s.hash == hash && s.key.borrow() == q;
        if let Some(s) = self.cur.find_mut(hash, eq) {
            return Some(&mut s.value);
        }
        self.old.find_mut(hash, eq).map(|s| &mut s.value)
    }

    /// Removes `q`; returns its key and value.
    pub fn remove_entry<Q>(&mut self, q: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(q);
        let eq = |s: &Slot<K, V>| s.hash == hash && s.key.borrow() == q;
        let slot = match self.cur.find_entry(hash, eq) {
            Ok(e) => e.remove().0,
            Err(_) => self.old.find_entry(hash, eq).ok()?.remove().0,
        };
        Some((slot.key, slot.value))
    }

    /// The bucket of `q` (whose hash is `hash`): whether it is in the current table, and its
    /// index there.
    fn find_bucket<Q>(&self, hash: u64, q: &Q) -> Option<(bool, usize)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let eq = |s: &Slot<K, V>| s.hash == hash && s.key.borrow() == q;
        match self.cur.find_bucket_index(hash, eq) {
            Some(i) => Some((true, i)),
            None if !self.old.is_empty() => {
                self.old.find_bucket_index(hash, eq).map(|i| (false, i))
            }
            None => None,
        }
    }

    /// Inserts `value` under `q`, or replaces the value there (returns the previous one). `key`
    /// makes the stored key of a new entry (called only then). One hash of `q`; at most
    /// `GROW_MOVE_BUCKETS` buckets of an earlier table moved.
    pub fn upsert<Q>(&mut self, q: &Q, key: impl FnOnce() -> K, value: V) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(q);
        // Replacing in place: no table changes shape.
        if let Some(v) = self.value_mut(hash, q) {
            return Some(std::mem::replace(v, value));
        }
        self.insert_new(hash, key(), value);
        None
    }

    /// Calls `update` on the value of `q`, or inserts `value()` under `key()` when there is
    /// none (without calling `update`: a new slot is written once). One hash of `q`; at most
    /// `GROW_MOVE_BUCKETS` buckets of an earlier table moved.
    pub fn update_or_insert<Q>(
        &mut self,
        q: &Q,
        key: impl FnOnce() -> K,
        value: impl FnOnce() -> V,
        update: impl FnOnce(&mut V),
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(q);
        match self.value_mut(hash, q) {
            Some(v) => update(v),
            None => self.insert_new(hash, key(), value()),
        }
    }

    /// The value under `q` (hashing to `hash`), in whichever table holds it.
    fn value_mut<Q>(&mut self, hash: u64, q: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (in_cur, i) = self.find_bucket(hash, q)?;
        let table = if in_cur { &mut self.cur } else { &mut self.old };
        table.get_bucket_mut(i).map(|s| &mut s.value)
    }

    /// Inserts a key known to be absent, after moving some buckets of an earlier table.
    fn insert_new(&mut self, hash: u64, key: K, value: V) {
        self.make_room();
        self.cur.insert_unique(hash, Slot { hash, key, value }, |s| s.hash);
    }

    /// Before an insert: moves a few buckets of the earlier table, or, when the current table
    /// is full, starts moving it to one twice its size.
    fn make_room(&mut self) {
        if self.cur.len() == self.cur.capacity() {
            if !self.old.is_empty() {
                // Not reached by the bounds in the module docs; correct regardless.
                self.move_buckets(usize::MAX);
            }
            let capacity = (self.cur.capacity() * 2).max(16);
            let full = std::mem::replace(&mut self.cur, HashTable::with_capacity(capacity));
            self.old = full;
            self.cursor = 0;
            if !self.old.is_empty() {
                cov_mark::hit!(growmap_grew);
            }
        }
        if !self.old.is_empty() {
            self.move_buckets(GROW_MOVE_BUCKETS);
        }
    }

    /// Moves the entries of the next `buckets` buckets of `old` into `cur`.
    fn move_buckets(&mut self, buckets: usize) {
        let end = self.cursor.saturating_add(buckets).min(self.old.num_buckets());
        for i in self.cursor..end {
            if let Ok(e) = self.old.get_bucket_entry(i) {
                let (slot, _) = e.remove();
                self.cur.insert_unique(slot.hash, slot, |s| s.hash);
            }
        }
        self.cursor = end;
        if self.old.is_empty() || end == self.old.num_buckets() {
            cov_mark::hit!(growmap_moved_all);
            // Every bucket visited: give the memory back.
            self.old = HashTable::new();
            self.cursor = 0;
        }
    }

    /// Every entry (the current table's first).
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.cur.iter().chain(self.old.iter()).map(|s| (&s.key, &s.value))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::GrowMap;

    fn put(m: &mut GrowMap<String, u64>, k: &str, v: u64) -> Option<u64> {
        m.upsert(k, || k.to_owned(), v)
    }

    // Growth is spread over later inserts: the table is growing right after it grew, and every
    // entry stays reachable (get, get_mut, iter) until the move ends and after.
    #[test]
    fn unit_growth_moves_entries_over_later_inserts() {
        cov_mark::check!(growmap_grew);
        cov_mark::check!(growmap_moved_all);
        let mut m = GrowMap::default();
        let mut saw_growing = false;
        for i in 0..20_000u64 {
            assert_eq!(put(&mut m, &format!("k{i}"), i), None);
            saw_growing |= m.growing();
            if i % 997 == 0 {
                for j in (0..=i).step_by(37) {
                    assert_eq!(m.get(format!("k{j}").as_str()), Some(&j), "k{j} after {i}");
                }
                assert_eq!(m.iter().count() as u64, i + 1);
            }
        }
        assert!(saw_growing);
        assert_eq!(m.len(), 20_000);
        if let Some(v) = m.get_mut("k5") {
            *v = 7;
        }
        assert_eq!(m.get("k5"), Some(&7));
    }

    // Replacing and removing entries that still sit in the earlier table.
    #[test]
    fn unit_replace_and_remove_during_a_move() {
        let mut m = GrowMap::default();
        let mut i = 0u64;
        while !m.growing() {
            put(&mut m, &format!("k{i}"), i);
            i += 1;
        }
        // Right after growth nearly everything is still in the old table.
        for j in 0..i {
            assert_eq!(put(&mut m, &format!("k{j}"), j + 1000), Some(j));
        }
        for j in (0..i).step_by(2) {
            assert_eq!(m.remove_entry(format!("k{j}").as_str()), Some((format!("k{j}"), j + 1000)));
        }
        for j in 0..i {
            let want = (j % 2 == 1).then_some(j + 1000);
            assert_eq!(m.get(format!("k{j}").as_str()).copied(), want);
        }
        assert_eq!(m.len() as u64, i / 2);
        assert!(m.remove_entry("absent").is_none());
    }

    proptest! {
        // Against std's HashMap: random upserts, removals and in-place updates over a small
        // key space, enough of them to grow through several sizes.
        #[test]
        fn model_matches_hashmap(ops in proptest::collection::vec((0u16..3000, 0u8..3, any::<u64>()), 0..6000)) {
            let mut m = GrowMap::default();
            let mut model = HashMap::new();
            for (k, what, v) in ops {
                let key = format!("key-{k}");
                match what {
                    0 => prop_assert_eq!(put(&mut m, &key, v), model.insert(key.clone(), v)),
                    1 => prop_assert_eq!(
                        m.remove_entry(key.as_str()).map(|(_, v)| v),
                        model.remove(&key)
                    ),
                    _ => {
                        // Adds `v` to the value, which starts at `v` when absent.
                        let add = |x: &mut u64| *x = x.wrapping_add(v);
                        m.update_or_insert(key.as_str(), || key.clone(), || v, add);
                        model.entry(key.clone()).and_modify(add).or_insert(v);
                    }
                }
                prop_assert_eq!(m.len(), model.len());
            }
            for (k, v) in &model {
                prop_assert_eq!(m.get(k.as_str()), Some(v));
            }
            let mut all: Vec<_> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
            all.sort();
            let mut want: Vec<_> = model.into_iter().collect();
            want.sort();
            prop_assert_eq!(all, want);
        }
    }
}
