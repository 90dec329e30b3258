//! Parameter types and binding: a prepared plan keeps `$n` placeholders; [`bind`] replaces
//! them with literals without parsing SQL again.
//!
//! **Parameter types** are inferred from context: compared with `id()`, in `LIKE`, or as an
//! INSERT id: `text`; in a cast: the cast's type; compared with a literal: the literal's type;
//! `LIMIT`/`OFFSET`: `int8`; the document of `VALUES ($1, $2)`: `json`. Elsewhere (compared
//! with a document field, say) the type is left unspecified (`None`); node reports such a
//! parameter as `text`, and a text value bound there is *untyped*: compared with a field it
//! takes the field's kind per document (`age = $1` with `'30'` matches the number 30, and
//! `name = $1` the string), as PostgreSQL does for literals of unknown type.

use crate::error::PlanError;
use crate::expr::{BinaryOp, Expr, Literal};
use crate::plan::{
    Assignment, Count, InsertBody, OnConflict, OrderTarget, Output, Select, SelectShape, Statement,
};
use crate::types::{Datum, SqlType};

/// The inferred type of each parameter `$1..$n` (`None`: unspecified, see the module docs).
/// The length is the highest parameter number used.
pub fn param_types(stmt: &Statement) -> Vec<Option<SqlType>> {
    let mut types: Vec<Option<SqlType>> = Vec::new();
    let mut note = |index: usize, ty: Option<SqlType>| {
        if types.len() <= index {
            types.resize(index + 1, None);
        }
        if let (Some(slot), Some(ty)) = (types.get_mut(index), ty)
            && slot.is_none()
        {
            *slot = Some(ty);
        }
    };
    visit_statement(stmt, &mut |e, hint| infer(e, hint, &mut note));
    types
}

/// The context type an expression position gives a bare parameter in it.
type Hint = Option<SqlType>;

/// Calls `visit` with every top-level expression of the statement and the type its position
/// implies for a bare parameter; LIMIT and OFFSET parameters are passed as `Expr::Param`.
pub(crate) fn visit_statement(stmt: &Statement, visit: &mut dyn FnMut(&Expr, Hint)) {
    match stmt {
        Statement::Select(s) => visit_select(s, visit),
        Statement::Insert(i) => {
            for row in &i.rows {
                visit(&row.id, Some(SqlType::Text));
                match &row.body {
                    InsertBody::Document(d) => visit(d, Some(SqlType::Json)),
                    InsertBody::Fields(fields) => fields.iter().for_each(|(_, e)| visit(e, None)),
                }
            }
            if let OnConflict::DoUpdate { assignments, filter } = &i.on_conflict {
                assignments.iter().filter_map(|a| a.expr.as_ref()).for_each(|e| visit(e, None));
                if let Some(f) = filter {
                    visit(f, Some(SqlType::Bool));
                }
            }
            i.returning.iter().for_each(|o| visit(&o.expr, None));
        }
        Statement::Update(u) => {
            u.assignments.iter().filter_map(|a| a.expr.as_ref()).for_each(|e| visit(e, None));
            if let Some(f) = &u.filter {
                visit(f, Some(SqlType::Bool));
            }
            u.returning.iter().for_each(|o| visit(&o.expr, None));
        }
        Statement::Delete(d) => {
            if let Some(f) = &d.filter {
                visit(f, Some(SqlType::Bool));
            }
            d.returning.iter().for_each(|o| visit(&o.expr, None));
        }
        Statement::Explain { inner, .. } => visit_statement(inner, visit),
        _ => {}
    }
}

fn visit_select(s: &Select, visit: &mut dyn FnMut(&Expr, Hint)) {
    if let Some(f) = &s.filter {
        visit(f, Some(SqlType::Bool));
    }
    match &s.shape {
        SelectShape::Rows { outputs } => outputs.iter().for_each(|o| visit(&o.expr, None)),
        SelectShape::Aggregate { group_by, aggregates, outputs, having } => {
            group_by.iter().for_each(|g| visit(g, None));
            for a in aggregates {
                a.arg.iter().chain(&a.arg2).for_each(|e| visit(e, None));
                for k in &a.order_by {
                    if let OrderTarget::Expr(e) = &k.target {
                        visit(e, None);
                    }
                }
            }
            let filters = aggregates.iter().filter_map(|a| a.filter.as_ref());
            filters.for_each(|f| visit(f, Some(SqlType::Bool)));
            outputs.iter().for_each(|o| visit(&o.expr, None));
            if let Some(h) = having {
                visit(h, Some(SqlType::Bool));
            }
        }
    }
    for key in &s.order_by {
        if let OrderTarget::Expr(e) = &key.target {
            visit(e, None);
        }
    }
    for count in [s.limit, s.offset].into_iter().flatten() {
        if let Count::Param(i) = count {
            visit(&Expr::Param(i), Some(SqlType::Int8));
        }
    }
}

