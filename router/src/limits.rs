//! Every bound the router enforces, with its unit and the reason for its value.
//!
//! Hitting one of these is a typed error (or, for predicates, a conservative scatter), never
//! unbounded growth and never a panic.

use crate::ids::SHARD_COUNT;

/// Longest document id, in UTF-8 bytes, `$` part included. Ids are index keys and travel in
/// every request; 512 bytes holds any realistic `collection/key$tail` with room to spare and
/// keeps the ASCII lower-casing buffer of [`crate::shard_of`] on the stack.
pub const ID_BYTES_MAX: usize = 512;

/// Largest sharding configuration accepted by [`crate::ShardingConfig::parse`], in bytes. A
/// real configuration is under a hundred bytes; the bound keeps a hostile one cheap to refuse.
pub const CONFIG_BYTES_MAX: usize = 64 * 1024;

/// Most entries in a configuration's `Fields`. Each field is read from every written document.
pub const CONFIG_FIELDS_MAX: usize = 16;

/// Most steps in one dotted field path (`a.b.c` has three).
pub const FIELD_PATH_STEPS_MAX: usize = 32;

/// Longest field path in a configuration, in bytes.
pub const FIELD_PATH_BYTES_MAX: usize = 1024;

/// Largest `Range`. A block is clipped at `SHARD_COUNT`, so a larger `Range` would place
/// nothing differently; refusing it keeps one spelling per meaning.
pub const RANGE_MAX: u32 = SHARD_COUNT;

/// Most fragments in a shard map. Each fragment has its own log and index; a million-entry
/// map is far past any deployment and keeps lookups and rebuilds cheap.
pub const FRAGMENTS_MAX: u32 = 1 << 16;

/// Deepest predicate nesting [`crate::prune::route`] looks into. Deeper sub-trees are treated
/// as "may match anything", which is always sound, so a hostile query cannot exhaust the stack.
pub const PREDICATE_DEPTH_MAX: usize = 64;

/// Most shard ranges a routing plan keeps before it widens to a scatter (still sound: a
/// scatter visits every fragment). Bounds the work of unions of long `IN` lists.
pub const ROUTE_RANGES_MAX: usize = 4096;

const _: () = assert!(ID_BYTES_MAX >= 16);
const _: () = assert!(RANGE_MAX <= SHARD_COUNT);
const _: () = assert!(FRAGMENTS_MAX <= SHARD_COUNT);
const _: () = assert!(CONFIG_FIELDS_MAX >= 1);
