//! EXPLAIN rendering: one text column, `QUERY PLAN`, one line per row, as PostgreSQL does.
//!
//! ```text
//! Select on orders
//!   Route: Single
//!   Rule: id() = 'orders/1-A' fixes shard 151326
//!   Fragments: $0
//!   Shards: [151326, 151327)
//!   Filter: (id() = 'orders/1-A')
//! ```
//! `EXPLAIN ANALYZE` adds one line per fragment from [`FragmentAnalysis`], which node fills
//! in while it runs the statement (rows scanned and returned, wall time on the executor).

use std::time::Duration;

use router::FragmentId;
use router::prune::RoutePlan;

use crate::plan::{
    Count, OnConflict, OrderKey, OrderTarget, OutputColumn, Select, SelectShape, Statement,
};
use crate::types::SqlType;

/// What one fragment did for `EXPLAIN ANALYZE`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FragmentAnalysis {
    /// The fragment.
    pub fragment: FragmentId,
    /// Documents read.
    pub rows_scanned: u64,
    /// Rows (or groups, or write intents) it sent back.
    pub rows_returned: u64,
    /// Time spent on its executor.
    pub elapsed: Duration,
}

/// The result columns of EXPLAIN.
pub fn explain_columns() -> Vec<OutputColumn> {
    vec![OutputColumn { name: "QUERY PLAN".to_owned(), ty: SqlType::Text }]
}

fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

fn count(c: Option<Count>) -> Option<String> {
    match c {
        None => None,
        Some(Count::Value(n)) => Some(n.to_string()),
        Some(Count::Param(i)) => Some(format!("${}", i + 1)),
    }
}

fn order_text(select: &Select, key: &OrderKey) -> String {
    let target = match &key.target {
        OrderTarget::Output(i) => {
            select.columns().get(*i).map_or_else(|| format!("column {}", i + 1), |c| c.name.clone())
        }
        OrderTarget::Expr(e) => e.to_string(),
    };
    format!(
        "{target} {} NULLS {}",
        if key.descending { "DESC" } else { "ASC" },
        if key.nulls_first { "FIRST" } else { "LAST" }
    )
}