/// The type a sibling expression gives a parameter compared with it.
fn sibling_type(e: &Expr) -> Hint {
    match e {
        Expr::Id => Some(SqlType::Text),
        Expr::Cast { to, .. } => Some(*to),
        Expr::Literal(Literal::Str(_)) => Some(SqlType::Text),
        Expr::Literal(Literal::Int(_)) => Some(SqlType::Int8),
        Expr::Literal(Literal::Float(_)) => Some(SqlType::Float8),
        Expr::Literal(Literal::Bool(_)) => Some(SqlType::Bool),
        Expr::Literal(Literal::Json(_)) => Some(SqlType::Json),
        // A count or sum types its parameter (`HAVING count(*) > $1`); a field's key does not.
        Expr::GroupKey { ty, .. } | Expr::AggregateResult { ty, .. } if *ty != SqlType::Json => {
            Some(*ty)
        }
        _ => None,
    }
}

/// The types an operator gives its operands whatever they are compared with (`None`: the
/// operator types them from each other, or as numbers).
fn operand_types(op: BinaryOp) -> Option<(Hint, Hint)> {
    let (bool, text, json) = (Some(SqlType::Bool), Some(SqlType::Text), Some(SqlType::Json));
    Some(match op {
        BinaryOp::And | BinaryOp::Or => (bool, bool),
        BinaryOp::Concat => (text, text),
        BinaryOp::Contains | BinaryOp::ContainedBy => (json, json),
        BinaryOp::HasKey => (json, text),
        BinaryOp::HasAnyKey | BinaryOp::HasAllKeys => (json, None),
        _ => return None,
    })
}

fn infer(e: &Expr, hint: Hint, note: &mut dyn FnMut(usize, Hint)) {
    if let Expr::Binary { op, left, right } = e
        && let Some((l, r)) = operand_types(*op)
    {
        infer(left, l, note);
        infer(right, r, note);
        return;
    }
    match e {
        Expr::Param(i) => note(*i, hint),
        Expr::Cast { expr, to } => infer(expr, Some(*to), note),
        Expr::JsonPath { base, .. } => infer(base, Some(SqlType::Json), note),
        Expr::Binary { op, left, right } if op.is_comparison() => {
            infer(left, sibling_type(right), note);
            infer(right, sibling_type(left), note);
        }
        Expr::Binary { left, right, .. } => {
            let numeric = |other: &Expr| match sibling_type(other) {
                Some(SqlType::Int8) => Some(SqlType::Int8),
                Some(SqlType::Float8) => Some(SqlType::Float8),
                _ => None,
            };
            infer(left, numeric(right), note);
            infer(right, numeric(left), note);
        }
        Expr::Unary { op: crate::expr::UnaryOp::Not, expr } => {
            infer(expr, Some(SqlType::Bool), note)
        }
        Expr::Unary { expr, .. } => infer(expr, None, note),
        Expr::IsNull { expr, .. } => infer(expr, None, note),
        Expr::InList { expr, list, .. } => {
            let from_list = list.iter().find_map(sibling_type);
            infer(expr, from_list, note);
            let from_expr = sibling_type(expr).or(from_list);
            list.iter().for_each(|item| infer(item, from_expr, note));
        }
        Expr::Between { expr, low, high, .. } => {
            infer(expr, sibling_type(low).or(sibling_type(high)), note);
            infer(low, sibling_type(expr), note);
            infer(high, sibling_type(expr), note);
        }
        Expr::Like { expr, pattern, .. } => {
            infer(expr, Some(SqlType::Text), note);
            infer(pattern, Some(SqlType::Text), note);
        }
        Expr::Call {
            func:
                crate::expr::ScalarFunc::Coalesce
                | crate::expr::ScalarFunc::NullIf
                | crate::expr::ScalarFunc::Greatest
                | crate::expr::ScalarFunc::Least,
            args,
        } => {
            let from_args = args.iter().find_map(sibling_type);
            args.iter().for_each(|arg| infer(arg, from_args, note));
        }
        // A number (substr: a text), then integers (round's digits, substr's positions).
        Expr::Call {
            func:
                func @ (crate::expr::ScalarFunc::Abs
                | crate::expr::ScalarFunc::Round
                | crate::expr::ScalarFunc::Floor
                | crate::expr::ScalarFunc::Ceil
                | crate::expr::ScalarFunc::Substr),
            args,
        } => {
            let first = if *func == crate::expr::ScalarFunc::Substr {
                SqlType::Text
            } else {
                SqlType::Float8
            };
            for (i, arg) in args.iter().enumerate() {
                infer(arg, Some(if i == 0 { first } else { SqlType::Int8 }), note);
            }
        }
        Expr::Call { args, .. } => {
            args.iter().for_each(|arg| infer(arg, Some(SqlType::Text), note))
        }
        Expr::Case { operand, whens, otherwise } => {
            let results = || whens.iter().map(|(_, r)| r).chain(otherwise.as_deref());
            let from_results = results().find_map(sibling_type);
            match operand {
                // Each WHEN value is compared with the operand, as in `x = v`.
                Some(x) => {
                    let from_values = whens.iter().find_map(|(v, _)| sibling_type(v));
                    infer(x, from_values, note);
                    let from_operand = sibling_type(x).or(from_values);
                    whens.iter().for_each(|(v, _)| infer(v, from_operand, note));
                }
                None => whens.iter().for_each(|(c, _)| infer(c, Some(SqlType::Bool), note)),
            }
            results().for_each(|r| infer(r, from_results, note));
        }
        Expr::Literal(_)
        | Expr::Id
        | Expr::Field(_)
        | Expr::Excluded(_)
        | Expr::GroupKey { .. }
        | Expr::AggregateResult { .. }
        | Expr::Session(_) => {}
    }
}

