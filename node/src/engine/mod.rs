//! The SQL engine of a node: the executors' fragments ([`Core`]), the node-wide shard map and
//! catalog ([`Shared`]), and the session that plans, routes, runs and merges each statement
//! ([`Session`], the `pg::Engine` the wire layer drives).

pub mod backup;
mod core;
mod error;
mod reader;
mod session;
mod shared;

pub use self::core::{Core, FragmentCounters, FragmentRow, Target, WRITE_ATTEMPTS_MAX};
pub use self::error::EngineError;
pub use self::reader::FragmentReader;
pub use self::session::{FRAGMENT_COUNTERS, Prepared, Session, oid_of};
pub use self::shared::{CatalogView, Shared};
