//! Parsed statements by their exact SQL text. [`crate::parse`] is a pure function of the
//! text, so a text sent again (every driver's `BEGIN` and `COMMIT`, an unnamed statement a
//! driver sends with each execution, a client's repeated query) gets exactly what parsing it
//! again would give, without sqlparser: parsing was a fifth of a node's CPU on one-statement
//! transactions sent as text (BENCHMARKS.md, session 34).
//!
//! One cache per executor, no locks. Bounded: at most [`PARSE_CACHE_ENTRIES`] texts, each at
//! most [`PARSE_CACHE_TEXT_BYTES_MAX`] bytes (longer ones are parsed every time); a full cache
//! drops one entry, any one, for each new text. A text is kept the second time it is seen
//! (a hash of each text seen once is remembered, at most [`PARSE_CACHE_ENTRIES`] × 16 of
//! them), so texts with literals in them, each seen once, cost a hash rather than a copy of
//! their plan and do not push the repeated ones out. Errors are not cached.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use crate::limits::{PARSE_CACHE_ENTRIES, PARSE_CACHE_TEXT_BYTES_MAX};
use crate::{PlanError, Statement};

/// Hashes of texts seen once remembered before the set starts again.
const SEEN_ONCE_MAX: usize = PARSE_CACHE_ENTRIES * 16;

/// Parsed statements by SQL text (see the module documentation).
#[derive(Debug, Default)]
pub struct ParseCache {
    entries: HashMap<Box<str>, Vec<Statement>>,
    /// Hashes of texts parsed once and not kept (by `entries`' own hasher).
    seen_once: HashSet<u64>,
    hits: u64,
    misses: u64,
}

/// A cache's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseCacheStats {
    /// Texts answered from the cache.
    pub hits: u64,
    /// Texts parsed (not cached, or refused).
    pub misses: u64,
    /// Texts cached now.
    pub entries: usize,
}

impl ParseCache {
    /// What [`crate::parse`] gives for `sql`, from the cache when the text was parsed before.
    pub fn parse(&mut self, sql: &str) -> Result<Vec<Statement>, PlanError> {
        if let Some(parsed) = self.entries.get(sql) {
            self.hits += 1;
            return Ok(parsed.clone());
        }
        self.misses += 1;
        let parsed = crate::parse(sql)?;
        if sql.len() <= PARSE_CACHE_TEXT_BYTES_MAX && self.seen_before(sql) {
            if self.entries.len() >= PARSE_CACHE_ENTRIES {
                // Any entry: the first the map yields (no order to keep up on every hit).
                if let Some(victim) = self.entries.keys().next().cloned() {
                    self.entries.remove(&victim);
                }
            }
            self.entries.insert(sql.into(), parsed.clone());
        }
        Ok(parsed)
    }

    /// Whether `sql` was seen once already (then it is forgotten there: it is about to be
    /// kept); else remembers it.
    fn seen_before(&mut self, sql: &str) -> bool {
        let hash = self.entries.hasher().hash_one(sql);
        if self.seen_once.remove(&hash) {
            return true;
        }
        if self.seen_once.len() >= SEEN_ONCE_MAX {
            self.seen_once.clear();
        }
        self.seen_once.insert(hash);
        false
    }

    /// Hits, misses and entries.
    pub fn stats(&self) -> ParseCacheStats {
        ParseCacheStats { hits: self.hits, misses: self.misses, entries: self.entries.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks texts seen once are not kept, however many there are, and leave a repeated
    // text's entry in place; the memory of texts seen once stays bounded.
    #[test]
    fn texts_seen_once_are_not_kept() {
        let mut cache = ParseCache::default();
        for _ in 0..2 {
            cache.parse("BEGIN").expect("parses");
        }
        for i in 0..SEEN_ONCE_MAX + 10 {
            cache.parse(&format!("SELECT * FROM c WHERE id() = 'k{i}'")).expect("parses");
            assert!(cache.seen_once.len() <= SEEN_ONCE_MAX);
        }
        assert_eq!(cache.stats().entries, 1, "only the repeated text is kept");
        cache.parse("BEGIN").expect("cached");
        assert_eq!(cache.stats().hits, 1);
    }

    // Checks a cached text gives what parsing gives, the second time from the cache; the
    // statements of a multi-statement text come back whole and in order.
    #[test]
    fn a_text_parsed_again_comes_from_the_cache() {
        let mut cache = ParseCache::default();
        let sql = "BEGIN; UPDATE c SET n = n + 1 WHERE id() = 'a'; COMMIT";
        let first = cache.parse(sql).expect("parses");
        assert_eq!(cache.stats(), ParseCacheStats { hits: 0, misses: 1, entries: 0 }, "seen once");
        let second = cache.parse(sql).expect("parses, then kept");
        assert_eq!(cache.stats(), ParseCacheStats { hits: 0, misses: 2, entries: 1 });
        let third = cache.parse(sql).expect("cached");
        assert_eq!(format!("{first:?}"), format!("{:?}", crate::parse(sql).expect("parses")));
        assert_eq!(format!("{first:?}"), format!("{second:?}"));
        assert_eq!(format!("{first:?}"), format!("{third:?}"));
        assert_eq!(third.len(), 3);
        assert_eq!(cache.stats(), ParseCacheStats { hits: 1, misses: 2, entries: 1 });
    }

    // Checks errors are not cached (each time parsed and refused again), and a text past the
    // length bound is parsed each time and never kept.
    #[test]
    fn errors_and_long_texts_are_not_kept() {
        let mut cache = ParseCache::default();
        for _ in 0..2 {
            assert!(cache.parse("SELEC 1").is_err());
        }
        let long = format!("SELECT 1 AS {}", "a".repeat(PARSE_CACHE_TEXT_BYTES_MAX));
        for _ in 0..3 {
            assert!(cache.parse(&long).is_ok());
        }
        assert_eq!(cache.stats(), ParseCacheStats { hits: 0, misses: 5, entries: 0 });
    }

    // Checks the bound on entries: more distinct texts than it holds leave it full, never
    // past it, and each text still parses to its own statement.
    #[test]
    fn the_cache_stays_within_its_entries() {
        let mut cache = ParseCache::default();
        for i in 0..PARSE_CACHE_ENTRIES + 10 {
            let sql = format!("SELECT {i}");
            for _ in 0..2 {
                let parsed = cache.parse(&sql).expect("parses");
                assert_eq!(format!("{parsed:?}"), format!("{:?}", crate::parse(&sql).expect("p")));
            }
            assert!(cache.stats().entries <= PARSE_CACHE_ENTRIES);
        }
        assert_eq!(cache.stats().entries, PARSE_CACHE_ENTRIES);
        let again = cache.parse(&format!("SELECT {}", PARSE_CACHE_ENTRIES + 9)).expect("p");
        assert_eq!(again.len(), 1);
    }
}
