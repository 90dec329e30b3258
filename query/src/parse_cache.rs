//! Parsed statements by their exact SQL text. [`crate::parse`] is a pure function of the
//! text, so a text sent again (every driver's `BEGIN` and `COMMIT`, an unnamed statement a
//! driver sends with each execution, a client's repeated query) gets exactly what parsing it
//! again would give, without sqlparser: parsing was a fifth of a node's CPU on one-statement
//! transactions sent as text (BENCHMARKS.md, session 34).
//!
//! One cache per executor, no locks. Bounded: at most [`PARSE_CACHE_ENTRIES`] texts, each at
//! most [`PARSE_CACHE_TEXT_BYTES_MAX`] bytes (longer ones are parsed every time); a full cache
//! drops one entry, any one, for each new text. Errors are not cached.

use std::collections::HashMap;

use crate::limits::{PARSE_CACHE_ENTRIES, PARSE_CACHE_TEXT_BYTES_MAX};
use crate::{PlanError, Statement};

/// Parsed statements by SQL text (see the module documentation).
#[derive(Debug, Default)]
pub struct ParseCache {
    entries: HashMap<Box<str>, Vec<Statement>>,
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
        if sql.len() <= PARSE_CACHE_TEXT_BYTES_MAX {
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

    /// Hits, misses and entries.
    pub fn stats(&self) -> ParseCacheStats {
        ParseCacheStats { hits: self.hits, misses: self.misses, entries: self.entries.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks a cached text gives what parsing gives, the second time from the cache; the
    // statements of a multi-statement text come back whole and in order.
    #[test]
    fn a_text_parsed_again_comes_from_the_cache() {
        let mut cache = ParseCache::default();
        let sql = "BEGIN; UPDATE c SET n = n + 1 WHERE id() = 'a'; COMMIT";
        let first = cache.parse(sql).expect("parses");
        let second = cache.parse(sql).expect("cached");
        assert_eq!(format!("{first:?}"), format!("{:?}", crate::parse(sql).expect("parses")));
        assert_eq!(format!("{first:?}"), format!("{second:?}"));
        assert_eq!(second.len(), 3);
        assert_eq!(cache.stats(), ParseCacheStats { hits: 1, misses: 1, entries: 1 });
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
        for _ in 0..2 {
            assert!(cache.parse(&long).is_ok());
        }
        assert_eq!(cache.stats(), ParseCacheStats { hits: 0, misses: 4, entries: 0 });
    }

    // Checks the bound on entries: more distinct texts than it holds leave it full, never
    // past it, and each text still parses to its own statement.
    #[test]
    fn the_cache_stays_within_its_entries() {
        let mut cache = ParseCache::default();
        for i in 0..PARSE_CACHE_ENTRIES + 10 {
            let sql = format!("SELECT {i}");
            let parsed = cache.parse(&sql).expect("parses");
            assert_eq!(format!("{parsed:?}"), format!("{:?}", crate::parse(&sql).expect("p")));
            assert!(cache.stats().entries <= PARSE_CACHE_ENTRIES);
        }
        assert_eq!(cache.stats().entries, PARSE_CACHE_ENTRIES);
        let again = cache.parse(&format!("SELECT {}", PARSE_CACHE_ENTRIES + 9)).expect("p");
        assert_eq!(again.len(), 1);
    }
}
