//! Tessera's placement contract: which shard a document lives on, which fragment holds a shard,
//! and which fragments a predicate can touch.
//!
//! The rules are normative and live in `SHARDING.md` (shared with every other component): a
//! document stored under one answer and looked up under another is a lost document.
//!
//! This crate never does I/O, never knows SQL text, sockets or disks, and depends on no other
//! Tessera crate. It is pure and total: every input gives an answer or a typed error.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod doc;
pub mod ids;

pub use ids::{FragmentId, SHARD_COUNT, ShardId, ShardRange};
