//! The bodies of the fuzz targets (`fuzz/fuzz_targets/*.rs`), kept here so the corpus replay
//! test (`router/tests/regression_fuzz_corpus.rs`) runs exactly what the fuzzer runs.
//!
//! Each function takes arbitrary bytes, must never panic on its own, and asserts the
//! properties that make its answer trustworthy; a failed assertion is a finding.

use xxhash_rust::xxh64::xxh64;

use crate::content::{ShardingConfig, assign as assign_id, check_change, validate, verify};
use crate::id::{Placement, doc_key, hash, shard_of, shard_of_bytes as place_bytes};
use crate::ids::ShardId;
use crate::limits::{ID_BYTES_MAX, RANGE_MAX};

/// Target `shard_of`: any bytes give a placement or a typed error; the `&str` entry agrees
/// with the byte entry; the allocation-free hash agrees with the reference
/// `xxh64(to_lowercase)`; and the document key (lower-cased id) places the same way, so ids
/// that differ only in case are one document on one shard.
pub fn shard_of_bytes(data: &[u8]) {
    let placed = place_bytes(data);
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(placed.is_err(), "invalid UTF-8 must be refused");
        return;
    };
    assert_eq!(shard_of(text), placed, "str and byte entries disagree");
    let reference = ShardId::from_u64_mod(xxh64(text.to_lowercase().as_bytes(), 0));
    assert_eq!(hash(text), reference, "fast hash differs from the reference");
    let key = doc_key(text);
    if key.as_str().len() <= ID_BYTES_MAX {
        let placed_key = shard_of(key.as_str());
        match (&placed, placed_key) {
            (Ok(a), Ok(b)) => assert_eq!(*a, b, "case changes placement"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("case changes validity: {a:?} vs {b:?}"),
        }
    }
    if let Ok(Placement::Explicit(shard)) = placed {
        assert!(text.ends_with(&shard.get().to_string()), "explicit shard not from the suffix");
    }
}

/// Target `sharding_config`: any bytes parse to a configuration or a typed error with a
/// message; an accepted configuration round-trips through its canonical JSON and may always
/// "change" to itself.
pub fn sharding_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match ShardingConfig::parse(text) {
        Ok(config) => config,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error without a reason");
            return;
        }
    };
    assert!(config.range() >= 1, "Range below 1 accepted");
    assert!(config.range() <= RANGE_MAX, "Range above the limit accepted");
    let json = config.to_json();
    assert_eq!(ShardingConfig::parse(&json).as_ref(), Ok(&config), "round trip through {json}");
    assert_eq!(check_change(&config, &config), Ok(()), "a configuration refuses itself");
}

/// Separates the three parts of an `assign` fuzz input.
pub const ASSIGN_INPUT_SEPARATOR: u8 = 0;

/// Target `assign`: input `config \0 id \0 document`. When all three parse, assignment gives
/// a typed error or an id that ends in `$@<shard>`, places on that shard, lies in the block of
/// the document's content and passes `verify` (validation as if `Mutable = false`) and
/// `validate`; validation of the given id never panics.
pub fn assign(data: &[u8]) {
    let mut parts = data.splitn(3, |&b| b == ASSIGN_INPUT_SEPARATOR);
    let (Some(config), Some(id), Some(doc)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let (Ok(config), Ok(id), Ok(doc)) =
        (std::str::from_utf8(config), std::str::from_utf8(id), std::str::from_utf8(doc))
    else {
        return;
    };
    let Ok(config) = ShardingConfig::parse(config) else {
        return;
    };
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(doc) else {
        return;
    };
    let _ = validate(&config, id, &doc);
    let (final_id, shard) = match assign_id(&config, id, &doc) {
        Ok(assigned) => assigned,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error without a reason");
            return;
        }
    };
    assert_eq!(shard_of(&final_id), Ok(Placement::Explicit(shard)), "{final_id}");
    let base = id.strip_suffix('$').unwrap_or(id);
    assert_eq!(final_id, format!("{base}$@{shard}"), "rewritten id has the wrong shape");
    let content = config.content_shard(&doc);
    let Ok(Some(content)) = content else {
        panic!("assigned without a content shard: {content:?}");
    };
    assert!(config.block_of(content).contains(shard), "assigned outside the content block");
    assert_eq!(verify(&config, &final_id, &doc), Ok(()), "assigned id does not verify");
    assert_eq!(validate(&config, &final_id, &doc), Ok(()), "assigned id does not validate");
}
