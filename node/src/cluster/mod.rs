//! The cluster (issue #7, foundations): the peer protocol, membership, the coordinator on
//! openraft and the allocation strategies. See ARCHITECTURE.md, "node::cluster".
//!
//! Nothing here runs without `--cluster-name`: a node without it is the single node.
//!
//! **Invariant:** tokio runs only on the control-plane thread this module starts; executors
//! read what it publishes through `ClusterView` and never await its futures.

pub mod allocation;
pub mod limits;
pub mod state;
pub mod store;
pub mod wire;
