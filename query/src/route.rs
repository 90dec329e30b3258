//! Lowering a bound filter to `router::prune::Predicate`, and routing statements.
//!
//! The lowering is sound: it may say less than the filter, never more. Equalities between
//! `id()` or a field and a literal become `IdEq` / `FieldEq`; `IN (…)` becomes an `Or` of
//! equalities; `AND` / `OR` keep their shape; an untyped parameter compared with a field
//! becomes the `Or` of every literal it can equal (the string, the number it reads as, the
//! boolean it spells); everything else (`NOT`, `<`, `LIKE`, `BETWEEN`, `IS NULL`, casts,
//! arithmetic, unbound parameters) becomes `Any`. Our equality is exact (case-sensitive
//! strings, numbers by value) and router's placement lower-cases and treats equal numbers
//! alike, so every document our `=` accepts is on a shard router names.

use router::prune::{Literal as RLiteral, Predicate, RoutePlan, route};
use router::{ShardMap, ShardingConfig};

use crate::expr::{BinaryOp, Expr, Literal};
use crate::plan::{Insert, Statement};
use crate::types::{parse_bool, parse_float};

fn literal(l: &Literal) -> Option<RLiteral> {
    Some(match l {
        Literal::Null => RLiteral::Null,
        Literal::Bool(b) => RLiteral::Bool(*b),
        Literal::Int(i) => RLiteral::Int(*i),
        Literal::Float(f) => RLiteral::Float(*f),
        Literal::Str(s) => RLiteral::Str(s.clone()),
        // An untyped parameter may equal several kinds (see `untyped`), and a JSON container
        // never equals a field under the comparison rule: neither is one literal.
        Literal::Untyped(_) | Literal::Json(_) => return None,
    })
}

/// Every literal an untyped text can equal under the comparison rule: the string itself, the
/// number it reads as (integer and float), the boolean it spells. Non-finite floats are left
/// out: no document holds one.
fn untyped(s: &str) -> Vec<RLiteral> {
    let mut out = vec![RLiteral::Str(s.to_owned())];
    if let Ok(i) = s.trim().parse::<i64>() {
        out.push(RLiteral::Int(i));
    }
    if let Some(f) = parse_float(s).filter(|f| f.is_finite()) {
        out.push(RLiteral::Float(f));
    }
    if let Some(b) = parse_bool(s) {
        out.push(RLiteral::Bool(b));
    }
    out
}

/// One `x = literal` as a predicate, when it is an id or field equality.
fn equality(x: &Expr, l: &Literal) -> Predicate {
    match (x, l) {
        (Expr::Id, Literal::Str(s) | Literal::Untyped(s)) => Predicate::IdEq(s.clone()),
        (Expr::Field(path), Literal::Untyped(s)) if !path.is_root() => Predicate::Or(
            untyped(s)
                .into_iter()
                .map(|value| Predicate::FieldEq { path: path.steps().to_vec(), value })
                .collect(),
        ),
        (Expr::Field(path), l) if !path.is_root() => match literal(l) {
            Some(value) => Predicate::FieldEq { path: path.steps().to_vec(), value },
            None => Predicate::Any,
        },
        _ => Predicate::Any,
    }
}

/// The routing predicate of a filter (`None`: no WHERE, matches everything).
pub fn predicate(filter: Option<&Expr>) -> Predicate {
    match filter {
        None => Predicate::Any,
        Some(e) => lower(e),
    }
}

fn lower(e: &Expr) -> Predicate {
    match e {
        Expr::Binary { op: BinaryOp::And, left, right } => {
            Predicate::And(vec![lower(left), lower(right)])
        }
        Expr::Binary { op: BinaryOp::Or, left, right } => {
            Predicate::Or(vec![lower(left), lower(right)])
        }
        Expr::Binary { op: BinaryOp::Eq, left, right } => match (left.as_ref(), right.as_ref()) {
            (x, Expr::Literal(l)) | (Expr::Literal(l), x) => equality(x, l),
            _ => Predicate::Any,
        },
        Expr::Binary { op: op @ (BinaryOp::Contains | BinaryOp::ContainedBy), left, right } => {
            let (outer, inner) =
                if *op == BinaryOp::Contains { (left, right) } else { (right, left) };
            match (outer.as_ref(), inner.as_ref()) {
                (Expr::Field(path), Expr::Literal(Literal::Json(template))) => {
                    let mut equalities = Vec::new();
                    contained_equalities(path.steps(), template, &mut equalities);
                    if equalities.is_empty() { Predicate::Any } else { Predicate::And(equalities) }
                }
                _ => Predicate::Any,
            }
        }
        Expr::InList { expr, list, negated: false } => {
            let mut alternatives = Vec::with_capacity(list.len());
            for item in list {
                match item {
                    Expr::Literal(l) => alternatives.push(equality(expr, l)),
                    _ => return Predicate::Any,
                }
            }
            Predicate::Or(alternatives)
        }
        _ => Predicate::Any,
    }
}

/// Most field equalities one containment yields (a subset is still sound: it says less).
const CONTAINMENT_EQUALITIES_MAX: usize = 64;

