//! A plain SELECT (and `COPY … TO STDOUT` of one) outside a block, sent page by page: rows
//! without aggregates, ORDER BY, LIMIT or OFFSET need nothing from the other fragments, so
//! each fragment is read in pages (`query::execute_select_page`: at most 1,024 rows, 4 MiB,
//! 16,384 documents read), and each page goes to the client as soon as it is read while the
//! next one is being read (on another executor or node; this executor reads its own pages
//! between sends). Memory holds a few pages instead of the whole result or a whole fragment,
//! no read holds an executor longer than a page, and a collection of any size can be
//! exported. Each page is read at its own instant, as every SELECT over several fragments
//! outside a block already read each fragment at its own: a document is sent at most once
//! (pages follow the scan's fixed order), and one written meanwhile is sent if the scan has
//! not passed its place yet.
//!
//! A shard-map change (a fragment moved) found before the first row went out is retried as
//! usual; after it, the statement fails (rows cannot be taken back): run it again.

use std::sync::Arc;

use query::plan::{Select, SelectShape, Statement};
use query::{Datum, Partial, ScanPos};

use super::{Block, Session, bad_reply, internal, reply_error, wire_targets};
use crate::cluster::forward::{self, Reply, WireTarget};
use crate::cluster::region::RegionError;
use crate::engine::core::{Core, Target, between_slices};
use crate::engine::error::EngineError;
use crate::runtime::{ExecutorIndex, Mesh};

// EXPLAIN says "page by page (1,024 rows or 4 MiB)".
const _: () = assert!(
    query::limits::STREAM_PAGE_ROWS == 1_024 && query::limits::STREAM_PAGE_BYTES == 4 << 20
);

/// A page and where the next starts (`None`: its fragment is done).
type Page = (Partial, Option<ScanPos>);

/// One page, being read elsewhere (`Err(current)`: the owner's map is newer, at `current`).
type Pending = glommio::Task<Result<Result<Page, u64>, EngineError>>;

/// Whether `select` streams: plain rows of a collection, nothing that needs every fragment's
/// rows before the first can be sent.
pub(super) fn streamable(select: &Select) -> bool {
    select.collection.is_some()
        && matches!(select.shape, SelectShape::Rows { .. })
        && select.order_by.is_empty()
        && select.limit.is_none()
        && select.offset.is_none()
}

/// One fragment's share of the statement.
enum Share {
    /// On this executor: each page read when its turn comes.
    Here(Target),
    /// On another executor of this node.
    Executor(ExecutorIndex, Target),
    /// On another node, with the map epoch and catalog version it was routed by.
    Node { node: u32, target: WireTarget, epoch: u64, catalog: u64 },
}

/// One page of a share, started.
enum Job {
    /// On this executor, read when awaited.
    Here(Target, Option<ScanPos>),
    /// Elsewhere, running meanwhile.
    Asked(Pending),
}

impl Session {
    /// Whether `statement` runs through [`Session::select_streamed`].
    pub(super) fn streams(&self, statement: &Statement) -> bool {
        matches!(self.block, Block::Idle)
            && matches!(statement, Statement::Select(s) if streamable(s))
    }

    /// A SELECT's rows handed to `emit`: page by page when it streams, else once, whole
    /// (through the open block, if any); returns how many rows went out. What SELECT and
    /// COPY TO both run.
    pub(super) async fn select_each(
        &mut self,
        statement: &Arc<Statement>,
        mut emit: impl AsyncFnMut(Vec<Vec<Datum>>) -> Result<(), EngineError>,
    ) -> Result<u64, EngineError> {
        if self.streams(statement) {
            return self.select_streamed(statement, emit).await;
        }
        let rows = self.select_rows(statement).await?;
        let n = rows.len() as u64;
        emit(rows).await?;
        Ok(n)
    }

