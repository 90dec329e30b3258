//! The SQL engine of a node: the executors' fragments ([`Core`]), the node-wide shard map and
//! catalog ([`Shared`]), and the session that plans, routes, runs and merges each statement
//! ([`Session`], the `pg::Engine` the wire layer drives).

pub mod backup;
mod coordinator;
mod core;
mod error;
pub mod limits;
mod reader;
mod session;
mod shared;
mod txn;

pub use self::coordinator::{
    COORDINATOR_DIR, Coordinator, DecisionPass, DecisionRecord, GatePause, MarkerEvidence,
    TwoPhaseGate, TxnShared, coordinator_of, fault, marker, read_decisions, txid_for_node,
};
pub use self::core::{
    Core, FragmentCounters, FragmentRow, PreparedTxn, SessionTxnRow, Target, TxCounters, TxnShare,
    TxnTarget, WRITE_ATTEMPTS_MAX,
};
pub use self::error::EngineError;
pub use self::reader::FragmentReader;
pub use self::session::{
    FRAGMENT_COUNTERS, Prepared, SHOW_REGION, Session, TRANSACTION_COUNTERS, TRANSACTIONS, oid_of,
};
pub use self::shared::{CatalogView, Shared};
pub use self::txn::{
    BUFFERED_VERSION, Buffered, FragmentTxn, FragmentWrites, OverlayDoc, OverlayReader, ReadRecord,
    Reads, ScanRecord, Txn,
};

/// Runs `test` on a glommio executor under the park watchdog, with a directory of its own
/// (`<tmp>/tessera-<name>-<pid>`, emptied before and removed after): the engine's unit tests
/// that need real files and timers.
#[cfg(test)]
fn on_executor_with_dir<F, Fut>(name: &str, test: F)
where
    F: FnOnce(std::path::PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let dir = std::env::temp_dir().join(format!("tessera-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.clone();
    storage::park::run_watched(
        name,
        || glommio::LocalExecutorBuilder::default().io_memory(1 << 20),
        move || test(d),
    )
    .expect("executor");
    let _ = std::fs::remove_dir_all(&dir);
}