/// Replaces every parameter with its value. `params` must hold exactly as many values as
/// [`param_types`] has entries. A text value for an unspecified parameter becomes an untyped
/// literal (see the module docs). Never parses SQL.
pub fn bind(stmt: &Statement, params: &[Datum]) -> Result<Statement, PlanError> {
    let types = param_types(stmt);
    if params.len() != types.len() {
        return Err(PlanError::BadParameter {
            index: 0,
            reason: format!("statement takes {} parameters, {} given", types.len(), params.len()),
        });
    }
    if params.is_empty() {
        return Ok(stmt.clone());
    }
    let binder = Binder { params, types: &types };
    binder.statement(stmt.clone())
}

struct Binder<'p> {
    params: &'p [Datum],
    types: &'p [Option<SqlType>],
}

impl Binder<'_> {
    fn literal(&self, index: usize) -> Result<Literal, PlanError> {
        let datum = self.params.get(index).cloned().ok_or(PlanError::BadParameter {
            index: index + 1,
            reason: "no value given".to_owned(),
        })?;
        let unspecified = matches!(self.types.get(index), Some(None));
        Ok(match datum {
            Datum::Text(s) if unspecified => Literal::Untyped(s),
            d => Literal::from_datum(d),
        })
    }

    fn expr(&self, e: Expr) -> Result<Expr, PlanError> {
        e.try_map(&mut |e| match e {
            Expr::Param(i) => Ok(Expr::Literal(self.literal(i)?)),
            other => Ok(other),
        })
    }

    fn opt(&self, e: Option<Expr>) -> Result<Option<Expr>, PlanError> {
        e.map(|e| self.expr(e)).transpose()
    }

    fn outputs(&self, outputs: Vec<Output>) -> Result<Vec<Output>, PlanError> {
        outputs
            .into_iter()
            .map(|o| Ok(Output { column: o.column, expr: self.expr(o.expr)? }))
            .collect()
    }

    fn assignments(&self, a: Vec<Assignment>) -> Result<Vec<Assignment>, PlanError> {
        a.into_iter()
            .map(|a| {
                Ok(Assignment { path: a.path, expr: a.expr.map(|e| self.expr(e)).transpose()? })
            })
            .collect()
    }

    fn count(&self, c: Option<Count>, what: &'static str) -> Result<Option<Count>, PlanError> {
        let Some(Count::Param(i)) = c else {
            return Ok(c);
        };
        let bad = |reason: String| PlanError::BadParameter { index: i + 1, reason };
        match self.params.get(i) {
            Some(Datum::Null) => Ok(None),
            Some(Datum::Int8(n)) => u64::try_from(*n)
                .map(|n| Some(Count::Value(n)))
                .map_err(|_| bad(format!("{what} must not be negative"))),
            Some(Datum::Text(t)) => t
                .trim()
                .parse::<u64>()
                .map(|n| Some(Count::Value(n)))
                .map_err(|_| bad(format!("{what} must be a non-negative integer"))),
            _ => Err(PlanError::TypeMismatch { what, expected: SqlType::Int8 }),
        }
    }

    fn statement(&self, stmt: Statement) -> Result<Statement, PlanError> {
        Ok(match stmt {
            Statement::Select(s) => Statement::Select(self.select(s)?),
            Statement::Insert(mut i) => {
                let mut rows = Vec::with_capacity(i.rows.len());
                for row in i.rows {
                    let body = match row.body {
                        InsertBody::Document(d) => InsertBody::Document(self.expr(d)?),
                        InsertBody::Fields(fields) => InsertBody::Fields(
                            fields
                                .into_iter()
                                .map(|(n, e)| Ok((n, self.expr(e)?)))
                                .collect::<Result<_, PlanError>>()?,
                        ),
                    };
                    rows.push(crate::plan::InsertRow { id: self.expr(row.id)?, body });
                }
                i.rows = rows;
                i.on_conflict = match i.on_conflict {
                    OnConflict::DoUpdate { assignments, filter } => OnConflict::DoUpdate {
                        assignments: self.assignments(assignments)?,
                        filter: self.opt(filter)?,
                    },
                    other => other,
                };
                i.returning = self.outputs(i.returning)?;
                Statement::Insert(i)
            }
            Statement::Update(mut u) => {
                u.assignments = self.assignments(u.assignments)?;
                u.filter = self.opt(u.filter)?;
                u.returning = self.outputs(u.returning)?;
                Statement::Update(u)
            }
            Statement::Delete(mut d) => {
                d.filter = self.opt(d.filter)?;
                d.returning = self.outputs(d.returning)?;
                Statement::Delete(d)
            }
            Statement::Explain { analyze, inner } => {
                Statement::Explain { analyze, inner: Box::new(self.statement(*inner)?) }
            }
            other => other,
        })
    }

    fn select(&self, mut s: Select) -> Result<Select, PlanError> {
        s.filter = self.opt(s.filter)?;
        s.shape = match s.shape {
            SelectShape::Rows { outputs } => SelectShape::Rows { outputs: self.outputs(outputs)? },
            SelectShape::Aggregate { group_by, aggregates, outputs, having } => {
                SelectShape::Aggregate {
                    group_by: group_by
                        .into_iter()
                        .map(|g| self.expr(g))
                        .collect::<Result<_, _>>()?,
                    aggregates: aggregates
                        .into_iter()
                        .map(|mut a| {
                            a.arg = self.opt(a.arg)?;
                            a.arg2 = self.opt(a.arg2)?;
                            a.filter = self.opt(a.filter)?;
                            for k in &mut a.order_by {
                                if let OrderTarget::Expr(e) = &mut k.target {
                                    *e = self.expr(std::mem::replace(e, Expr::Id))?;
                                }
                            }
                            Ok(a)
                        })
                        .collect::<Result<_, PlanError>>()?,
                    outputs: self.outputs(outputs)?,
                    having: self.opt(having)?,
                }
            }
        };
        s.order_by = s
            .order_by
            .into_iter()
            .map(|mut k| {
                if let OrderTarget::Expr(e) = k.target {
                    k.target = OrderTarget::Expr(self.expr(e)?);
                }
                Ok(k)
            })
            .collect::<Result<_, PlanError>>()?;
        s.limit = self.count(s.limit, "LIMIT")?;
        s.offset = self.count(s.offset, "OFFSET")?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn one(sql: &str) -> Statement {
        parse(sql).expect("parses").into_iter().next().expect("one statement")
    }

    // Checks parameter types are inferred from id(), casts, literals, LIMIT and INSERT shape.
    #[test]
    fn inference() {
        let s = one("SELECT * FROM c WHERE id() = $1 AND age::int8 > $2 AND name = $3 LIMIT $4");
        assert_eq!(
            param_types(&s),
            vec![Some(SqlType::Text), Some(SqlType::Int8), None, Some(SqlType::Int8)]
        );
        let s = one("INSERT INTO c VALUES ($1, $2)");
        assert_eq!(param_types(&s), vec![Some(SqlType::Text), Some(SqlType::Json)]);
        let s = one("SELECT * FROM c WHERE x IN ($2, 'a')");
        assert_eq!(param_types(&s), vec![None, Some(SqlType::Text)]);
    }

    // Checks binding replaces placeholders with literals and checks the count.
    #[test]
    fn binding() {
        let s = one("SELECT * FROM c WHERE id() = $1 LIMIT $2");
        let bound = bind(&s, &[Datum::Text("a/1".into()), Datum::Int8(3)]).expect("binds");
        let Statement::Select(sel) = bound else { panic!("select") };
        assert_eq!(sel.limit, Some(Count::Value(3)));
        assert_eq!(
            sel.filter,
            Some(Expr::Binary {
                op: BinaryOp::Eq,
                left: Box::new(Expr::Id),
                right: Box::new(Expr::Literal(Literal::Str("a/1".into()))),
            })
        );
        assert!(matches!(bind(&s, &[]), Err(PlanError::BadParameter { index: 0, .. })));
        assert!(bind(&s, &[Datum::Text("a".into()), Datum::Int8(-1)]).is_err());
    }
}
