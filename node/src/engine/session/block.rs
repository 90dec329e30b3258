//! A transaction block shipped whole: when one simple Query message holds `BEGIN; <writes>;
//! COMMIT`, or only writes (its implicit block), and every write routes to one fragment owned
//! by another executor of this node, the
//! session sends the block's statements and the empty transaction there in **one** mesh call.
//! The owner evaluates each write through the transaction's buffer (`Core::txn_write`, as a
//! share of an ordinary block statement does), absorbs it, and commits on the spot
//! (`Core::commit_fragment`: the fast path, one atomic batch and one fdatasync), then answers with
//! the transaction, each statement's outcome and the commit's. The wire layer then runs the
//! statements one by one as always and each `execute` replays its recorded outcome.
//!
//! Before: BEGIN in place, one hop per write, one hop for COMMIT (3 for a transfer). After: 1.
//!
//! Only what cannot behave differently is shipped: INSERT, UPDATE and DELETE without
//! RETURNING and without parameters (nothing to stream, so nothing can fail between the
//! commit and the client seeing its outcome), on a node that is not part of a cluster. The
//! first failing write stops the block there, exactly as the simple-query protocol stops at
//! the first error: its error is replayed at its position, the block is then failed (25P02
//! until ROLLBACK) and COMMIT was never attempted. Anything else (several fragments or
//! executors, a fragment of this executor, a routing or placement error) runs the ordinary
//! way, statement by statement, where errors surface at their own statement.

use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

use query::PlacedDocument;
use query::plan::Statement;
use router::{FragmentId, ShardRange};

use super::{Block, Session, collection_of, internal};
use crate::engine::core::{Core, ShareRead, TxnTarget};
use crate::engine::error::EngineError;
use crate::engine::shared::CatalogView;
use crate::engine::txn::Txn;
use crate::pg::CommandTag;
use crate::runtime::ExecutorIndex;

/// The statements of a simple Query that has the shape of a shippable block, kept from
/// `parse` until its block opens.
pub(super) struct BlockText {
    /// The SQL string they came from (matched by pointer against the running statement's).
    pub(super) sql: Arc<str>,
    /// The writes between BEGIN and COMMIT, or every statement of an implicit block.
    pub(super) writes: Vec<Statement>,
    /// `BEGIN; <writes>; COMMIT` (the writes start at position 1 and COMMIT replays the
    /// commit), or only writes, the query's implicit block (they start at 0 and the query's
    /// end replays the commit).
    pub(super) explicit: bool,
}

impl BlockText {
    /// The block's writes when `parsed` is `BEGIN; <writes without RETURNING or parameters>;
    /// COMMIT`, or two or more such writes alone (a query's implicit block), else `None`.
    pub(super) fn of(sql: &Arc<str>, parsed: &[Statement]) -> Option<BlockText> {
        let (writes, explicit) = match (parsed.first()?, parsed.get(1..)?) {
            (Statement::Begin, [middle @ .., Statement::Commit]) => (middle, true),
            _ if parsed.len() > 1 => (parsed, false),
            _ => return None,
        };
        if writes.is_empty() || !writes.iter().all(shippable) {
            return None;
        }
        Some(BlockText { sql: Arc::clone(sql), writes: writes.to_vec(), explicit })
    }
}

/// A write that can run in a shipped block.
fn shippable(statement: &Statement) -> bool {
    let returns = match statement {
        Statement::Insert(i) => !i.returning.is_empty(),
        Statement::Update(u) => !u.returning.is_empty(),
        Statement::Delete(d) => !d.returning.is_empty(),
        _ => return false,
    };
    !returns && query::param_types(statement).is_empty()
}

/// One write of a shipped block with its target on the owner.
struct Shipped {
    statement: Arc<Statement>,
    fragment: FragmentId,
    ranges: Vec<ShardRange>,
    docs: Vec<PlacedDocument>,
}

/// What one statement of a shipped block did, replayed by `execute`.
pub(super) enum Outcome {
    /// A write: its command tag.
    Wrote(CommandTag),
    /// A write failed: the block stopped there.
    Failed(EngineError),
    /// COMMIT ran on the owner.
    Committed(Result<(), EngineError>),
}

