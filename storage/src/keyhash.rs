//! The hasher of the in-memory index's hash tables (the id table and the per-shard counters).
//!
//! foldhash (`fast` variant) keyed with secrets from the operating system's random source:
//! hashing a short id is a few multiplies instead of SipHash-1-3's rounds (the id table was the
//! largest single cost of a durable write, session 5's profile).
//!
//! Why it stays safe against hash flooding by clients choosing ids: every folded multiply of
//! foldhash mixes the input with secret seed words, so colliding ids cannot be chosen without
//! the seeds. Here both seeds come from `std`'s `RandomState`, whose SipHash keys come from the
//! OS random source (not from foldhash's own address- and time-derived default seed): a
//! process-wide shared seed drawn once, and a per-table seed drawn for every table, so no two
//! tables probe alike and copying one table into another is not quadratic. What foldhash does
//! not resist is an attacker who observes hash values, or timings fine enough to infer them,
//! and derives the seeds; no hash value leaves the process (scans are in (shard, id) order,
//! only `verify` walks the id table in hash order and reports nothing of that order), and a
//! probe's few nanoseconds cannot be told apart behind a durable write's fdatasync.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use foldhash::SharedSeed;
use foldhash::fast::SeedableRandomState;

/// The builder of the index's hashers (and of the node's per-transaction read sets: the same
/// client-chosen ids).
pub type KeyedState = SeedableRandomState;

/// A 64-bit secret from the OS random source: SipHash of a constant under `std`'s random keys
/// (each `RandomState::new` gets fresh keys per thread's random base, so each call differs).
fn secret() -> u64 {
    RandomState::new().hash_one(0x7e55_e7a1_u64)
}

/// A builder with a fresh per-table seed and the process's shared seed.
pub fn keyed_state() -> KeyedState {
    static SHARED: OnceLock<SharedSeed> = OnceLock::new();
    let shared = SHARED.get_or_init(|| SharedSeed::from_u64(secret()));
    SeedableRandomState::with_seed(secret(), shared)
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::keyed_state;

    // Two tables hash the same id differently (their own seeds), each one the same way every
    // time.
    #[test]
    fn unit_tables_have_their_own_seeds() {
        let (a, b) = (keyed_state(), keyed_state());
        assert_eq!(a.hash_one("doc-1"), a.hash_one("doc-1"));
        let differ = (0..8).any(|i| {
            let id = format!("doc-{i}");
            a.hash_one(id.as_str()) != b.hash_one(id.as_str())
        });
        assert!(differ);
    }
}
