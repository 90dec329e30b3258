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

pub mod content;
pub mod doc;
pub mod error;
pub mod fuzzing;
pub mod id;
pub mod ids;
pub mod limits;
pub mod map;
pub mod prune;

pub use content::{ContentKey, FieldPath, ShardingConfig, assign, check_change, validate, verify};
pub use error::{
    AssignError, ChangeError, ConfigError, ContentError, DateTimeError, IdError, MapError,
    ValidationError,
};
pub use id::{DocKey, Placement, doc_key, hash, shard_of, shard_of_bytes};
pub use ids::{FragmentId, SHARD_COUNT, ShardId, ShardRange};
pub use map::{Epoch, ExecutorId, Fragment, NodeId, Owner, ShardMap};
pub use prune::{Literal, Opcode, Predicate, RoutePlan, RouteRule, route};
