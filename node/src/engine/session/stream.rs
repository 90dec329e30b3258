//! A plain SELECT (and `COPY … TO STDOUT` of one) outside a block, sent one fragment at a
//! time: rows without aggregates, ORDER BY, LIMIT or OFFSET need nothing from the other
//! fragments, so each fragment's rows go to the client as soon as that fragment answered
//! while the next one is being read. Memory holds at most two fragments' rows instead of the
//! whole result, and `RESULT_ROWS_MAX` bounds each fragment's rows rather than the total, so
//! a collection of any size can be exported. Each fragment is read at its own instant, as
//! every SELECT over several fragments outside a block already is.
//!
//! A shard-map change (a fragment moved) found before the first row went out is retried as
//! usual; after it, the statement fails (rows cannot be taken back): run it again.

use std::sync::Arc;

use query::Datum;
use query::Partial;
use query::plan::{Select, SelectShape, Statement};

use super::{Block, Session, bad_reply, internal, reply_error, wire_targets};
use crate::cluster::forward::{self, Reply};
use crate::cluster::region::RegionError;
use crate::engine::core::{Core, Target};
use crate::engine::error::EngineError;
use crate::runtime::{ExecutorIndex, Mesh};

/// One fragment's rows, being read elsewhere (`Err(current)`: the owner's map is newer, at
/// `current`).
type Pending = glommio::Task<Result<Result<Vec<Partial>, u64>, EngineError>>;

/// Whether `select` streams: plain rows of a collection, nothing that needs every fragment's
/// rows before the first can be sent.
pub(super) fn streamable(select: &Select) -> bool {
    select.collection.is_some()
        && matches!(select.shape, SelectShape::Rows { .. })
        && select.order_by.is_empty()
        && select.limit.is_none()
        && select.offset.is_none()
}

/// One fragment's share of the statement, not started yet.
enum Share {
    /// On this executor: read when its turn comes.
    Here(Target),
    /// On another executor of this node.
    Executor(ExecutorIndex, Target),
    /// On another node, with its forwarded request.
    Node(u32, forward::Request),
}

/// One fragment's share, started.
enum Job {
    /// On this executor, read when awaited.
    Here(Target),
    /// Elsewhere, running meanwhile.
    Asked(Pending),
}

impl Session {
    /// Whether `statement` runs through [`Session::select_streamed`].
    pub(super) fn streams(&self, statement: &Statement) -> bool {
        matches!(self.block, Block::Idle)
            && matches!(statement, Statement::Select(s) if streamable(s))
    }

    /// A SELECT's rows handed to `emit`: fragment by fragment when it streams, else once,
    /// whole (through the open block, if any); returns how many rows went out. What SELECT
    /// and COPY TO both run.
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

    /// Runs a streaming SELECT, handing each fragment's rows to `emit` in turn; returns how
    /// many rows went out.
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
                    let share = forward::Share::Select { targets: wire_targets(&[target]) };
                    let request = self.request(routed.epoch, catalog.version(), share)?;
                    others.push(Share::Node(node.0, request));
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
            let mut next = shares.next().map(|s| self.start(statement, s));
            while let Some(job) = next.take() {
                // The next fragment is being read (when it is elsewhere) while this one is
                // read here or its rows are sent.
                next = shares.next().map(|s| self.start(statement, s));
                let partials = match job {
                    Job::Here(target) => self.core.select(select, &[target])?.0,
                    Job::Asked(pending) => match pending.await? {
                        Ok(p) => p,
                        Err(current) if sent == 0 => {
                            self.refresh(routed.epoch, current, &mut attempt).await?;
                            continue 'plan;
                        }
                        Err(_) => {
                            return Err(RegionError::Forward {
                                node: 0,
                                reason: "the shard map changed while the rows were being sent; \
                                         run the statement again"
                                    .to_owned(),
                            }
                            .into());
                        }
                    },
                };
                let rows = query::merge(select, partials)?.rows;
                sent += rows.len() as u64;
                emit(rows).await?;
            }
            return Ok(sent);
        }
    }

    /// Starts a share: another executor's or node's runs as a task from now on.
    fn start(&self, statement: &Arc<Statement>, share: Share) -> Job {
        match share {
            Share::Here(target) => Job::Here(target),
            Share::Executor(executor, target) => Job::Asked(glommio::spawn_local(ask_executor(
                self.ctx.mesh.clone(),
                executor,
                Arc::clone(statement),
                target,
            ))),
            Share::Node(node, request) => Job::Asked(glommio::spawn_local(ask_node(node, request))),
        }
    }
}

/// One fragment's share on another executor of this node.
async fn ask_executor(
    mesh: Mesh<Core>,
    executor: ExecutorIndex,
    statement: Arc<Statement>,
    target: Target,
) -> Result<Result<Vec<Partial>, u64>, EngineError> {
    let answer = mesh
        .call(executor, move |core| async move {
            match &*statement {
                Statement::Select(s) => core.select(s, &[target]).map(|(p, _)| p),
                _ => Err(internal("select share of a non-SELECT")),
            }
        })
        .await?;
    answer.map(Ok)
}

/// One fragment's share on another node.
async fn ask_node(
    node: u32,
    request: forward::Request,
) -> Result<Result<Vec<Partial>, u64>, EngineError> {
    match forward::call(node, request, true).await? {
        Reply::Partials(p) => forward::partials_from_wire(p).map(Ok).map_err(bad_reply),
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