/// Recorded outcomes of a shipped block, by statement position in its SQL string.
pub(super) struct Replay {
    pub(super) sql: Arc<str>,
    pub(super) next: VecDeque<(u32, Outcome)>,
}

impl Session {
    /// Right after the BEGIN at position 0 of `sql` opened a block (`explicit`), or right
    /// after the query's implicit block opened for its statement 0: ships the block when it
    /// qualifies (see the module doc). `Ok(false)`: not shipped, the statements run as usual.
    pub(super) async fn ship_block(
        &mut self,
        sql: &Arc<str>,
        explicit: bool,
    ) -> Result<bool, EngineError> {
        let Some(text) = self.block_text.take() else { return Ok(false) };
        if !Arc::ptr_eq(&text.sql, sql) || text.explicit != explicit || self.core.shared().clustered
        {
            return Ok(false);
        }
        let Some((executor, shipped)) = self.plan_block(text.writes) else { return Ok(false) };
        let txn = match std::mem::replace(&mut self.block, Block::Idle) {
            Block::Open(txn) => txn,
            other => {
                self.block = other;
                return Ok(false);
            }
        };
        let number = txn.number;
        self.publish(&txn, "committing");
        let catalog = self.core.shared().catalog();
        let answer =
            self.ctx.mesh.call(executor, move |core| run_block(core, txn, shipped, catalog)).await;
        let (txn, outcomes) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                // Nothing is known of the block: BEGIN fails and the block is failed.
                self.block = Block::Open(Txn::new(number));
                return Err(e.into());
            }
        };
        // It stays listed as committing until its COMMIT is replayed (or its error fails it).
        self.block = Block::Open(txn);
        // Positions: BEGIN is 0, the writes 1.., COMMIT after them; in an implicit block the
        // writes are 0.. and the commit is replayed by the query's end (`replayed_commit`).
        let next = (u32::from(explicit)..).zip(outcomes).collect();
        self.replay = Some(Replay { sql: Arc::clone(sql), next });
        Ok(true)
    }

    /// The owner and targets of a block's writes when they all route to one fragment on one
    /// other executor of this node.
    fn plan_block(&self, writes: Vec<Statement>) -> Option<(ExecutorIndex, Vec<Shipped>)> {
        let catalog = self.core.shared().catalog();
        let mut executors = BTreeSet::new();
        let mut fragments = BTreeSet::new();
        let mut shipped = Vec::with_capacity(writes.len());
        for statement in writes {
            let (executor, fragment, ranges, docs) = match &statement {
                Statement::Insert(insert) => {
                    let place = catalog.rules(insert.collection.as_str()).place;
                    let (placed, remote) = self.place_all(insert, place).ok()?;
                    if !remote.is_empty() || placed.len() != 1 {
                        return None;
                    }
                    let (executor, mut list) = placed.into_iter().next()?;
                    if list.len() != 1 {
                        return None;
                    }
                    let (fragment, docs) = list.pop()?;
                    (executor, fragment, Vec::new(), docs)
                }
                _ => {
                    let routed = self.route_all(&statement, &catalog).ok()??;
                    if !routed.remote.is_empty() || routed.local.len() != 1 {
                        return None;
                    }
                    let (executor, mut targets) = routed.local.into_iter().next()?;
                    if targets.len() != 1 {
                        return None;
                    }
                    let target = targets.pop()?;
                    (executor, target.fragment, target.ranges, Vec::new())
                }
            };
            executors.insert(executor);
            fragments.insert(fragment);
            shipped.push(Shipped { statement: Arc::new(statement), fragment, ranges, docs });
        }
        let executor = executors.pop_first()?;
        if !executors.is_empty() || fragments.len() != 1 || executor == self.core.index() {
            return None;
        }
        Some((executor, shipped))
    }

    /// The recorded outcome of the statement at `index` of `sql` when a shipped block ran it.
    /// COMMIT ends the block here as an ordinary COMMIT would.
    pub(super) fn replayed(
        &mut self,
        sql: &Arc<str>,
        index: u32,
    ) -> Option<Result<CommandTag, EngineError>> {
        let replay = self.replay.as_mut()?;
        let matches =
            Arc::ptr_eq(&replay.sql, sql) && replay.next.front().is_some_and(|(i, _)| *i == index);
        if !matches {
            self.replay = None;
            return None;
        }
        let (_, outcome) = replay.next.pop_front()?;
        if replay.next.is_empty() {
            self.replay = None;
        }
        Some(match outcome {
            Outcome::Wrote(tag) => Ok(tag),
            Outcome::Failed(e) => {
                self.replay = None;
                Err(e)
            }
            Outcome::Committed(result) => {
                self.replay = None;
                self.end_shipped(result).map(|()| CommandTag::new("COMMIT"))
            }
        })
    }

    /// At the end of a query whose implicit block was shipped: the commit's recorded
    /// outcome, when every write replayed and the commit is all that is left.
    pub(super) fn replayed_commit(&mut self) -> Option<Result<(), EngineError>> {
        let replay = self.replay.take()?;
        let mut next = replay.next;
        match (next.pop_front(), next.is_empty()) {
            (Some((_, Outcome::Committed(result))), true) => Some(self.end_shipped(result)),
            _ => None,
        }
    }

    /// The shipped block committed on its owner (or failed to): it ends here.
    fn end_shipped(&mut self, result: Result<(), EngineError>) -> Result<(), EngineError> {
        if let Block::Open(txn) | Block::Failed(txn) =
            std::mem::replace(&mut self.block, Block::Idle)
        {
            self.core.set_session_txn(txn.number, None);
            if result.is_err() {
                self.core.count_tx(|c| c.aborts += 1);
            }
        }
        result
    }
}