/// The field equalities `field @> template` implies: a scalar reached through the template's
/// objects is what the document holds at that path (containment compares scalars as `=`
/// does, below the top level an array never contains a bare scalar). Arrays and `null`s say
/// nothing here.
fn contained_equalities(base: &[String], template: &serde_json::Value, out: &mut Vec<Predicate>) {
    let serde_json::Value::Object(members) = template else { return };
    for (key, value) in members {
        if out.len() >= CONTAINMENT_EQUALITIES_MAX {
            return;
        }
        let mut path = base.to_vec();
        path.push(key.clone());
        match value {
            serde_json::Value::Object(_) => contained_equalities(&path, value, out),
            serde_json::Value::Null | serde_json::Value::Array(_) => {}
            scalar => {
                if let Some(value) = literal(&Literal::from_json(scalar.clone())) {
                    out.push(Predicate::FieldEq { path, value });
                }
            }
        }
    }
}

/// The routing predicate of an INSERT: the union of its rows' ids. A row whose id is not a
/// text literal, or ends with `$` (placed by content), makes it `Any`.
fn insert_predicate(insert: &Insert) -> Predicate {
    let mut ids = Vec::with_capacity(insert.rows.len());
    for row in &insert.rows {
        match &row.id {
            Expr::Literal(Literal::Str(s) | Literal::Untyped(s)) if !s.ends_with('$') => {
                ids.push(Predicate::IdEq(s.clone()))
            }
            _ => return Predicate::Any,
        }
    }
    Predicate::Or(ids)
}

/// The routing predicate of a data statement (SELECT, INSERT, UPDATE, DELETE, or the
/// statement inside EXPLAIN); `None` for statements that read no documents.
pub fn statement_predicate(stmt: &Statement) -> Option<Predicate> {
    match stmt {
        Statement::Select(s) if s.collection.is_some() => Some(predicate(s.filter.as_ref())),
        Statement::Update(u) => Some(predicate(u.filter.as_ref())),
        Statement::Delete(d) => Some(predicate(d.filter.as_ref())),
        Statement::Insert(i) => Some(insert_predicate(i)),
        Statement::VerifySharding { .. } => Some(Predicate::Any),
        Statement::Explain { inner, .. } => statement_predicate(inner),
        _ => None,
    }
}

/// Where a bound data statement goes, given its collection's content configuration and the
/// shard map; `None` for statements that read no documents.
pub fn route_statement(
    stmt: &Statement,
    sharding: Option<&ShardingConfig>,
    map: &ShardMap,
) -> Option<RoutePlan> {
    statement_predicate(stmt).map(|p| route(&p, sharding, map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use router::prune::Opcode;

    fn filter(sql: &str) -> Predicate {
        let stmt = crate::parse(sql).expect("parses").remove(0);
        statement_predicate(&stmt).expect("data statement")
    }

    // Checks the lowering keeps equalities and IN, and turns everything else into Any.
    #[test]
    fn lowering() {
        assert_eq!(filter("SELECT * FROM c WHERE id() = 'a/1'"), Predicate::IdEq("a/1".into()));
        assert_eq!(
            filter("SELECT * FROM c WHERE \"Customer\" = 'c/1'"),
            Predicate::FieldEq {
                path: vec!["Customer".into()],
                value: RLiteral::Str("c/1".into())
            }
        );
        assert_eq!(
            filter("SELECT * FROM c WHERE id() IN ('a', 'b')"),
            Predicate::Or(vec![Predicate::IdEq("a".into()), Predicate::IdEq("b".into())])
        );
        assert_eq!(filter("SELECT * FROM c WHERE NOT id() = 'a'"), Predicate::Any);
        assert_eq!(filter("SELECT * FROM c WHERE a < 3"), Predicate::Any);
        assert_eq!(filter("SELECT * FROM c WHERE id() LIKE 'a%'"), Predicate::Any);
        assert_eq!(filter("SELECT * FROM c WHERE id() = $1"), Predicate::Any);
        assert_eq!(filter("SELECT * FROM c"), Predicate::Any);
        assert_eq!(
            filter("SELECT * FROM c WHERE a.b = 2 AND x = 1.5"),
            Predicate::And(vec![
                Predicate::FieldEq { path: vec!["a".into(), "b".into()], value: RLiteral::Int(2) },
                Predicate::FieldEq { path: vec!["x".into()], value: RLiteral::Float(1.5) },
            ])
        );
        assert_eq!(filter("INSERT INTO c VALUES ('x$', '{}')"), Predicate::Any);
        let prepared = crate::parse("SELECT * FROM c WHERE n = $1").expect("parses").remove(0);
        let bound = crate::bind(&prepared, &[crate::Datum::Text("1".into())]).expect("binds");
        let field = |value| Predicate::FieldEq { path: vec!["n".into()], value };
        assert_eq!(
            statement_predicate(&bound),
            Some(Predicate::Or(vec![
                field(RLiteral::Str("1".into())),
                field(RLiteral::Int(1)),
                field(RLiteral::Float(1.0)),
                field(RLiteral::Bool(true)),
            ]))
        );
    }

    // Checks an id equality routes to one fragment and a range scan to all of them.
    #[test]
    fn routing() {
        let map = ShardMap::even(4, &[router::Owner::new(0, 0)]).expect("map");
        let stmt =
            crate::parse("SELECT * FROM c WHERE id() = 'orders/1-A'").expect("parses").remove(0);
        let plan = route_statement(&stmt, None, &map).expect("routed");
        assert_eq!(plan.opcode, Opcode::Single);
        assert_eq!(plan.fragments.len(), 1);
        let stmt = crate::parse("SELECT * FROM c WHERE a > 1").expect("parses").remove(0);
        let plan = route_statement(&stmt, None, &map).expect("routed");
        assert_eq!(plan.opcode, Opcode::Scatter);
        assert_eq!(plan.fragments.len(), 4);
        assert!(route_statement(&Statement::Begin, None, &map).is_none());
    }
}
