//! The tessera process: glommio executors (one per core) owning fragments, the PostgreSQL wire
//! protocol, sessions, cross-core calls, transactions, and later the cluster.
//!
//! The only crate that knows executors, sockets, PostgreSQL messages and SQLSTATE.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)
)]

pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod datadir;
pub mod engine;
pub mod logging;
pub mod metrics;
pub mod open_files;
pub mod pg;
pub mod runtime;
pub mod signals;
pub mod staged_memory;