    /// Runs a streaming SELECT, handing each page's rows to `emit` in turn; returns how many
    /// rows went out.
    async fn select_streamed(
        &self,
        statement: &Arc<Statement>,
        mut emit: impl AsyncFnMut(Vec<Vec<Datum>>) -> Result<(), EngineError>,
    ) -> Result<u64, EngineError> {
        let Statement::Select(select) = &**statement else {
            return Err(internal("select_streamed() of a non-SELECT"));
        };
        let mut attempt = 1;
        let mut sent = 0u64;
        'plan: loop {
            let catalog = self.core.shared().catalog();
            let Some(routed) = self.route_all(statement, &catalog)? else {
                return Ok(0);
            };
            if self.located(&routed.plan.fragments).await? {
                continue;
            }
            let here = self.core.index();
            let mut mine = Vec::new();
            let mut others = Vec::new();
            for (executor, targets) in routed.local {
                for target in targets {
                    if executor == here {
                        mine.push(Share::Here(target));
                    } else {
                        others.push(Share::Executor(executor, target));
                    }
                }
            }
            for (node, targets) in routed.remote {
                for target in targets {
                    let Some(target) = wire_targets(std::slice::from_ref(&target)).pop() else {
                        continue;
                    };
                    let (epoch, catalog) = (routed.epoch, catalog.version());
                    others.push(Share::Node { node: node.0, target, epoch, catalog });
                }
            }
            // Alternating, this executor's first: while one of its fragments is read here, the
            // next fragment elsewhere is already being read there.
            let mut others = others.into_iter();
            let mut shares = Vec::with_capacity(mine.len() + others.len());
            for share in mine {
                shares.push(share);
                shares.extend(others.next());
            }
            shares.extend(others);
            let mut shares = shares.into_iter();
            let mut upcoming = match shares.next() {
                Some(s) => Some((self.start(statement, &s, None)?, s)),
                None => None,
            };
            while let Some((first, share)) = upcoming.take() {
                // The next fragment's first page is being read (when it is elsewhere) while
                // this one's pages are read and sent.
                upcoming = match shares.next() {
                    Some(s) => Some((self.start(statement, &s, None)?, s)),
                    None => None,
                };
                let mut job = Some(first);
                while let Some(current) = job.take() {
                    let (partial, next) = match current {
                        Job::Here(target, after) => {
                            // Sending a page may not wait at all: give the executor's other
                            // work its turn before reading the next one here.
                            if after.is_some() {
                                between_slices().await;
                            }
                            self.core.select_page(select, &target, after.as_ref())?
                        }
                        Job::Asked(pending) => match pending.await? {
                            Ok(page) => page,
                            Err(current) if sent == 0 => {
                                self.refresh(routed.epoch, current, &mut attempt).await?;
                                continue 'plan;
                            }
                            Err(_) => return Err(RegionError::MapChangedMidStream.into()),
                        },
                    };
                    // The fragment's next page is being read (elsewhere) while this one is sent.
                    if let Some(after) = next {
                        job = Some(self.start(statement, &share, Some(after))?);
                    }
                    let rows = query::merge(select, vec![partial])?.rows;
                    sent += rows.len() as u64;
                    emit(rows).await?;
                }
            }
            return Ok(sent);
        }
    }

    /// Starts a page of a share: another executor's or node's runs as a task from now on.
    fn start(
        &self,
        statement: &Arc<Statement>,
        share: &Share,
        after: Option<ScanPos>,
    ) -> Result<Job, EngineError> {
        Ok(match share {
            Share::Here(target) => Job::Here(target.clone(), after),
            Share::Executor(executor, target) => Job::Asked(glommio::spawn_local(ask_executor(
                self.ctx.mesh.clone(),
                *executor,
                Arc::clone(statement),
                target.clone(),
                after,
            ))),
            Share::Node { node, target, epoch, catalog } => {
                let share = forward::Share::SelectPage {
                    target: target.clone(),
                    after: after.as_ref().map(forward::pos_to_wire),
                };
                let request = self.request(*epoch, *catalog, share)?;
                Job::Asked(glommio::spawn_local(ask_node(*node, request)))
            }
        })
    }
}

/// One page of a fragment on another executor of this node.
async fn ask_executor(
    mesh: Mesh<Core>,
    executor: ExecutorIndex,
    statement: Arc<Statement>,
    target: Target,
    after: Option<ScanPos>,
) -> Result<Result<Page, u64>, EngineError> {
    let answer = mesh
        .call(executor, move |core| async move {
            match &*statement {
                Statement::Select(s) => core.select_page(s, &target, after.as_ref()),
                _ => Err(internal("select share of a non-SELECT")),
            }
        })
        .await?;
    answer.map(Ok)
}

/// One page of a fragment on another node.
async fn ask_node(node: u32, request: forward::Request) -> Result<Result<Page, u64>, EngineError> {
    match forward::call(node, request, true).await? {
        Reply::Page { partial, next } => {
            let partial = forward::partials_from_wire(vec![partial])
                .map_err(bad_reply)?
                .pop()
                .ok_or_else(|| bad_reply("a page without rows".to_owned()))?;
            let next = next.map(forward::pos_from_wire).transpose().map_err(bad_reply)?;
            Ok(Ok((partial, next)))
        }
        other => reply_error(other).map(Err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(sql: &str) -> Select {
        match query::parse(sql).expect("parses").remove(0) {
            Statement::Select(s) => s,
            other => panic!("not a select: {other:?}"),
        }
    }

    // Checks which SELECTs stream: plain rows of a collection (with a filter, any output
    // expressions); not aggregates, DISTINCT, ORDER BY, LIMIT, OFFSET or a SELECT without
    // FROM, which all need the whole result (or have no fragments).
    #[test]
    fn unit_streamable_selects() {
        for sql in [
            "SELECT * FROM c",
            "SELECT id(), a::int8 + 1 FROM c WHERE b = 'x'",
            "SELECT doc() FROM c WHERE id() IN ('a', 'b')",
        ] {
            assert!(streamable(&select(sql)), "{sql}");
        }
        for sql in [
            "SELECT count(*) FROM c",
            "SELECT DISTINCT a FROM c",
            "SELECT a FROM c GROUP BY a",
            "SELECT * FROM c ORDER BY a",
            "SELECT * FROM c LIMIT 10",
            "SELECT * FROM c OFFSET 1",
            "SELECT 1",
        ] {
            assert!(!streamable(&select(sql)), "{sql}");
        }
    }
}