fn statement_lines(stmt: &Statement, lines: &mut Vec<String>) {
    match stmt {
        Statement::Select(s) => {
            match &s.collection {
                Some(c) => lines.push(format!("Select on {c}")),
                None => lines.push("Result (no collection)".to_owned()),
            }
            if let Some(f) = &s.filter {
                lines.push(format!("  Filter: {f}"));
            }
            match &s.shape {
                SelectShape::Rows { outputs } => lines.push(format!(
                    "  Output: {}",
                    outputs
                        .iter()
                        .map(|o| format!("{} {}", o.expr, o.column.ty))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                SelectShape::Aggregate { group_by, aggregates, outputs, having } => {
                    // Outputs, HAVING and ORDER BY name each group's values key1… and agg1….
                    if !group_by.is_empty() {
                        let keys: Vec<String> = group_by
                            .iter()
                            .enumerate()
                            .map(|(i, g)| format!("key{} = {g}", i + 1))
                            .collect();
                        lines.push(format!("  Group by: {}", keys.join(", ")));
                    }
                    let aggs: Vec<String> = aggregates
                        .iter()
                        .enumerate()
                        .map(|(i, a)| {
                            let distinct = if a.func.is_distinct() { "DISTINCT " } else { "" };
                            let second =
                                a.arg2.as_ref().map(|e| format!(", {e}")).unwrap_or_default();
                            let order = if a.order_by.is_empty() {
                                String::new()
                            } else {
                                let keys: Vec<String> =
                                    a.order_by.iter().map(|k| order_text(s, k)).collect();
                                format!(" ORDER BY {}", keys.join(", "))
                            };
                            let call = match &a.arg {
                                None => format!("agg{} = {}(*)", i + 1, a.func.name()),
                                Some(arg) => format!(
                                    "agg{} = {}({distinct}{arg}{second}{order})",
                                    i + 1,
                                    a.func.name()
                                ),
                            };
                            match &a.filter {
                                Some(f) => format!("{call} FILTER (WHERE {f})"),
                                None => call,
                            }
                        })
                        .collect();
                    lines.push(format!(
                        "  Aggregates: {} (partial per fragment, merged)",
                        aggs.join(", ")
                    ));
                    if let Some(h) = having {
                        lines.push(format!("  Having: {h} (at merge)"));
                    }
                    let outs: Vec<String> =
                        outputs.iter().map(|o| format!("{} = {}", o.column.name, o.expr)).collect();
                    lines.push(format!("  Output: {}", outs.join(", ")));
                }
            }
            if !s.order_by.is_empty() {
                let keys: Vec<String> = s.order_by.iter().map(|k| order_text(s, k)).collect();
                let top_k = s.limit.is_some() && matches!(s.shape, SelectShape::Rows { .. });
                let how = if top_k { "top-k per fragment, merged" } else { "sorted at merge" };
                lines.push(format!("  Order by: {} ({how})", keys.join(", ")));
            }
            if let Some(l) = count(s.limit) {
                lines.push(format!("  Limit: {l}"));
            }
            if let Some(o) = count(s.offset) {
                lines.push(format!("  Offset: {o}"));
            }
        }
        Statement::Insert(i) => {
            lines.push(format!("Insert on {} ({} rows)", i.collection, i.rows.len()));
            match &i.on_conflict {
                OnConflict::Error => {}
                OnConflict::DoNothing => lines.push("  On conflict (id): do nothing".to_owned()),
                OnConflict::DoUpdate { assignments, .. } => lines.push(format!(
                    "  On conflict (id): update {}",
                    assignments.iter().map(|a| a.path.to_string()).collect::<Vec<_>>().join(", ")
                )),
            }
        }
        Statement::Update(u) => {
            lines.push(format!("Update on {}", u.collection));
            lines.push(format!(
                "  Set: {}",
                u.assignments
                    .iter()
                    .map(crate::plan::Assignment::shown)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if let Some(f) = &u.filter {
                lines.push(format!("  Filter: {f}"));
            }
        }
        Statement::Delete(d) => {
            lines.push(format!("Delete on {}", d.collection));
            if let Some(f) = &d.filter {
                lines.push(format!("  Filter: {f}"));
            }
        }
        Statement::VerifySharding { collection } => {
            lines.push(format!("Verify sharding of {collection}"))
        }
        Statement::Explain { inner, .. } | Statement::CopyTo { query: inner, .. } => {
            statement_lines(inner, lines)
        }
        Statement::CopyFrom { collection, .. } => {
            lines.push(format!("Copy from the client into {collection}"))
        }
        Statement::Truncate { collections } => {
            for collection in collections {
                lines.push(format!("Truncate {collection}"));
            }
        }
        Statement::DropCollections { collections, .. } => {
            for collection in collections {
                lines.push(format!("Drop {collection}"));
            }
        }
        Statement::CreateCollection { collection, .. } => {
            lines.push(format!("Create collection {collection}"))
        }
        Statement::AlterSharding { collection, .. } => {
            lines.push(format!("Alter sharding of {collection}"))
        }
        Statement::ShowFragments => lines.push("Show fragments".to_owned()),
        Statement::ShowCollections => lines.push("Show collections".to_owned()),
        Statement::ShowSharding { .. } => lines.push("Show sharding".to_owned()),
        Statement::Show { name } => lines.push(format!("Show {name}")),
        Statement::Set { name, .. } => lines.push(format!("Set {name}")),
        Statement::Reset { name } => {
            lines.push(format!("Reset {}", name.as_deref().unwrap_or("all")))
        }
        Statement::Deallocate { name } => {
            lines.push(format!("Deallocate {}", name.as_deref().unwrap_or("all")))
        }
        Statement::DiscardAll => lines.push("Discard all".to_owned()),
        Statement::MoveFragment { fragment, node } => {
            lines.push(format!("Move fragment ${fragment} to node {node}"))
        }
        Statement::RemoveNode { node } => {
            lines.push(format!("Remove node {node} from the cluster"))
        }
        Statement::SplitFragment { fragment, at: Some(at) } => {
            lines.push(format!("Split fragment ${fragment} at shard {at}"))
        }
        Statement::SplitFragment { fragment, at: None } => {
            lines.push(format!("Split fragment ${fragment} at the middle of its range"))
        }
        Statement::MergeFragments { left, right } => {
            lines.push(format!("Merge fragment ${left} with ${right}"))
        }
        Statement::Begin => lines.push("Begin".to_owned()),
        Statement::Commit => lines.push("Commit".to_owned()),
        Statement::Rollback => lines.push("Rollback".to_owned()),
    }
}

/// The EXPLAIN lines for a statement (the one inside `Statement::Explain`, or any), with its
/// route when it reads documents, and the per-fragment analysis for `EXPLAIN ANALYZE`.
pub fn explain(
    stmt: &Statement,
    route: Option<&RoutePlan>,
    analysis: Option<&[FragmentAnalysis]>,
) -> Vec<String> {
    let mut lines = Vec::new();
    statement_lines(stmt, &mut lines);
    if let Some(r) = route {
        // Insert the route right after the heading line.
        let at = 1.min(lines.len());
        let mut route_lines = vec![
            format!("  Route: {}", r.opcode),
            format!("  Rule: {}", r.rule),
            format!(
                "  Fragments: {}",
                if r.fragments.is_empty() {
                    "none (matches nothing)".to_owned()
                } else {
                    join(&r.fragments)
                }
            ),
            format!("  Shards: {}", join(&r.shards)),
        ];
        route_lines.reverse();
        for l in route_lines {
            lines.insert(at, l);
        }
    }
    if let Some(fragments) = analysis {
        let mut scanned = 0u64;
        let mut returned = 0u64;
        let mut total = Duration::ZERO;
        for f in fragments {
            lines.push(format!(
                "  Fragment {}: rows scanned={} returned={} time={:.3} ms",
                f.fragment,
                f.rows_scanned,
                f.rows_returned,
                f.elapsed.as_secs_f64() * 1e3
            ));
            scanned = scanned.saturating_add(f.rows_scanned);
            returned = returned.saturating_add(f.rows_returned);
            total = total.saturating_add(f.elapsed);
        }
        lines.push(format!(
            "  Total: fragments={} rows scanned={scanned} returned={returned} time={:.3} ms (summed over executors)",
            fragments.len(),
            total.as_secs_f64() * 1e3
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use router::{Owner, ShardMap};

    // Checks EXPLAIN shows the opcode, rule, fragments and shard ranges, and ANALYZE lines.
    #[test]
    fn renders_route_and_analysis() {
        let map = ShardMap::even(4, &[Owner::new(0, 0)]).expect("map");
        let stmt = crate::parse("EXPLAIN ANALYZE SELECT * FROM orders WHERE id() = 'orders/1-A'")
            .expect("parses")
            .remove(0);
        let Statement::Explain { analyze: true, inner } = &stmt else { panic!("explain") };
        let route = crate::route::route_statement(inner, None, &map).expect("routed");
        let analysis = [FragmentAnalysis {
            fragment: route.fragments[0],
            rows_scanned: 1,
            rows_returned: 1,
            elapsed: Duration::from_micros(1500),
        }];
        let lines = explain(inner, Some(&route), Some(&analysis));
        assert_eq!(lines[0], "Select on orders");
        assert_eq!(lines[1], "  Route: Single");
        assert_eq!(lines[2], "  Rule: id() = 'orders/1-A' fixes shard 151326");
        assert_eq!(lines[3], "  Fragments: $0");
        assert_eq!(lines[4], "  Shards: [151326, 151327)");
        assert!(
            lines.iter().any(|l| l == "  Fragment $0: rows scanned=1 returned=1 time=1.500 ms"),
            "{lines:#?}"
        );
        let scatter = crate::parse(
            "SELECT g, count(*) FROM c WHERE a > 1 GROUP BY g ORDER BY 2 DESC LIMIT 3",
        )
        .expect("parses")
        .remove(0);
        let route = crate::route::route_statement(&scatter, None, &map).expect("routed");
        let lines = explain(&scatter, Some(&route), None);
        assert_eq!(lines[1], "  Route: Scatter");
        assert_eq!(lines[3], "  Fragments: $0, $1, $2, $3");
        assert!(
            lines.iter().any(|l| l == "  Order by: count DESC NULLS FIRST (sorted at merge)"),
            "{lines:#?}"
        );
    }
}