/// On the owner: each write through the buffer, absorbed; at the first failure the block
/// stops; else the commit, here.
async fn run_block(
    core: Rc<Core>,
    mut txn: Txn,
    shipped: Vec<Shipped>,
    catalog: Arc<CatalogView>,
) -> (Txn, Vec<Outcome>) {
    let mut outcomes = Vec::with_capacity(shipped.len() + 1);
    for s in shipped {
        match write_one(&core, &mut txn, s, &catalog).await {
            Ok(tag) => outcomes.push(Outcome::Wrote(tag)),
            Err(e) => {
                outcomes.push(Outcome::Failed(e));
                return (txn, outcomes);
            }
        }
    }
    let committed = commit_here(&core, &txn).await;
    outcomes.push(Outcome::Committed(committed));
    (txn, outcomes)
}

/// One write of the block, as `Session::txn_statement` runs a share and absorbs it.
async fn write_one(
    core: &Core,
    txn: &mut Txn,
    s: Shipped,
    catalog: &CatalogView,
) -> Result<CommandTag, EngineError> {
    let name = collection_of(&s.statement).map(|c| c.as_str().to_owned()).unwrap_or_default();
    let rules = catalog.rules(&name);
    let target = TxnTarget {
        writes: txn.writes_of(s.fragment),
        fragment: s.fragment,
        ranges: s.ranges,
        docs: s.docs,
    };
    let mut affected = 0u64;
    for share in core.txn_write(&s.statement, &[target], rules, ShareRead::Block).await? {
        affected += share.intents.len() as u64;
        super::absorb_in_slices(txn, share.fragment, &name, share.reads, share.intents).await?;
    }
    Ok(match &*s.statement {
        Statement::Insert(_) => CommandTag::insert(affected),
        Statement::Update(_) => CommandTag::with_rows("UPDATE", affected),
        _ => CommandTag::with_rows("DELETE", affected),
    })
}

/// COMMIT of a block whose fragment is on this executor (`Session::commit_txn`'s fast path
/// and checks-only path; a shipped block touches one fragment, so never two-phase).
async fn commit_here(core: &Core, txn: &Txn) -> Result<(), EngineError> {
    let batches = txn.batches();
    if batches.len() > 1 {
        return Err(internal("a shipped block over several fragments"));
    }
    let Some((fragment, batch)) = batches.into_iter().next() else {
        core.count_local_commit(false);
        return Ok(());
    };
    crate::engine::txn::within_fragment_limit(fragment, &batch)?;
    let writes = batch.writes() > 0;
    core.commit_fragment(fragment, batch).await?;
    core.count_local_commit(writes);
    Ok(())
}
