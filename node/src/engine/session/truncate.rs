//! `TRUNCATE c` and `DROP TABLE c`: every document of the collection deleted, in rounds
//! (DROP TABLE then removes the collection's sharding configuration).
//!
//! One atomic write may change at most `TXN_FRAGMENT_OPS_MAX` documents of a fragment (one
//! storage batch) and `TXN_WRITES_MAX` in all, so a collection larger than that cannot go in
//! one DELETE. TRUNCATE runs
//! DELETEs without a filter that stop after [`round_cap`] documents per fragment, each an
//! ordinary autocommit write (atomic across fragments, two-phase commit, forwarded on a
//! cluster as the text `TRUNCATE "c"`, which the owner plans into the same round), until a
//! round deletes fewer than the cap: then no fragment had more left when it was scanned.
//! It is not one transaction: an error (or a cancel) stops it part way, with the rounds
//! before it done; a document written meanwhile may survive it. Refused inside a block.

use std::sync::Arc;

use query::CollectionName;
use query::plan::{Delete, Statement};

use super::{Block, Implicit, Session};
use crate::engine::error::EngineError;
use crate::engine::limits::{TXN_FRAGMENT_OPS_MAX, TXN_WRITES_MAX};
use crate::pg::{CommandTag, Notice, RowSink};

/// Most documents one round deletes per fragment, for a map of `fragments`: one storage
/// batch per fragment, and all of them together within one transaction's write bound.
pub(super) fn round_cap(fragments: usize) -> usize {
    TXN_FRAGMENT_OPS_MAX.min(TXN_WRITES_MAX / fragments.max(1)).max(1)
}

/// One round of TRUNCATE over `collection`.
pub(super) fn round(collection: &CollectionName, fragments: usize) -> Statement {
    Statement::Delete(Delete {
        collection: collection.clone(),
        filter: None,
        returning: Vec::new(),
        per_fragment_max: Some(round_cap(fragments)),
    })
}

impl Session {
    /// Runs `TRUNCATE` over each collection in turn.
    pub(super) async fn truncate(
        &mut self,
        collections: &[CollectionName],
        sink: &RowSink<'_>,
    ) -> Result<CommandTag, EngineError> {
        self.outside_block(
            "TRUNCATE inside a transaction block",
            "TRUNCATE after a read or write in a query of several statements (they run as one \
             transaction)",
        )?;
        for collection in collections {
            self.empty(collection, sink).await?;
        }
        Ok(CommandTag::new("TRUNCATE TABLE"))
    }

    /// Runs `DROP TABLE` over each collection in turn: its documents deleted as TRUNCATE
    /// does, then its configuration removed. One with neither is 42P01, or a notice with
    /// `IF EXISTS`.
    pub(super) async fn drop_collections(
        &mut self,
        collections: &[CollectionName],
        if_exists: bool,
        sink: &mut RowSink<'_>,
    ) -> Result<CommandTag, EngineError> {
        self.outside_block(
            "DROP TABLE inside a transaction block",
            "DROP TABLE after a read or write in a query of several statements (they run as one \
             transaction)",
        )?;
        for collection in collections {
            let name = collection.as_str().to_owned();
            let configured = self.core.shared().catalog().config(&name).is_some();
            let deleted = self.empty(collection, sink).await?;
            if configured {
                if let Some(warning) = self.change_catalog(name, |_| Ok(None)).await? {
                    sink.notice(&warning);
                }
            } else if deleted == 0 && if_exists {
                sink.notice(&Notice::new(format!("table \"{name}\" does not exist, skipping")));
            } else if deleted == 0 {
                return Err(EngineError::NoSuchCollection(name));
            }
        }
        Ok(CommandTag::new("DROP TABLE"))
    }

    /// Refuses a statement inside a block (or a failed one), `in_block` naming it, or inside
    /// the implicit block of a query of several statements once that block read or wrote
    /// something, `in_query` naming it: it deletes in rounds, not atomically, so it cannot be
    /// undone with what came before. First in its query (`DROP TABLE IF EXISTS c; CREATE
    /// TABLE c …`) it runs on its own, as DDL does.
    fn outside_block(
        &self,
        in_block: &'static str,
        in_query: &'static str,
    ) -> Result<(), EngineError> {
        let implicit = self.implicit == Implicit::Open;
        match &self.block {
            Block::Idle => Ok(()),
            Block::Open(txn) if implicit && txn.is_empty() => Ok(()),
            _ if implicit => Err(EngineError::NotSupported {
                what: in_query,
                hint: "send it as a query of its own, or before the statements that read or \
                       write (it deletes in rounds, not atomically)",
            }),
            _ => Err(EngineError::NotSupported {
                what: in_block,
                hint: "run it on its own (it deletes in rounds, not atomically), or DELETE \
                       inside the block",
            }),
        }
    }

    /// Deletes every document of `collection` in rounds; how many.
    async fn empty(
        &mut self,
        collection: &CollectionName,
        sink: &RowSink<'_>,
    ) -> Result<u64, EngineError> {
        let text: Arc<str> = Arc::from(format!("TRUNCATE {}", collection.quoted()));
        let mut deleted = 0;
        loop {
            sink.check_cancelled().map_err(|_| EngineError::Cancelled)?;
            let fragments = self.core.shared().map().map_or(1, |m| m.len());
            let statement = Arc::new(round(collection, fragments));
            *self.forwardable.borrow_mut() = Some((Arc::clone(&text), 0, Vec::new()));
            let outcome = self.write(&statement).await?;
            deleted += outcome.affected;
            if outcome.affected < round_cap(fragments) as u64 {
                return Ok(deleted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks a round stays within one batch per fragment and one transaction's writes.
    #[test]
    fn unit_round_cap_fits_both_bounds() {
        for fragments in [0, 1, 2, 8, 16, 17, 4_096, 100_000] {
            let cap = round_cap(fragments);
            assert!((1..=TXN_FRAGMENT_OPS_MAX).contains(&cap), "{fragments}: {cap}");
            assert!(cap * fragments.max(1) <= TXN_WRITES_MAX.max(fragments), "{fragments}: {cap}");
        }
        assert_eq!(round_cap(1), TXN_FRAGMENT_OPS_MAX);
    }
}
