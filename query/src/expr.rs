//! Plan expressions and their evaluation over documents seen through [`DocValue`].
//!
//! **Comparison rule.** A missing field and a JSON `null` read as SQL NULL, and any comparison
//! with NULL is NULL (three-valued logic; `WHERE` keeps only rows where the filter is true).
//! Numbers (`int` and `float`, from documents or literals) compare by value; strings compare
//! byte-wise (C collation); booleans with booleans. Values of mismatched kinds (a string field
//! against a number literal, an array or object against anything) are *not equal*: `=` is
//! false, `<>` is true, `<`, `<=`, `>`, `>=` are false. Nothing raises.
//!
//! Document ids are case-insensitive for equality, as placement and storage treat them
//! (SHARDING.md §1): `id() = 'ORDERS/1-a'` and `id() IN (…)` match `orders/1-A`; ordering on
//! `id()` keeps the stored case and byte order.
//!
//! Arithmetic (`+ - * / %`) on two integers is checked `int8` arithmetic (overflow and
//! division by zero raise); with a float it is `float8`; untyped parameter text reads as the
//! number it spells; with anything else that is not a number it is NULL. `AND`, `OR`, `NOT`
//! on something that is not a boolean treat it as NULL.
//!
//! Evaluating a comparison between a field and a literal allocates nothing: fields are read in
//! place through [`DocValue`] and literal strings are borrowed from the plan.

use std::cmp::Ordering;
use std::fmt;

use router::doc::{DocValue, ValueKind};

use crate::error::ExecError;
use crate::limits::{JSON_DEPTH_MAX, VALUE_BYTES_MAX};
use crate::memory::json_bytes;
use crate::types::{Datum, SqlType, cmp_float, cmp_int_float, float_text, parse_bool, parse_float};

/// A constant in a plan: written in the SQL text or bound from a parameter.
#[derive(Clone, PartialEq, Debug)]
pub enum Literal {
    /// `NULL`
    Null,
    /// `TRUE` / `FALSE`
    Bool(bool),
    /// An integer that fits in `i64`.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// Text of unspecified type, from a parameter the client sent as text without a type:
    /// compared with a value it takes that value's kind (see [`mod@crate::bind`]).
    Untyped(String),
    /// A JSON array or object (from a json parameter or a `'…'::json` cast of a literal).
    Json(serde_json::Value),
}

impl Literal {
    /// The literal for an owned datum (json scalars become the matching scalar literal).
    pub fn from_datum(d: Datum) -> Literal {
        match d {
            Datum::Null => Literal::Null,
            Datum::Bool(b) => Literal::Bool(b),
            Datum::Int8(i) => Literal::Int(i),
            Datum::Float8(f) => Literal::Float(f),
            Datum::Text(s) => Literal::Str(s),
            Datum::Json(v) => Literal::from_json(v),
        }
    }

    /// The literal for a JSON value (scalars become scalar literals).
    pub fn from_json(v: serde_json::Value) -> Literal {
        match v {
            serde_json::Value::Null => Literal::Null,
            serde_json::Value::Bool(b) => Literal::Bool(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Literal::Int(i),
                None => Literal::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Literal::Str(s),
            other => Literal::Json(other),
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(b) => f.write_str(if *b { "TRUE" } else { "FALSE" }),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => f.write_str(&float_text(*x)),
            Literal::Str(s) | Literal::Untyped(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Literal::Json(v) => write!(f, "'{}'::json", v.to_string().replace('\'', "''")),
        }
    }
}

/// A dotted path into a document: `address.city` is `["address", "city"]`. The empty path is
/// the whole document. Steps are case-sensitive JSON field names.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct FieldPath(Vec<String>);

impl FieldPath {
    /// A path from its steps.
    pub fn new(steps: Vec<String>) -> FieldPath {
        FieldPath(steps)
    }

    /// The steps, outermost first.
    pub fn steps(&self) -> &[String] {
        &self.0
    }

    /// Whether this is the whole document.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("doc()");
        }
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            let plain = step.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && step.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if plain {
                f.write_str(step)?;
            } else {
                f.write_str(&crate::plan::quote_ident(step))?;
            }
        }
        Ok(())
    }
}

/// One step of a jsonb access that can index arrays (`->`, `->>`, `#>`, `#>>`), as
/// PostgreSQL applies it: a step that does not fit the value (a key on an array, an index on
/// an object, anything on a scalar, an index past the end) gives NULL.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum JsonStep {
    /// `-> 'k'`: member `k` of an object.
    Key(String),
    /// `-> n`: element `n` of an array, 0-based; negative counts from the end (`-1` last).
    Index(i64),
    /// A `#>` path element: member of an object, or of an array the element its text names
    /// as an integer (`'{tags,0}'`).
    Path(String),
}

impl JsonStep {
    /// The step applied to one JSON node.
    pub fn apply<'a, J: DocValue<'a>>(&self, at: J) -> Option<J> {
        match (self, at.kind()) {
            (JsonStep::Key(k) | JsonStep::Path(k), ValueKind::Object) => at.field(k),
            (JsonStep::Index(i), ValueKind::Array) => element_at(at, *i),
            (JsonStep::Path(p), ValueKind::Array) => element_at(at, p.parse().ok()?),
            _ => None,
        }
    }
}

/// Element `i` of an array (negative: from the end).
fn element_at<'a, J: DocValue<'a>>(array: J, i: i64) -> Option<J> {
    array.element(array_index(array.len(), i)?)
}

/// The position index `i` names in an array of `len` (negative: from the end), if inside it.
fn array_index(len: usize, i: i64) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let at = if i < 0 { len.checked_add(i)? } else { i };
    if at >= len {
        return None;
    }
    usize::try_from(at).ok()
}

impl fmt::Display for JsonStep {
    /// As SQL that plans back to the same step.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonStep::Key(k) => write!(f, "->'{}'", k.replace('\'', "''")),
            // `->-1` would lex as one operator `->-`, as in PostgreSQL.
            JsonStep::Index(i) => write!(f, "-> {i}"),
            // The planner's path literals hold no quote or backslash (`text_array`).
            JsonStep::Path(p) => write!(f, "#>'{{\"{}\"}}'", p.replace('\'', "''")),
        }
    }
}

/// Unary operators.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UnaryOp {
    /// `NOT`
    Not,
    /// `-`
    Neg,
}

/// Binary operators.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BinaryOp {
    /// `AND`
    And,
    /// `OR`
    Or,
    /// `=`
    Eq,
    /// `<>` / `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `||`: text concatenation.
    Concat,
    /// `IS DISTINCT FROM`: `<>` with NULL as a value (never NULL itself).
    IsDistinctFrom,
    /// `IS NOT DISTINCT FROM`: `=` with NULL as a value (never NULL itself).
    IsNotDistinctFrom,
    /// `@>`: jsonb containment, the left side contains the right (see [`json_contains`]).
    Contains,
    /// `<@`: the right side contains the left.
    ContainedBy,
    /// `?`: the text is a key of the object, a string element of the array, or the string.
    HasKey,
    /// `?|`: any of the texts (a JSON array of strings on the right) is, as `?`.
    HasAnyKey,
    /// `?&`: every one of them is.
    HasAllKeys,
    /// jsonb's `-` with a text or a text array on the right: the object without those keys,
    /// the array without those string elements.
    JsonMinus,
    /// `#-`: the value without what the path (a JSON array of texts on the right) names.
    JsonDeletePath,
}

impl BinaryOp {
    /// The operator as SQL writes it.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
            BinaryOp::Eq => "=",
            BinaryOp::Ne => "<>",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Concat => "||",
            BinaryOp::IsDistinctFrom => "IS DISTINCT FROM",
            BinaryOp::IsNotDistinctFrom => "IS NOT DISTINCT FROM",
            BinaryOp::Contains => "@>",
            BinaryOp::ContainedBy => "<@",
            BinaryOp::HasKey => "?",
            BinaryOp::HasAnyKey => "?|",
            BinaryOp::HasAllKeys => "?&",
            BinaryOp::JsonMinus => "-",
            BinaryOp::JsonDeletePath => "#-",
        }
    }

    /// Whether this is one of jsonb's containment or key tests (a bool result, json operands
    /// on the containment side).
    pub fn is_json_test(self) -> bool {
        matches!(
            self,
            BinaryOp::Contains
                | BinaryOp::ContainedBy
                | BinaryOp::HasKey
                | BinaryOp::HasAnyKey
                | BinaryOp::HasAllKeys
        )
    }

    /// Whether this is a comparison (a bool result, operands typed from each other): one of
    /// `= <> < <= > >=`, `IS [NOT] DISTINCT FROM`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq
                | BinaryOp::Ne
                | BinaryOp::Lt
                | BinaryOp::Le
                | BinaryOp::Gt
                | BinaryOp::Ge
                | BinaryOp::IsDistinctFrom
                | BinaryOp::IsNotDistinctFrom
        )
    }
}

/// Scalar functions (`lower(e)`, `coalesce(a, b, …)`), evaluated per row.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ScalarFunc {
    /// `coalesce(a, b, …)`: the first argument that is not NULL.
    Coalesce,
    /// `lower(e)`: the text form, lower-cased.
    Lower,
    /// `upper(e)`: the text form, upper-cased.
    Upper,
    /// `length(e)` / `char_length(e)`: characters of the text form.
    Length,
    /// `nullif(a, b)`: NULL when `a = b`, else `a`.
    NullIf,
    /// `greatest(a, …)`: the largest argument that is not NULL, in the total order of
    /// [`crate::types::datum_cmp`].
    Greatest,
    /// `least(a, …)`: the smallest, likewise.
    Least,
    /// `abs(x)` of a number (NULL for anything else, as arithmetic).
    Abs,
    /// `round(x)` / `round(x, digits)`: halves away from zero.
    Round,
    /// `floor(x)`.
    Floor,
    /// `ceil(x)` / `ceiling(x)`.
    Ceil,
    /// `replace(s, from, to)` over text forms.
    Replace,
    /// `substr(s, start [, count])` / `SUBSTRING(s FROM start [FOR count])`: characters,
    /// 1-based, as PostgreSQL counts them (a start before 1 shortens the count).
    Substr,
    /// `concat(a, …)`: the text forms of the arguments that are not NULL, joined.
    Concat,
    /// `btrim(s [, chars])` / `TRIM([BOTH] [chars FROM] s)`: `chars` (a space by default)
    /// removed from both ends.
    Btrim,
    /// `ltrim` / `TRIM(LEADING …)`: from the start.
    Ltrim,
    /// `rtrim` / `TRIM(TRAILING …)`: from the end.
    Rtrim,
    /// `jsonb_typeof(x)` / `json_typeof`: `object`, `array`, `string`, `number` or
    /// `boolean` (NULL for NULL: a JSON `null` reads as NULL here).
    JsonTypeof,
    /// `jsonb_array_length(x)` / `json_array_length`: the elements of an array (22023 for
    /// anything else, as in PostgreSQL).
    JsonArrayLength,
    /// `jsonb_set(target, path, value [, create_missing])`: `target` with the value at
    /// `path` (a text array, planned as a JSON array of texts) replaced, or added where the
    /// last step is missing and `create_missing` (default true).
    JsonSet,
    /// `jsonb_build_object(k1, v1, …)` / `json_build_object`: an object of the pairs (keys
    /// as text, NULL values as JSON null; a NULL key is 22004).
    JsonBuildObject,
    /// `jsonb_build_array(…)` / `json_build_array`: an array of the arguments.
    JsonBuildArray,
    /// `to_jsonb(x)` / `to_json(x)`: the value as JSON (text becomes a JSON string).
    ToJson,
}

impl ScalarFunc {
    /// The function a (folded, unqualified) name calls, if it is one.
    pub fn from_name(name: &str) -> Option<ScalarFunc> {
        Some(match name {
            "coalesce" => ScalarFunc::Coalesce,
            "lower" => ScalarFunc::Lower,
            "upper" => ScalarFunc::Upper,
            "length" | "char_length" | "character_length" => ScalarFunc::Length,
            "nullif" => ScalarFunc::NullIf,
            "greatest" => ScalarFunc::Greatest,
            "least" => ScalarFunc::Least,
            "abs" => ScalarFunc::Abs,
            "round" => ScalarFunc::Round,
            "floor" => ScalarFunc::Floor,
            "ceil" | "ceiling" => ScalarFunc::Ceil,
            "replace" => ScalarFunc::Replace,
            "substr" | "substring" => ScalarFunc::Substr,
            "concat" => ScalarFunc::Concat,
            "btrim" => ScalarFunc::Btrim,
            "ltrim" => ScalarFunc::Ltrim,
            "rtrim" => ScalarFunc::Rtrim,
            "jsonb_typeof" | "json_typeof" => ScalarFunc::JsonTypeof,
            "jsonb_array_length" | "json_array_length" => ScalarFunc::JsonArrayLength,
            "jsonb_set" => ScalarFunc::JsonSet,
            "jsonb_build_object" | "json_build_object" => ScalarFunc::JsonBuildObject,
            "jsonb_build_array" | "json_build_array" => ScalarFunc::JsonBuildArray,
            "to_jsonb" | "to_json" => ScalarFunc::ToJson,
            _ => return None,
        })
    }

    /// Its name in SQL.
    pub fn name(self) -> &'static str {
        match self {
            ScalarFunc::Coalesce => "coalesce",
            ScalarFunc::Lower => "lower",
            ScalarFunc::Upper => "upper",
            ScalarFunc::Length => "length",
            ScalarFunc::NullIf => "nullif",
            ScalarFunc::Greatest => "greatest",
            ScalarFunc::Least => "least",
            ScalarFunc::Abs => "abs",
            ScalarFunc::Round => "round",
            ScalarFunc::Floor => "floor",
            ScalarFunc::Ceil => "ceil",
            ScalarFunc::Replace => "replace",
            ScalarFunc::Substr => "substr",
            ScalarFunc::Concat => "concat",
            ScalarFunc::Btrim => "btrim",
            ScalarFunc::Ltrim => "ltrim",
            ScalarFunc::Rtrim => "rtrim",
            ScalarFunc::JsonTypeof => "jsonb_typeof",
            ScalarFunc::JsonArrayLength => "jsonb_array_length",
            ScalarFunc::JsonSet => "jsonb_set",
            ScalarFunc::JsonBuildObject => "jsonb_build_object",
            ScalarFunc::JsonBuildArray => "jsonb_build_array",
            ScalarFunc::ToJson => "to_jsonb",
        }
    }

    /// Whether it takes `n` arguments.
    pub fn takes(self, n: usize) -> bool {
        match self {
            ScalarFunc::Coalesce
            | ScalarFunc::Greatest
            | ScalarFunc::Least
            | ScalarFunc::Concat => n >= 1,
            ScalarFunc::Lower
            | ScalarFunc::Upper
            | ScalarFunc::Length
            | ScalarFunc::Abs
            | ScalarFunc::Floor
            | ScalarFunc::Ceil
            | ScalarFunc::JsonTypeof
            | ScalarFunc::JsonArrayLength
            | ScalarFunc::ToJson => n == 1,
            ScalarFunc::JsonSet => n == 3 || n == 4,
            ScalarFunc::JsonBuildObject => n.is_multiple_of(2),
            ScalarFunc::JsonBuildArray => true,
            ScalarFunc::NullIf => n == 2,
            ScalarFunc::Round | ScalarFunc::Btrim | ScalarFunc::Ltrim | ScalarFunc::Rtrim => {
                n == 1 || n == 2
            }
            ScalarFunc::Substr => n == 2 || n == 3,
            ScalarFunc::Replace => n == 3,
        }
    }
}

/// A value of the client's session, known to node, not to the plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SessionValue {
    /// `current_user`, `session_user`, `user`: the user the connection started as.
    User,
    /// `current_database()`, `current_catalog`: the database it named.
    Database,
}

/// The session's names, put into a plan by [`crate::plan::Select::with_session`].
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SessionNames {
    /// The startup message's `user`.
    pub user: String,
    /// Its `database` (the user name when it names none, as in PostgreSQL).
    pub database: String,
}

/// An expression in a plan. Built by the planner with depth at most
/// [`crate::limits::EXPR_DEPTH_MAX`].
#[derive(Clone, PartialEq, Debug)]
pub enum Expr {
    /// A constant.
    Literal(Literal),
    /// Parameter `$n`, stored 0-based; replaced by a literal when the plan is bound.
    Param(usize),
    /// `id()`: the document's id as stored (original case).
    Id,
    /// A field of the document (the whole document for the empty path).
    Field(FieldPath),
    /// A field of the row being inserted, in `ON CONFLICT … DO UPDATE` (`excluded.f`).
    Excluded(FieldPath),
    /// In an aggregate query's select list, HAVING and ORDER BY: the group's value of the
    /// n-th GROUP BY expression. Replaced by a literal per group before evaluation.
    GroupKey {
        /// Index into the GROUP BY list.
        index: usize,
        /// The key's type.
        ty: SqlType,
    },
    /// A session value; only in a SELECT without FROM (the planner refuses it elsewhere),
    /// replaced by a literal before evaluation ([`crate::plan::Select::with_session`]).
    Session(SessionValue),
    /// Like [`Expr::GroupKey`]: the group's result of the n-th aggregate.
    AggregateResult {
        /// Index into the query's aggregates.
        index: usize,
        /// The aggregate's result type.
        ty: SqlType,
    },
    /// `NOT e`, `-e`
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// `l op r`
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
    },
    /// `e IS [NOT] NULL`
    IsNull {
        /// The operand.
        expr: Box<Expr>,
        /// `IS NOT NULL`
        negated: bool,
    },
    /// `e [NOT] IN (list)`
    InList {
        /// The operand.
        expr: Box<Expr>,
        /// The candidates.
        list: Vec<Expr>,
        /// `NOT IN`
        negated: bool,
    },
    /// `e [NOT] BETWEEN low AND high`
    Between {
        /// The operand.
        expr: Box<Expr>,
        /// Lower bound, inclusive.
        low: Box<Expr>,
        /// Upper bound, inclusive.
        high: Box<Expr>,
        /// `NOT BETWEEN`
        negated: bool,
    },
    /// `e [NOT] LIKE pattern` (`%` any run, `_` one character, `\` escapes), or `ILIKE`.
    Like {
        /// The operand.
        expr: Box<Expr>,
        /// The pattern.
        pattern: Box<Expr>,
        /// `NOT LIKE`
        negated: bool,
        /// `ILIKE`: both sides lower-cased first.
        case_insensitive: bool,
    },
    /// `e::type` / `CAST(e AS type)`
    Cast {
        /// The operand.
        expr: Box<Expr>,
        /// The target type.
        to: SqlType,
    },
    /// `CASE [x] WHEN c THEN r … [ELSE e] END`: the result of the first condition that is
    /// true (with an operand `x`, the first `c` equal to it, as `x = c` compares), else `e`,
    /// else NULL. The operand is evaluated once.
    Case {
        /// The operand of a simple CASE.
        operand: Option<Box<Expr>>,
        /// Each condition (a value to compare the operand with) and its result, in order.
        whens: Vec<(Expr, Expr)>,
        /// `ELSE`
        otherwise: Option<Box<Expr>>,
    },
    /// `f(args)`: a scalar function (arity checked by the planner).
    Call {
        /// The function.
        func: ScalarFunc,
        /// Its arguments.
        args: Vec<Expr>,
    },
    /// jsonb access that indexes arrays or starts from a value other than a document field
    /// (`tags->0`, `a #> '{b,1}'`, `'[1,2]'::json->-1`); key-only access on a field is a
    /// [`Expr::Field`] path.
    JsonPath {
        /// The JSON value walked.
        base: Box<Expr>,
        /// The steps, in order (at least one).
        steps: Vec<JsonStep>,
    },
}

impl Expr {
    /// Calls `visit` on this expression and every sub-expression, parents first.
    pub fn walk(&self, visit: &mut dyn FnMut(&Expr)) {
        visit(self);
        match self {
            Expr::Literal(_)
            | Expr::Param(_)
            | Expr::Id
            | Expr::Field(_)
            | Expr::Excluded(_)
            | Expr::GroupKey { .. }
            | Expr::AggregateResult { .. }
            | Expr::Session(_) => {}
            Expr::Unary { expr, .. }
            | Expr::IsNull { expr, .. }
            | Expr::Cast { expr, .. }
            | Expr::JsonPath { base: expr, .. } => expr.walk(visit),
            Expr::Binary { left, right, .. } => {
                left.walk(visit);
                right.walk(visit);
            }
            Expr::InList { expr, list, .. } => {
                expr.walk(visit);
                for e in list {
                    e.walk(visit);
                }
            }
            Expr::Between { expr, low, high, .. } => {
                expr.walk(visit);
                low.walk(visit);
                high.walk(visit);
            }
            Expr::Like { expr, pattern, .. } => {
                expr.walk(visit);
                pattern.walk(visit);
            }
            Expr::Call { args, .. } => {
                for e in args {
                    e.walk(visit);
                }
            }
            Expr::Case { operand, whens, otherwise } => {
                if let Some(x) = operand {
                    x.walk(visit);
                }
                for (condition, result) in whens {
                    condition.walk(visit);
                    result.walk(visit);
                }
                if let Some(e) = otherwise {
                    e.walk(visit);
                }
            }
        }
    }

    /// Rewrites every sub-expression bottom-up with `f`, which cannot fail (puts known
    /// values in for placeholders).
    pub(crate) fn map(self, f: &mut dyn FnMut(Expr) -> Expr) -> Expr {
        let mapped: Result<Expr, std::convert::Infallible> = self.try_map(&mut |e| Ok(f(e)));
        mapped.unwrap_or_else(|never| match never {})
    }

    /// Rewrites every sub-expression bottom-up with `f` (used to bind parameters).
    pub(crate) fn try_map<E>(self, f: &mut dyn FnMut(Expr) -> Result<Expr, E>) -> Result<Expr, E> {
        let mapped = match self {
            e @ (Expr::Literal(_)
            | Expr::Param(_)
            | Expr::Id
            | Expr::Field(_)
            | Expr::Excluded(_)
            | Expr::GroupKey { .. }
            | Expr::AggregateResult { .. }
            | Expr::Session(_)) => e,
            Expr::Unary { op, expr } => Expr::Unary { op, expr: Box::new(expr.try_map(f)?) },
            Expr::IsNull { expr, negated } => {
                Expr::IsNull { expr: Box::new(expr.try_map(f)?), negated }
            }
            Expr::Cast { expr, to } => Expr::Cast { expr: Box::new(expr.try_map(f)?), to },
            Expr::JsonPath { base, steps } => {
                Expr::JsonPath { base: Box::new(base.try_map(f)?), steps }
            }
            Expr::Binary { op, left, right } => Expr::Binary {
                op,
                left: Box::new(left.try_map(f)?),
                right: Box::new(right.try_map(f)?),
            },
            Expr::InList { expr, list, negated } => Expr::InList {
                expr: Box::new(expr.try_map(f)?),
                list: list.into_iter().map(|e| e.try_map(f)).collect::<Result<_, _>>()?,
                negated,
            },
            Expr::Between { expr, low, high, negated } => Expr::Between {
                expr: Box::new(expr.try_map(f)?),
                low: Box::new(low.try_map(f)?),
                high: Box::new(high.try_map(f)?),
                negated,
            },
            Expr::Like { expr, pattern, negated, case_insensitive } => Expr::Like {
                expr: Box::new(expr.try_map(f)?),
                pattern: Box::new(pattern.try_map(f)?),
                negated,
                case_insensitive,
            },
            Expr::Call { func, args } => Expr::Call {
                func,
                args: args.into_iter().map(|e| e.try_map(f)).collect::<Result<_, _>>()?,
            },
            Expr::Case { operand, whens, otherwise } => Expr::Case {
                operand: match operand {
                    Some(x) => Some(Box::new(x.try_map(f)?)),
                    None => None,
                },
                whens: whens
                    .into_iter()
                    .map(|(c, r)| Ok((c.try_map(f)?, r.try_map(f)?)))
                    .collect::<Result<_, _>>()?,
                otherwise: match otherwise {
                    Some(e) => Some(Box::new(e.try_map(f)?)),
                    None => None,
                },
            },
        };
        f(mapped)
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Param(i) => write!(f, "${}", i + 1),
            Expr::Id => f.write_str("id()"),
            Expr::Field(p) => write!(f, "{p}"),
            Expr::Excluded(p) => write!(f, "excluded.{p}"),
            Expr::GroupKey { index, .. } => write!(f, "key{}", index + 1),
            Expr::AggregateResult { index, .. } => write!(f, "agg{}", index + 1),
            Expr::Session(SessionValue::User) => f.write_str("current_user"),
            Expr::Session(SessionValue::Database) => f.write_str("current_database()"),
            Expr::Unary { op: UnaryOp::Not, expr } => write!(f, "(NOT {expr})"),
            Expr::Unary { op: UnaryOp::Neg, expr } => write!(f, "(-{expr})"),
            // The key list of `?|` / `?&` as the text array it was written as.
            Expr::Binary { op: op @ (BinaryOp::HasAnyKey | BinaryOp::HasAllKeys), left, right }
                if matches!(**right, Expr::Literal(Literal::Json(serde_json::Value::Array(_)))) =>
            {
                write!(f, "({left} {} ARRAY[", op.symbol())?;
                if let Expr::Literal(Literal::Json(serde_json::Value::Array(keys))) = &**right {
                    for (i, key) in keys.iter().enumerate() {
                        let key = Literal::Str(key.as_str().unwrap_or_default().to_owned());
                        write!(f, "{}{key}", if i > 0 { ", " } else { "" })?;
                    }
                }
                f.write_str("])")
            }
            Expr::Binary { op, left, right } => write!(f, "({left} {} {right})", op.symbol()),
            Expr::IsNull { expr, negated } => {
                write!(f, "({expr} IS {}NULL)", if *negated { "NOT " } else { "" })
            }
            Expr::InList { expr, list, negated } => {
                write!(f, "({expr} {}IN (", if *negated { "NOT " } else { "" })?;
                for (i, e) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str("))")
            }
            Expr::Between { expr, low, high, negated } => {
                write!(f, "({expr} {}BETWEEN {low} AND {high})", if *negated { "NOT " } else { "" })
            }
            Expr::Like { expr, pattern, negated, case_insensitive } => write!(
                f,
                "({expr} {}{}LIKE {pattern})",
                if *negated { "NOT " } else { "" },
                if *case_insensitive { "I" } else { "" }
            ),
            Expr::Cast { expr, to } => write!(f, "{expr}::{to}"),
            Expr::JsonPath { base, steps } => {
                write!(f, "({base}")?;
                for step in steps {
                    write!(f, "{step}")?;
                }
                f.write_str(")")
            }
            Expr::Call { func, args } => {
                write!(f, "{}(", func.name())?;
                for (i, e) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
            Expr::Case { operand, whens, otherwise } => {
                f.write_str("CASE")?;
                if let Some(x) = operand {
                    write!(f, " {x}")?;
                }
                for (condition, result) in whens {
                    write!(f, " WHEN {condition} THEN {result}")?;
                }
                if let Some(e) = otherwise {
                    write!(f, " ELSE {e}")?;
                }
                f.write_str(" END")
            }
        }
    }
}

/// One value during evaluation: a scalar, a string borrowed from the plan or the document, an
/// owned string (from a cast), or a JSON container still inside the document.
#[derive(Clone, Debug)]
pub enum Value<'v, D> {
    /// NULL, a missing field or a JSON `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A borrowed string.
    Str(&'v str),
    /// Borrowed text of unspecified type (an untyped parameter).
    Untyped(&'v str),
    /// An owned string.
    Text(String),
    /// An array or object inside the document.
    Doc(D),
    /// An array or object from the plan.
    JsonRef(&'v serde_json::Value),
    /// An owned array or object (from a cast to json).
    Json(serde_json::Value),
}

impl<'v, D: DocValue<'v>> Value<'v, D> {
    /// The value of a document node, scalars unwrapped.
    pub fn from_doc(d: D) -> Value<'v, D> {
        match d.kind() {
            ValueKind::Null => Value::Null,
            ValueKind::Bool => d.as_bool().map_or(Value::Null, Value::Bool),
            ValueKind::Int => d.as_i64().map_or(Value::Null, Value::Int),
            ValueKind::Float => d.as_f64().map_or(Value::Null, Value::Float),
            ValueKind::Str => d.as_str().map_or(Value::Null, Value::Str),
            ValueKind::Array | ValueKind::Object => Value::Doc(d),
        }
    }

    fn from_literal(l: &'v Literal) -> Value<'v, D> {
        match l {
            Literal::Null => Value::Null,
            Literal::Bool(b) => Value::Bool(*b),
            Literal::Int(i) => Value::Int(*i),
            Literal::Float(f) => Value::Float(*f),
            Literal::Str(s) => Value::Str(s),
            Literal::Untyped(s) => Value::Untyped(s),
            Literal::Json(v) => Value::JsonRef(v),
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Untyped(s) => Some(s),
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    fn truth(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) | Value::Float(_) => "number",
            Value::Str(_) | Value::Untyped(_) | Value::Text(_) => "string",
            Value::Doc(_) | Value::JsonRef(_) | Value::Json(_) => "json container",
        }
    }

    /// An owned JSON copy of this value.
    pub fn to_json(&self) -> Result<serde_json::Value, ExecError> {
        Ok(match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => float_json(*f),
            Value::Str(s) | Value::Untyped(s) => serde_json::Value::String((*s).to_owned()),
            Value::Text(s) => serde_json::Value::String(s.clone()),
            Value::Doc(d) => doc_to_json(*d, 0)?,
            Value::JsonRef(v) => (*v).clone(),
            Value::Json(v) => v.clone(),
        })
    }

    /// The datum of this value's own kind (strings are text, containers json).
    pub fn to_natural_datum(&self) -> Result<Datum, ExecError> {
        Ok(match self {
            Value::Null => Datum::Null,
            Value::Bool(b) => Datum::Bool(*b),
            Value::Int(i) => Datum::Int8(*i),
            Value::Float(f) => Datum::Float8(*f),
            Value::Str(s) | Value::Untyped(s) => Datum::Text((*s).to_owned()),
            Value::Text(s) => Datum::Text(s.clone()),
            Value::Doc(_) | Value::JsonRef(_) | Value::Json(_) => Datum::Json(self.to_json()?),
        })
    }

    /// The datum for an output column of type `ty`: json columns hold the JSON value, others
    /// the value cast to the type (see [`cast`]).
    pub fn to_datum(&self, ty: SqlType) -> Result<Datum, ExecError> {
        match (ty, self) {
            (_, Value::Null) => Ok(Datum::Null),
            (SqlType::Json, _) => Ok(Datum::Json(self.to_json()?)),
            _ => cast(self.clone(), ty)?.to_natural_datum(),
        }
    }
}

/// A float as JSON (non-finite floats have no JSON form and become `null`).
fn float_json(f: f64) -> serde_json::Value {
    serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// Copies a document node into an owned JSON value, refusing nesting deeper than
/// [`JSON_DEPTH_MAX`].
pub fn doc_to_json<'a, D: DocValue<'a>>(
    d: D,
    depth: usize,
) -> Result<serde_json::Value, ExecError> {
    if depth > JSON_DEPTH_MAX {
        return Err(ExecError::DocumentTooDeep { limit: JSON_DEPTH_MAX });
    }
    Ok(match d.kind() {
        ValueKind::Null => serde_json::Value::Null,
        ValueKind::Bool => serde_json::Value::Bool(d.as_bool().unwrap_or(false)),
        ValueKind::Int => serde_json::Value::from(d.as_i64().unwrap_or(0)),
        ValueKind::Float => float_json(d.as_f64().unwrap_or(f64::NAN)),
        ValueKind::Str => serde_json::Value::String(d.as_str().unwrap_or("").to_owned()),
        ValueKind::Array => {
            let mut items = Vec::with_capacity(d.len());
            for i in 0..d.len() {
                if let Some(e) = d.element(i) {
                    items.push(doc_to_json(e, depth + 1)?);
                }
            }
            serde_json::Value::Array(items)
        }
        ValueKind::Object => {
            let mut map = serde_json::Map::new();
            let mut failed = None;
            d.for_each_member(&mut |name, member| {
                if failed.is_some() {
                    return;
                }
                match doc_to_json(member, depth + 1) {
                    Ok(v) => {
                        map.insert(name.to_owned(), v);
                    }
                    Err(e) => failed = Some(e),
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
            serde_json::Value::Object(map)
        }
    })
}

/// What an expression is evaluated against: one document, its id, and for
/// `ON CONFLICT … DO UPDATE` the row that was to be inserted.
#[derive(Clone, Copy)]
pub struct Row<'v, D> {
    /// The document's id.
    pub id: &'v str,
    /// The document (`None` where no document exists, e.g. INSERT values).
    pub doc: Option<D>,
    /// The `excluded` row of an upsert.
    pub excluded: Option<&'v serde_json::Value>,
}

/// Evaluates `expr` over `row`.
pub fn eval<'v, D: DocValue<'v>>(
    expr: &'v Expr,
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    Ok(match expr {
        Expr::Literal(l) => Value::from_literal(l),
        Expr::Param(i) => return Err(ExecError::UnboundParameter { index: i + 1 }),
        // Replaced per group at merge (`exec::GroupValues`); never seen by a fragment.
        Expr::GroupKey { .. } | Expr::AggregateResult { .. } => {
            return Err(ExecError::PartialMismatch { what: "a group value outside its group" });
        }
        Expr::Session(_) => {
            return Err(ExecError::WrongStatement {
                what: "a plan with its session values put in",
            });
        }
        Expr::Id => Value::Str(row.id),
        Expr::Field(path) => match row.doc.and_then(|d| d.path(path.steps())) {
            Some(d) => Value::from_doc(d),
            None => Value::Null,
        },
        Expr::Excluded(path) => match row.excluded.and_then(|d| d.path(path.steps())) {
            Some(v) => Value::from_json_ref(v),
            None => Value::Null,
        },
        Expr::Unary { op: UnaryOp::Not, expr } => match eval(expr, row)?.truth() {
            Some(b) => Value::Bool(!b),
            None => Value::Null,
        },
        Expr::Unary { op: UnaryOp::Neg, expr } => match eval(expr, row)? {
            Value::Int(i) => {
                Value::Int(i.checked_neg().ok_or(ExecError::Overflow { what: "negation" })?)
            }
            Value::Float(f) => Value::Float(-f),
            _ => Value::Null,
        },
        Expr::Binary { op: BinaryOp::And, left, right } => {
            let l = eval(left, row)?.truth();
            if l == Some(false) {
                return Ok(Value::Bool(false));
            }
            match (l, eval(right, row)?.truth()) {
                (_, Some(false)) => Value::Bool(false),
                (Some(true), Some(true)) => Value::Bool(true),
                _ => Value::Null,
            }
        }
        Expr::Binary { op: BinaryOp::Or, left, right } => {
            let l = eval(left, row)?.truth();
            if l == Some(true) {
                return Ok(Value::Bool(true));
            }
            match (l, eval(right, row)?.truth()) {
                (_, Some(true)) => Value::Bool(true),
                (Some(false), Some(false)) => Value::Bool(false),
                _ => Value::Null,
            }
        }
        Expr::Binary { op: op @ (BinaryOp::Eq | BinaryOp::Ne), left, right }
            if matches!(**left, Expr::Id) || matches!(**right, Expr::Id) =>
        {
            let l = eval(left, row)?;
            let r = eval(right, row)?;
            let equal = id_equal(&l, &r).or_else(|| compare_op(BinaryOp::Eq, &l, &r));
            equal.map_or(Value::Null, |e| Value::Bool(e == (*op == BinaryOp::Eq)))
        }
        Expr::Binary {
            op: op @ (BinaryOp::IsDistinctFrom | BinaryOp::IsNotDistinctFrom),
            left,
            right,
        } => {
            let is_id = matches!(**left, Expr::Id) || matches!(**right, Expr::Id);
            let (l, r) = (eval(left, row)?, eval(right, row)?);
            let same = match (matches!(l, Value::Null), matches!(r, Value::Null)) {
                (true, true) => true,
                (true, false) | (false, true) => false,
                (false, false) => equals(is_id, &l, &r) == Some(true),
            };
            Value::Bool(same == (*op == BinaryOp::IsNotDistinctFrom))
        }
        Expr::Binary { op, left, right } if op.is_json_test() => {
            json_binary(*op, left, right, row)?
        }
        Expr::Binary { op, left, right } if op.is_comparison() => {
            let l = eval(left, row)?;
            let r = eval(right, row)?;
            compare_op(*op, &l, &r).map_or(Value::Null, Value::Bool)
        }
        Expr::Binary { op: BinaryOp::Concat, left, right } => {
            concat(eval(left, row)?, eval(right, row)?)?
        }
        Expr::Binary { op: op @ (BinaryOp::JsonMinus | BinaryOp::JsonDeletePath), left, right } => {
            json_binary(*op, left, right, row)?
        }
        Expr::Binary { op, left, right } => arithmetic(*op, eval(left, row)?, eval(right, row)?)?,
        Expr::IsNull { expr, negated } => {
            Value::Bool(matches!(eval(expr, row)?, Value::Null) != *negated)
        }
        Expr::InList { expr, list, negated } => {
            let v = eval(expr, row)?;
            if matches!(v, Value::Null) {
                return Ok(Value::Null);
            }
            let mut saw_null = false;
            let mut found = false;
            let is_id = matches!(**expr, Expr::Id);
            for candidate in list {
                let c = eval(candidate, row)?;
                match equals(is_id, &v, &c) {
                    Some(true) => {
                        found = true;
                        break;
                    }
                    Some(false) => {}
                    None => saw_null = true,
                }
            }
            if found {
                Value::Bool(!*negated)
            } else if saw_null {
                Value::Null
            } else {
                Value::Bool(*negated)
            }
        }
        Expr::Between { expr, low, high, negated } => {
            let v = eval(expr, row)?;
            let lo = compare_op(BinaryOp::Ge, &v, &eval(low, row)?);
            let hi = compare_op(BinaryOp::Le, &v, &eval(high, row)?);
            match (lo, hi) {
                (Some(false), _) | (_, Some(false)) => Value::Bool(*negated),
                (Some(true), Some(true)) => Value::Bool(!*negated),
                _ => Value::Null,
            }
        }
        Expr::Like { expr, pattern, negated, case_insensitive } => {
            let v = eval(expr, row)?;
            let p = eval(pattern, row)?;
            match (v.as_str(), p.as_str()) {
                (Some(s), Some(p)) if *case_insensitive => Value::Bool(ilike(s, p) != *negated),
                (Some(s), Some(p)) => Value::Bool(like(s, p) != *negated),
                _ if matches!(v, Value::Null) || matches!(p, Value::Null) => Value::Null,
                // A non-string never matches a pattern (the mismatched-kinds rule).
                _ => Value::Bool(*negated),
            }
        }
        Expr::Cast { expr, to } => cast(eval(expr, row)?, *to)?,
        Expr::JsonPath { base, steps } => json_path_of(base, steps, row)?,
        Expr::Call { func, args } => call(*func, args, row)?,
        Expr::Case { operand, whens, otherwise } => {
            match case_branch(operand.as_deref(), whens, otherwise.as_deref(), row)? {
                Some(e) => eval(e, row)?,
                None => Value::Null,
            }
        }
    })
}

/// The branch of a CASE that applies to `row`: the result of the first WHEN that holds,
/// else ELSE (`None`: neither, NULL). Out of `eval` so its locals stay out of the recursive
/// frame.
#[inline(never)]
fn case_branch<'v, D: DocValue<'v>>(
    operand: Option<&'v Expr>,
    whens: &'v [(Expr, Expr)],
    otherwise: Option<&'v Expr>,
    row: &Row<'v, D>,
) -> Result<Option<&'v Expr>, ExecError> {
    let x = match operand {
        Some(x) => Some((matches!(x, Expr::Id), eval(x, row)?)),
        None => None,
    };
    for (condition, result) in whens {
        let c = eval(condition, row)?;
        let holds = match &x {
            Some((is_id, v)) => equals(*is_id, v, &c) == Some(true),
            None => c.truth() == Some(true),
        };
        if holds {
            return Ok(Some(result));
        }
    }
    Ok(otherwise)
}

/// A scalar function over `row` (see [`ScalarFunc`] for each). Text functions read the text
/// form of their arguments (`cast` to text: a string as it is, a number or boolean as
/// PostgreSQL prints it), numeric ones numbers only (anything else gives NULL, as
/// arithmetic does); a NULL argument gives NULL except in `coalesce`, `greatest`, `least`
/// and `concat`, which skip NULLs. Out of `eval` so its locals stay out of the recursive
/// frame.
#[inline(never)]
fn call<'v, D: DocValue<'v>>(
    func: ScalarFunc,
    args: &'v [Expr],
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let over_text: fn(&str) -> Value<'v, D> = match func {
        ScalarFunc::Coalesce => {
            for arg in args {
                let v = eval(arg, row)?;
                if !matches!(v, Value::Null) {
                    return Ok(v);
                }
            }
            return Ok(Value::Null);
        }
        ScalarFunc::Lower => |s| Value::Text(s.to_lowercase()),
        ScalarFunc::Upper => |s| Value::Text(s.to_uppercase()),
        ScalarFunc::Length => |s| Value::Int(i64::try_from(s.chars().count()).unwrap_or(i64::MAX)),
        ScalarFunc::NullIf => return null_if(args, row),
        ScalarFunc::Greatest => return extreme(args, row, Ordering::Greater),
        ScalarFunc::Least => return extreme(args, row, Ordering::Less),
        ScalarFunc::Abs | ScalarFunc::Round | ScalarFunc::Floor | ScalarFunc::Ceil => {
            return numeric(func, args, row);
        }
        ScalarFunc::Concat => {
            let mut out = String::new();
            for arg in args {
                if let Some(t) = text_arg(Some(arg), row)? {
                    value_fits(out.len().saturating_add(t.len()))?;
                    out.push_str(&t);
                }
            }
            return Ok(Value::Text(out));
        }
        ScalarFunc::Replace
        | ScalarFunc::Substr
        | ScalarFunc::Btrim
        | ScalarFunc::Ltrim
        | ScalarFunc::Rtrim => return text_function(func, args, row),
        ScalarFunc::JsonTypeof | ScalarFunc::JsonArrayLength => {
            let Some(x) = args.first() else { return Ok(Value::Null) };
            return json_function(func, eval(x, row)?);
        }
        ScalarFunc::JsonSet
        | ScalarFunc::JsonBuildObject
        | ScalarFunc::JsonBuildArray
        | ScalarFunc::ToJson => return json_build(func, args, row),
    };
    let Some(t) = text_arg(args.first(), row)? else { return Ok(Value::Null) };
    let out = over_text(&t);
    // Case mapping can lengthen a text (one character to several).
    if let Value::Text(s) = &out {
        value_fits(s.len())?;
    }
    Ok(out)
}

/// The text form of an argument (`None`: NULL or no such argument).
fn text_arg<'v, D: DocValue<'v>>(
    arg: Option<&'v Expr>,
    row: &Row<'v, D>,
) -> Result<Option<String>, ExecError> {
    let Some(arg) = arg else { return Ok(None) };
    let v = eval(arg, row)?;
    if matches!(v, Value::Null) {
        return Ok(None);
    }
    Ok(cast(v, SqlType::Text)?.as_str().map(str::to_owned))
}

/// An integer argument (`None`: NULL, or not an integer).
fn int_arg<'v, D: DocValue<'v>>(arg: &'v Expr, row: &Row<'v, D>) -> Result<Option<i64>, ExecError> {
    Ok(match eval(arg, row)? {
        Value::Int(i) => Some(i),
        Value::Null => None,
        v @ (Value::Str(_) | Value::Untyped(_) | Value::Text(_)) => match cast(v, SqlType::Int8)? {
            Value::Int(i) => Some(i),
            _ => None,
        },
        _ => None,
    })
}

fn null_if<'v, D: DocValue<'v>>(
    args: &'v [Expr],
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let (Some(a), Some(b)) = (args.first(), args.get(1)) else { return Ok(Value::Null) };
    let a = eval(a, row)?;
    let b = eval(b, row)?;
    Ok(if equals(false, &a, &b) == Some(true) { Value::Null } else { a })
}

/// `greatest` (`want` Greater) or `least` (Less): NULLs skipped, the total order of
/// [`crate::types::datum_cmp`] between the others (numbers < text < bool < json).
fn extreme<'v, D: DocValue<'v>>(
    args: &'v [Expr],
    row: &Row<'v, D>,
    want: Ordering,
) -> Result<Value<'v, D>, ExecError> {
    let mut best: Option<(Datum, Value<'v, D>)> = None;
    for arg in args {
        let v = eval(arg, row)?;
        if matches!(v, Value::Null) {
            continue;
        }
        let d = v.to_natural_datum()?;
        if best.as_ref().is_none_or(|(b, _)| crate::types::datum_cmp(&d, b) == want) {
            best = Some((d, v));
        }
    }
    Ok(best.map_or(Value::Null, |(_, v)| v))
}

fn numeric<'v, D: DocValue<'v>>(
    func: ScalarFunc,
    args: &'v [Expr],
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let Some(x) = args.first() else { return Ok(Value::Null) };
    let x = match eval(x, row)? {
        v @ (Value::Int(_) | Value::Float(_)) => v,
        v @ (Value::Str(_) | Value::Untyped(_) | Value::Text(_)) => {
            match cast(v, SqlType::Float8) {
                Ok(f @ Value::Float(_)) => f,
                _ => return Ok(Value::Null),
            }
        }
        _ => return Ok(Value::Null),
    };
    let digits = match args.get(1) {
        Some(d) => match int_arg(d, row)? {
            Some(d) => Some(d),
            None => return Ok(Value::Null),
        },
        None => None,
    };
    Ok(match (func, x, digits) {
        (ScalarFunc::Abs, Value::Int(i), _) => {
            Value::Int(i.checked_abs().ok_or(ExecError::Overflow { what: "abs" })?)
        }
        (ScalarFunc::Abs, Value::Float(f), _) => Value::Float(f.abs()),
        (ScalarFunc::Round | ScalarFunc::Floor | ScalarFunc::Ceil, Value::Int(i), None) => {
            Value::Int(i)
        }
        (ScalarFunc::Round, v, Some(d)) => {
            let f = match v {
                #[allow(clippy::cast_precision_loss)] // round(x, d) is float8, as documented
                Value::Int(i) => i as f64,
                Value::Float(f) => f,
                _ => return Ok(Value::Null),
            };
            let scale = 10f64.powi(i32::try_from(d.clamp(-308, 308)).unwrap_or(0));
            let rounded = (f * scale).round() / scale;
            Value::Float(if rounded.is_finite() { rounded } else { f })
        }
        (ScalarFunc::Round, Value::Float(f), None) => Value::Float(f.round()),
        (ScalarFunc::Floor, Value::Float(f), None) => Value::Float(f.floor()),
        (ScalarFunc::Ceil, Value::Float(f), None) => Value::Float(f.ceil()),
        _ => Value::Null,
    })
}

fn text_function<'v, D: DocValue<'v>>(
    func: ScalarFunc,
    args: &'v [Expr],
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let Some(s) = text_arg(args.first(), row)? else { return Ok(Value::Null) };
    Ok(match func {
        ScalarFunc::Replace => {
            let (Some(from), Some(to)) = (text_arg(args.get(1), row)?, text_arg(args.get(2), row)?)
            else {
                return Ok(Value::Null);
            };
            if from.is_empty() {
                return Ok(Value::Text(s));
            }
            if to.len() > from.len() {
                let grows = s.matches(from.as_str()).count().saturating_mul(to.len() - from.len());
                value_fits(s.len().saturating_add(grows))?;
            }
            Value::Text(s.replace(&from, &to))
        }
        ScalarFunc::Substr => {
            let Some(start) = args.get(1).map(|a| int_arg(a, row)).transpose()?.flatten() else {
                return Ok(Value::Null);
            };
            let count = match args.get(2) {
                Some(c) => match int_arg(c, row)? {
                    Some(c) if c < 0 => {
                        return Err(ExecError::InvalidArgument {
                            function: "substr",
                            reason: "negative substring length not allowed",
                        });
                    }
                    Some(c) => Some(c),
                    None => return Ok(Value::Null),
                },
                None => None,
            };
            // Characters at 1-based positions start .. start + count, clipped to the text.
            let end = count.map(|c| start.saturating_add(c));
            let first = start.max(1);
            let taken: String = s
                .chars()
                .zip(1i64..)
                .filter(|(_, i)| *i >= first && end.is_none_or(|e| *i < e))
                .map(|(c, _)| c)
                .collect();
            Value::Text(taken)
        }
        ScalarFunc::Btrim | ScalarFunc::Ltrim | ScalarFunc::Rtrim => {
            let chars: Vec<char> = match (args.len() > 1, text_arg(args.get(1), row)?) {
                (false, _) => vec![' '],
                (true, Some(c)) => c.chars().collect(),
                (true, None) => return Ok(Value::Null),
            };
            let strip = |c: char| chars.contains(&c);
            Value::Text(
                match func {
                    ScalarFunc::Ltrim => s.trim_start_matches(strip),
                    ScalarFunc::Rtrim => s.trim_end_matches(strip),
                    _ => s.trim_matches(strip),
                }
                .to_owned(),
            )
        }
        _ => Value::Null,
    })
}

/// A value seen as JSON: a document node, or a JSON value from the plan or computed.
#[derive(Clone, Copy)]
enum JsonView<'x, D> {
    Doc(D),
    Plan(&'x serde_json::Value),
}

impl<'v, D: DocValue<'v>> Value<'v, D> {
    /// The value of a JSON node from the plan, scalars unwrapped.
    fn from_json_ref(v: &'v serde_json::Value) -> Value<'v, D> {
        match v {
            serde_json::Value::String(s) => Value::Str(s),
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => Value::JsonRef(v),
            scalar => Value::from_json_scalar(scalar),
        }
    }

    /// The value of an owned JSON value, scalars unwrapped.
    fn from_json_owned(v: serde_json::Value) -> Value<'v, D> {
        match v {
            serde_json::Value::String(s) => Value::Text(s),
            serde_json::Value::Array(_) | serde_json::Value::Object(_) => Value::Json(v),
            scalar => Value::from_json_scalar(&scalar),
        }
    }

    /// A JSON null, boolean or number (anything else is NULL).
    fn from_json_scalar(v: &serde_json::Value) -> Value<'v, D> {
        match v {
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            _ => Value::Null,
        }
    }

    /// The strings of a JSON array (the planner's form of a text array: `?|` keys, `#-` and
    /// `jsonb_set` paths, `- ARRAY[…]`); `None` for anything but an array.
    fn texts(&self) -> Option<Vec<&str>> {
        match self {
            Value::JsonRef(serde_json::Value::Array(items))
            | Value::Json(serde_json::Value::Array(items)) => {
                Some(items.iter().filter_map(serde_json::Value::as_str).collect())
            }
            _ => None,
        }
    }

    /// This value as JSON; scalars are written into `scratch` first. `None` for NULL.
    fn json_view<'x>(
        &'x self,
        scratch: &'x mut Option<serde_json::Value>,
    ) -> Result<Option<JsonView<'x, D>>, ExecError> {
        Ok(Some(match self {
            Value::Null => return Ok(None),
            Value::Doc(d) => JsonView::Doc(*d),
            Value::JsonRef(v) => JsonView::Plan(v),
            Value::Json(v) => JsonView::Plan(v),
            scalar => JsonView::Plan(scratch.insert(scalar.to_json()?)),
        }))
    }
}

/// jsonb's binary operators over `row`: evaluated here, out of `eval`, so their operands
/// stay out of the recursive frame.
#[inline(never)]
fn json_binary<'v, D: DocValue<'v>>(
    op: BinaryOp,
    left: &'v Expr,
    right: &'v Expr,
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let (l, r) = (eval(left, row)?, eval(right, row)?);
    if op.is_json_test() { json_test(op, l, r) } else { json_delete(op, l, r) }
}

/// [`json_path`] of `base` over `row`, out of `eval` (see [`json_binary`]).
#[inline(never)]
fn json_path_of<'v, D: DocValue<'v>>(
    base: &'v Expr,
    steps: &'v [JsonStep],
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    Ok(json_path(eval(base, row)?, steps))
}

/// jsonb access (`->`, `#>`) that indexes arrays, over any JSON value; NULL where a step does
/// not fit.
fn json_path<'v, D: DocValue<'v>>(base: Value<'v, D>, steps: &'v [JsonStep]) -> Value<'v, D> {
    fn walk<'a, J: DocValue<'a>>(mut at: J, steps: &[JsonStep]) -> Option<J> {
        for step in steps {
            at = step.apply(at)?;
        }
        Some(at)
    }
    match base {
        Value::Doc(d) => walk(d, steps).map_or(Value::Null, Value::from_doc),
        Value::JsonRef(v) => walk(v, steps).map_or(Value::Null, Value::from_json_ref),
        Value::Json(v) => {
            walk(&v, steps).map_or(Value::Null, |x| Value::from_json_owned(x.clone()))
        }
        // A scalar has no members or elements.
        _ => Value::Null,
    }
}

/// `@>`, `<@`, `?`, `?|`, `?&` (NULL on either side gives NULL).
fn json_test<'v, D: DocValue<'v>>(
    op: BinaryOp,
    l: Value<'v, D>,
    r: Value<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let (mut ls, mut rs) = (None, None);
    let (Some(lv), Some(rv)) = (l.json_view(&mut ls)?, r.json_view(&mut rs)?) else {
        return Ok(Value::Null);
    };
    let (outer, inner) = if op == BinaryOp::ContainedBy { (rv, lv) } else { (lv, rv) };
    let has = |key: &str| match outer {
        JsonView::Doc(d) => has_key(d, key),
        JsonView::Plan(v) => has_key(v, key),
    };
    let keys = |want_all: bool| -> Option<bool> {
        let texts = r.texts()?;
        Some(if want_all { texts.into_iter().all(has) } else { texts.into_iter().any(has) })
    };
    Ok(match op {
        BinaryOp::Contains | BinaryOp::ContainedBy => Value::Bool(match (outer, inner) {
            (JsonView::Doc(a), JsonView::Doc(b)) => json_contains(a, b, true),
            (JsonView::Doc(a), JsonView::Plan(b)) => json_contains(a, b, true),
            (JsonView::Plan(a), JsonView::Doc(b)) => json_contains(a, b, true),
            (JsonView::Plan(a), JsonView::Plan(b)) => json_contains(a, b, true),
        }),
        BinaryOp::HasKey => match r.as_str() {
            Some(key) => Value::Bool(has(key)),
            None => Value::Null,
        },
        BinaryOp::HasAnyKey => keys(false).map_or(Value::Null, Value::Bool),
        BinaryOp::HasAllKeys => keys(true).map_or(Value::Null, Value::Bool),
        _ => Value::Null,
    })
}

/// PostgreSQL's jsonb `?`: `key` is a member of an object, a string element of an array, or
/// the string itself.
fn has_key<'a, J: DocValue<'a>>(v: J, key: &str) -> bool {
    match v.kind() {
        ValueKind::Object => v.field(key).is_some(),
        ValueKind::Array => {
            (0..v.len()).any(|i| v.element(i).and_then(|e| e.as_str()) == Some(key))
        }
        ValueKind::Str => v.as_str() == Some(key),
        _ => false,
    }
}

/// PostgreSQL's jsonb containment (`a @> b`): an object contains an object whose every member
/// it has with a value that contains the other's; an array contains an array whose every
/// element is contained by one of its elements (order and repetition do not matter); scalars
/// contain equal scalars (numbers by value). At the top level only (`top`), an array also
/// contains a scalar that is one of its elements. Arrays are compared element by element, so
/// the cost is at most the product of their lengths, as in PostgreSQL.
pub fn json_contains<'a, 'b, A: DocValue<'a>, B: DocValue<'b>>(a: A, b: B, top: bool) -> bool {
    match (a.kind(), b.kind()) {
        (ValueKind::Object, ValueKind::Object) => {
            let mut all = true;
            b.for_each_member(&mut |key, bv| {
                all = all && a.field(key).is_some_and(|av| json_contains(av, bv, false));
            });
            all
        }
        (ValueKind::Array, ValueKind::Array) => (0..b.len()).all(|i| {
            b.element(i).is_some_and(|bv| {
                (0..a.len()).any(|j| a.element(j).is_some_and(|av| json_contains(av, bv, false)))
            })
        }),
        (ValueKind::Array, ValueKind::Object) | (ValueKind::Object, _) | (_, ValueKind::Object) => {
            false
        }
        (ValueKind::Array, _) => {
            top && (0..a.len()).any(|j| a.element(j).is_some_and(|av| scalar_equal(av, b)))
        }
        (_, ValueKind::Array) => false,
        _ => scalar_equal(a, b),
    }
}

/// Equality of two JSON scalars as jsonb compares them: numbers by value, strings byte-wise.
fn scalar_equal<'a, 'b, A: DocValue<'a>, B: DocValue<'b>>(a: A, b: B) -> bool {
    match (a.kind(), b.kind()) {
        (ValueKind::Null, ValueKind::Null) => true,
        (ValueKind::Bool, ValueKind::Bool) => a.as_bool() == b.as_bool(),
        (ValueKind::Str, ValueKind::Str) => a.as_str() == b.as_str(),
        (ValueKind::Int, ValueKind::Int) => a.as_i64() == b.as_i64(),
        (ValueKind::Int | ValueKind::Float, ValueKind::Int | ValueKind::Float) => {
            match (a.as_i64(), b.as_i64(), a.as_f64(), b.as_f64()) {
                (Some(i), None, _, Some(f)) | (None, Some(i), Some(f), _) => {
                    cmp_int_float(i, f) == Ordering::Equal
                }
                (_, _, Some(x), Some(y)) => cmp_float(x, y) == Ordering::Equal,
                _ => false,
            }
        }
        _ => false,
    }
}

/// `jsonb_typeof` and `jsonb_array_length` of one value.
#[inline(never)]
fn json_function<'v, D: DocValue<'v>>(
    func: ScalarFunc,
    x: Value<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let mut scratch = None;
    let Some(view) = x.json_view(&mut scratch)? else { return Ok(Value::Null) };
    let (kind, len) = match view {
        JsonView::Doc(d) => (d.kind(), d.len()),
        JsonView::Plan(v) => (v.kind(), v.len()),
    };
    Ok(match func {
        ScalarFunc::JsonTypeof => Value::Str(match kind {
            ValueKind::Null => "null",
            ValueKind::Bool => "boolean",
            ValueKind::Int | ValueKind::Float => "number",
            ValueKind::Str => "string",
            ValueKind::Array => "array",
            ValueKind::Object => "object",
        }),
        ScalarFunc::JsonArrayLength if kind == ValueKind::Array => {
            Value::Int(i64::try_from(len).unwrap_or(i64::MAX))
        }
        ScalarFunc::JsonArrayLength => {
            return Err(ExecError::InvalidArgument {
                function: "jsonb_array_length",
                reason: "cannot get array length of a non-array",
            });
        }
        _ => Value::Null,
    })
}

/// jsonb's `-` (keys or string elements named by a text or a JSON array of texts) and `#-`
/// (the path a JSON array of texts names). NULL on either side, or a left side that is not an
/// array or object, gives NULL (the module's rule: mismatched kinds never raise).
fn json_delete<'v, D: DocValue<'v>>(
    op: BinaryOp,
    l: Value<'v, D>,
    r: Value<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    if !is_container(&l) || matches!(r, Value::Null) {
        return Ok(Value::Null);
    }
    let mut doc = l.to_json()?;
    let Some(names) = r.texts().or_else(|| r.as_str().map(|s| vec![s])) else {
        return Ok(Value::Null);
    };
    if op == BinaryOp::JsonDeletePath {
        delete_path(&mut doc, &names);
    } else {
        match &mut doc {
            serde_json::Value::Object(map) => {
                for name in &names {
                    map.shift_remove(*name);
                }
            }
            serde_json::Value::Array(items) => {
                items.retain(|i| i.as_str().is_none_or(|s| !names.contains(&s)))
            }
            _ => {}
        }
    }
    Ok(Value::Json(doc))
}

/// Removes what `path` names (object keys; on arrays, the element the step's integer text
/// names, negative from the end); a path that leads nowhere removes nothing.
fn delete_path(doc: &mut serde_json::Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else { return };
    let Some(at) = walk_mut(doc, parents) else { return };
    match at {
        serde_json::Value::Object(map) => {
            map.shift_remove(*last);
        }
        serde_json::Value::Array(items) => {
            if let Some(i) = array_slot(items.len(), last) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// What `path` names inside `doc` (object keys; on arrays, integer steps), if it is there.
fn walk_mut<'a>(
    doc: &'a mut serde_json::Value,
    path: &[&str],
) -> Option<&'a mut serde_json::Value> {
    let mut at = doc;
    for step in path {
        at = match at {
            serde_json::Value::Object(map) => map.get_mut(*step)?,
            serde_json::Value::Array(items) => {
                let i = array_slot(items.len(), step)?;
                items.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(at)
}

/// The position an integer path step names in an array of `len` (negative from the end).
fn array_slot(len: usize, step: &str) -> Option<usize> {
    array_index(len, step.parse().ok()?)
}

/// `jsonb_set`, `jsonb_build_object`, `jsonb_build_array`, `to_jsonb`.
#[inline(never)]
fn json_build<'v, D: DocValue<'v>>(
    func: ScalarFunc,
    args: &'v [Expr],
    row: &Row<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let values =
        args.iter().map(|a| eval(a, row)).collect::<Result<Vec<Value<'v, D>>, ExecError>>()?;
    Ok(match func {
        ScalarFunc::ToJson => match values.first() {
            None | Some(Value::Null) => Value::Null,
            Some(v) => Value::Json(v.to_json()?),
        },
        ScalarFunc::JsonBuildArray => {
            let mut built = 0usize;
            let mut items = Vec::with_capacity(values.len());
            for v in &values {
                let item = v.to_json()?;
                built = built.saturating_add(json_bytes(&item));
                value_fits(built)?;
                items.push(item);
            }
            Value::Json(serde_json::Value::Array(items))
        }
        ScalarFunc::JsonBuildObject => {
            let mut built = 0usize;
            let mut map = serde_json::Map::new();
            for pair in values.chunks(2) {
                let [key, value] = pair else { break };
                if matches!(key, Value::Null) {
                    return Err(ExecError::InvalidArgument {
                        function: "jsonb_build_object",
                        reason: "a key must not be NULL",
                    });
                }
                let key = match cast(key.clone(), SqlType::Text)? {
                    Value::Text(t) => t,
                    other => other.as_str().unwrap_or_default().to_owned(),
                };
                let value = value.to_json()?;
                built = built.saturating_add(key.len()).saturating_add(json_bytes(&value));
                value_fits(built)?;
                map.insert(key, value);
            }
            Value::Json(serde_json::Value::Object(map))
        }
        ScalarFunc::JsonSet => {
            let (Some(target), Some(path), Some(new)) =
                (values.first(), values.get(1), values.get(2))
            else {
                return Ok(Value::Null);
            };
            if [target, path, new].iter().any(|v| matches!(v, Value::Null)) {
                return Ok(Value::Null);
            }
            let create = match values.get(3) {
                None => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Ok(Value::Null),
            };
            let Some(steps) = path.texts() else { return Ok(Value::Null) };
            let (mut doc, new) = (target.to_json()?, new.to_json()?);
            value_fits(json_bytes(&doc).saturating_add(json_bytes(&new)))?;
            set_at(&mut doc, &steps, new, create);
            Value::Json(doc)
        }
        _ => Value::Null,
    })
}

/// PostgreSQL's `jsonb_set` on an owned value: replaces what `path` names; where only its last
/// step is missing and `create`, adds it (an object member, or an array element before the
/// start for a negative index past it, after the end for a positive one); otherwise leaves
/// the value unchanged.
fn set_at(doc: &mut serde_json::Value, path: &[&str], value: serde_json::Value, create: bool) {
    let Some((last, parents)) = path.split_last() else { return };
    let Some(at) = walk_mut(doc, parents) else { return };
    match at {
        serde_json::Value::Object(map) if create || map.contains_key(*last) => {
            map.insert((*last).to_owned(), value);
        }
        serde_json::Value::Array(items) => match array_slot(items.len(), last) {
            Some(i) => {
                if let Some(slot) = items.get_mut(i) {
                    *slot = value;
                }
            }
            None if create => match last.parse::<i64>() {
                Ok(i) if i < 0 => items.insert(0, value),
                Ok(_) => items.push(value),
                Err(_) => {}
            },
            None => {}
        },
        _ => {}
    }
}

/// Whether the filter holds for the row (NULL counts as false).
pub fn matches<'v, D: DocValue<'v>>(filter: &'v Expr, row: &Row<'v, D>) -> Result<bool, ExecError> {
    Ok(matches!(eval(filter, row)?, Value::Bool(true)))
}

/// `v = c` as `=` compares (`None` is NULL); `is_id`: `v` is `id()`, compared as ids are.
fn equals<'v, D: DocValue<'v>>(is_id: bool, v: &Value<'v, D>, c: &Value<'v, D>) -> Option<bool> {
    let equal = if is_id { id_equal(v, c) } else { None };
    equal.or_else(|| compare_op(BinaryOp::Eq, v, c))
}

/// Equality of document ids: ids that differ only in case are the same document (SHARDING.md
/// §1), so `id() = 'X'` and `id() IN (…)` compare lower-cased forms. `None` when either side is
/// not text (the ordinary comparison rules then apply). Ordering (`<`, ORDER BY) keeps the
/// stored case and byte order.
fn id_equal<'v, D: DocValue<'v>>(l: &Value<'v, D>, r: &Value<'v, D>) -> Option<bool> {
    fn text<'a, 'v, D>(v: &'a Value<'v, D>) -> Option<&'a str> {
        match v {
            Value::Str(s) | Value::Untyped(s) => Some(s),
            Value::Text(s) => Some(s.as_str()),
            _ => None,
        }
    }
    let (a, b) = (text(l)?, text(r)?);
    // ASCII: the same answer as Unicode lower-casing, without allocating (filters stay
    // allocation-free). Otherwise lower-case as placement does: `K` (KELVIN SIGN) is `k`.
    Some(if a.is_ascii() && b.is_ascii() {
        a.eq_ignore_ascii_case(b)
    } else {
        router::doc_key(a) == router::doc_key(b)
    })
}

/// Three-way comparison under the module's rule: `None` when either side is NULL,
/// `Some(None)` when the kinds do not match.
fn compare<'v, D: DocValue<'v>>(l: &Value<'v, D>, r: &Value<'v, D>) -> Option<Option<Ordering>> {
    Some(match (l, r) {
        (Value::Null, _) | (_, Value::Null) => return None,
        (Value::Untyped(u), other) => return Some(compare_untyped(u, other)),
        (other, Value::Untyped(u)) => {
            return Some(compare_untyped(u, other).map(Ordering::reverse));
        }
        (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
        (Value::Int(a), Value::Float(b)) => Some(cmp_int_float(*a, *b)),
        (Value::Float(a), Value::Int(b)) => Some(cmp_int_float(*b, *a).reverse()),
        (Value::Float(a), Value::Float(b)) => Some(cmp_float(*a, *b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        _ => match (l.as_str(), r.as_str()) {
            (Some(a), Some(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
            _ => None,
        },
    })
}

/// Compares untyped text with a value, reading the text as that value's kind; text that does
/// not read as that kind is a mismatch.
fn compare_untyped<'v, D: DocValue<'v>>(u: &str, other: &Value<'v, D>) -> Option<Ordering> {
    match other {
        Value::Int(i) => match u.trim().parse::<i64>() {
            Ok(x) => Some(x.cmp(i)),
            Err(_) => parse_float(u).map(|x| cmp_int_float(*i, x).reverse()),
        },
        Value::Float(f) => parse_float(u).map(|x| cmp_float(x, *f)),
        Value::Bool(b) => parse_bool(u).map(|x| x.cmp(b)),
        _ => other.as_str().map(|s| u.as_bytes().cmp(s.as_bytes())),
    }
}

/// A comparison operator applied under the module's rule (`None` is NULL).
fn compare_op<'v, D: DocValue<'v>>(
    op: BinaryOp,
    l: &Value<'v, D>,
    r: &Value<'v, D>,
) -> Option<bool> {
    let ord = compare(l, r)?;
    Some(match ord {
        None => op == BinaryOp::Ne,
        Some(o) => match op {
            BinaryOp::Eq => o == Ordering::Equal,
            BinaryOp::Ne => o != Ordering::Equal,
            BinaryOp::Lt => o == Ordering::Less,
            BinaryOp::Le => o != Ordering::Greater,
            BinaryOp::Gt => o == Ordering::Greater,
            BinaryOp::Ge => o != Ordering::Less,
            _ => false,
        },
    })
}

fn arithmetic<'v, D: DocValue<'v>>(
    op: BinaryOp,
    l: Value<'v, D>,
    r: Value<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    let overflow = |what| ExecError::Overflow { what };
    Ok(match (numeric_untyped(l), numeric_untyped(r)) {
        (Value::Int(a), Value::Int(b)) => Value::Int(match op {
            BinaryOp::Add => a.checked_add(b).ok_or(overflow("addition"))?,
            BinaryOp::Sub => a.checked_sub(b).ok_or(overflow("subtraction"))?,
            BinaryOp::Mul => a.checked_mul(b).ok_or(overflow("multiplication"))?,
            BinaryOp::Div => {
                if b == 0 {
                    return Err(ExecError::DivisionByZero);
                }
                a.checked_div(b).ok_or(overflow("division"))?
            }
            BinaryOp::Mod => {
                if b == 0 {
                    return Err(ExecError::DivisionByZero);
                }
                a.checked_rem(b).unwrap_or(0)
            }
            _ => return Ok(Value::Null),
        }),
        (l, r) => {
            let (Some(a), Some(b)) = (as_float(&l), as_float(&r)) else {
                return Ok(Value::Null);
            };
            Value::Float(match op {
                BinaryOp::Add => a + b,
                BinaryOp::Sub => a - b,
                BinaryOp::Mul => a * b,
                BinaryOp::Div => {
                    if b == 0.0 {
                        return Err(ExecError::DivisionByZero);
                    }
                    a / b
                }
                BinaryOp::Mod => {
                    if b == 0.0 {
                        return Err(ExecError::DivisionByZero);
                    }
                    a % b
                }
                _ => return Ok(Value::Null),
            })
        }
    })
}

/// `||`. NULL on either side gives NULL. When either side is an array or object it is
/// PostgreSQL's `jsonb || jsonb` (`json_concat`), the other side read as JSON (text that
/// parses as JSON is that value, other text a JSON string): `tags || '["new"]'` appends.
/// Otherwise it is `text || text` / `anynonarray || text`: a number or boolean takes its
/// text form (`cast` to text, so a JSON string field contributes its characters, not its
/// quotes). PostgreSQL refuses `1 || 2` (no text operand); here it is `'12'`.
fn concat<'v, D: DocValue<'v>>(
    l: Value<'v, D>,
    r: Value<'v, D>,
) -> Result<Value<'v, D>, ExecError> {
    if matches!(l, Value::Null) || matches!(r, Value::Null) {
        return Ok(Value::Null);
    }
    if is_container(&l) || is_container(&r) {
        let (l, r) = (json_operand(l)?, json_operand(r)?);
        value_fits(json_bytes(&l).saturating_add(json_bytes(&r)))?;
        return Ok(Value::Json(json_concat(l, r)));
    }
    let (l, r) = (cast(l, SqlType::Text)?, cast(r, SqlType::Text)?);
    Ok(match (l.as_str(), r.as_str()) {
        (Some(a), Some(b)) => {
            value_fits(a.len().saturating_add(b.len()))?;
            Value::Text([a, b].concat())
        }
        _ => Value::Null,
    })
}

/// Refuses a value of `bytes` larger than [`VALUE_BYTES_MAX`] (called before building it
/// where its size is known first).
fn value_fits(bytes: usize) -> Result<(), ExecError> {
    if bytes > VALUE_BYTES_MAX {
        return Err(ExecError::LimitExceeded {
            what: "bytes of one text or JSON value an expression builds",
            limit: VALUE_BYTES_MAX,
        });
    }
    Ok(())
}

fn is_container<'v, D: DocValue<'v>>(v: &Value<'v, D>) -> bool {
    match v {
        Value::Doc(_) => true,
        Value::JsonRef(j) => j.is_array() || j.is_object(),
        Value::Json(j) => j.is_array() || j.is_object(),
        _ => false,
    }
}

/// One side of a JSON `||`: text that parses as JSON is that value, other text a JSON
/// string, anything else its JSON form.
fn json_operand<'v, D: DocValue<'v>>(v: Value<'v, D>) -> Result<serde_json::Value, ExecError> {
    if matches!(v, Value::Str(_) | Value::Untyped(_) | Value::Text(_))
        && let Ok(parsed) = cast(v.clone(), SqlType::Json)
    {
        return parsed.to_json();
    }
    v.to_json()
}

/// PostgreSQL's `jsonb || jsonb`: two arrays concatenate, two objects merge (the right
/// side's value wins a shared key), otherwise a side that is not an array becomes a
/// one-element array first.
fn json_concat(l: serde_json::Value, r: serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match (l, r) {
        (J::Object(mut a), J::Object(b)) => {
            a.extend(b);
            J::Object(a)
        }
        (l, r) => {
            let mut items = match l {
                J::Array(a) => a,
                other => vec![other],
            };
            match r {
                J::Array(b) => items.extend(b),
                other => items.push(other),
            }
            J::Array(items)
        }
    }
}

/// Untyped text in arithmetic reads as the number it spells (`n + $1` with `'2'`), as an
/// unknown-typed literal does in PostgreSQL; anything else is unchanged.
fn numeric_untyped<'v, D>(v: Value<'v, D>) -> Value<'v, D> {
    match v {
        Value::Untyped(s) => match s.trim().parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => parse_float(s).map_or(Value::Untyped(s), Value::Float),
        },
        other => other,
    }
}

fn as_float<D>(v: &Value<'_, D>) -> Option<f64> {
    match v {
        #[allow(clippy::cast_precision_loss)]
        // float arithmetic with an integer is inexact by definition
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

/// Casts a value to `to`. NULL stays NULL. Strings are parsed with PostgreSQL's text input
/// rules; numbers convert (floats round to the nearest integer for `int8`); anything to text
/// gives its text (containers their JSON text); text to json parses it as JSON.
pub fn cast<'v, D: DocValue<'v>>(v: Value<'v, D>, to: SqlType) -> Result<Value<'v, D>, ExecError> {
    let invalid = |v: &Value<'v, D>| ExecError::InvalidCast {
        value: match v.as_str() {
            Some(s) => format!("{s:?}"),
            None => v.kind_name().to_owned(),
        },
        to,
    };
    Ok(match (to, v) {
        (_, Value::Null) => Value::Null,
        (SqlType::Int8, Value::Int(i)) => Value::Int(i),
        (SqlType::Int8, Value::Float(f)) => {
            let r = f.round();
            // 2^63 as f64; `r` in [-2^63, 2^63) converts exactly.
            if r.is_finite()
                && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&r)
            {
                #[allow(clippy::cast_possible_truncation)]
                Value::Int(r as i64)
            } else {
                return Err(ExecError::Overflow { what: "cast to int8" });
            }
        }
        (SqlType::Int8, Value::Bool(b)) => Value::Int(i64::from(b)),
        (SqlType::Float8, Value::Float(f)) => Value::Float(f),
        (SqlType::Float8, v @ Value::Int(_)) => Value::Float(as_float(&v).unwrap_or(0.0)),
        (SqlType::Bool, Value::Bool(b)) => Value::Bool(b),
        (SqlType::Bool, Value::Int(i)) => Value::Bool(i != 0),
        (SqlType::Text, v @ (Value::Str(_) | Value::Text(_))) => v,
        (SqlType::Text, Value::Untyped(s)) => Value::Str(s),
        (SqlType::Text, Value::Int(i)) => Value::Text(i.to_string()),
        (SqlType::Text, Value::Float(f)) => Value::Text(float_text(f)),
        (SqlType::Text, Value::Bool(b)) => Value::Text(if b { "true" } else { "false" }.to_owned()),
        (SqlType::Text, v) => Value::Text(v.to_json()?.to_string()),
        (SqlType::Json, v @ (Value::Str(_) | Value::Untyped(_) | Value::Text(_))) => {
            let parsed: serde_json::Value = match v.as_str().map(serde_json::from_str) {
                Some(Ok(p)) => p,
                _ => return Err(invalid(&v)),
            };
            match Literal::from_json(parsed) {
                Literal::Null => Value::Null,
                Literal::Bool(b) => Value::Bool(b),
                Literal::Int(i) => Value::Int(i),
                Literal::Float(f) => Value::Float(f),
                Literal::Str(s) | Literal::Untyped(s) => Value::Text(s),
                Literal::Json(j) => Value::Json(j),
            }
        }
        (SqlType::Json, v) => v,
        (_, v) => match v.as_str() {
            Some(s) => match to {
                SqlType::Int8 => {
                    s.trim().parse::<i64>().map(Value::Int).map_err(|_| invalid(&v))?
                }
                SqlType::Float8 => parse_float(s).map(Value::Float).ok_or_else(|| invalid(&v))?,
                SqlType::Bool => parse_bool(s).map(Value::Bool).ok_or_else(|| invalid(&v))?,
                SqlType::Text | SqlType::Json => v,
            },
            None => return Err(invalid(&v)),
        },
    })
}

/// `ILIKE`: `like` over both sides lower-cased (Unicode lower case, as `lower()`).
#[inline(never)]
fn ilike(text: &str, pattern: &str) -> bool {
    like(&text.to_lowercase(), &pattern.to_lowercase())
}

/// SQL `LIKE`: `%` matches any run of characters, `_` exactly one, `\` makes the next
/// character literal. Iterative with one backtrack point, so linear space and no recursion.
pub fn like(text: &str, pattern: &str) -> bool {
    let t: &[u8] = text.as_bytes();
    let p: &[u8] = pattern.as_bytes();
    // Work on chars for `_`, but bytes are enough to find `%` and `\`: decode on demand.
    let (mut ti, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let pc = p.get(pi).copied();
        match pc {
            Some(b'%') => {
                star = Some((pi, ti));
                pi += 1;
                continue;
            }
            Some(b'_') => {
                ti += char_len(t, ti);
                pi += 1;
                continue;
            }
            Some(c) => {
                let (lit_start, lit_byte) = if c == b'\\' && pi + 1 < p.len() {
                    (pi + 1, p.get(pi + 1).copied())
                } else {
                    (pi, Some(c))
                };
                if lit_byte.is_some() {
                    let len = char_len(p, lit_start);
                    if p.get(lit_start..lit_start + len) == t.get(ti..ti + len) {
                        ti += len;
                        pi = lit_start + len;
                        continue;
                    }
                }
            }
            None => {}
        }
        match star {
            Some((sp, st)) => {
                let next = st + char_len(t, st);
                star = Some((sp, next));
                pi = sp + 1;
                ti = next;
            }
            None => return false,
        }
    }
    p.get(pi..).is_some_and(|rest| rest.iter().all(|&c| c == b'%'))
}

/// Byte length of the UTF-8 character starting at `at` (1 past the end or on a bad byte).
fn char_len(s: &[u8], at: usize) -> usize {
    match s.get(at) {
        Some(&b) if b >= 0xF0 => 4,
        Some(&b) if b >= 0xE0 => 3,
        Some(&b) if b >= 0xC0 => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(name: &str) -> Box<Expr> {
        Box::new(Expr::Field(FieldPath::new(vec![name.to_owned()])))
    }
    fn lit(l: Literal) -> Box<Expr> {
        Box::new(Expr::Literal(l))
    }
    fn holds(e: &Expr, doc: &serde_json::Value) -> Option<bool> {
        let row = Row { id: "d/1", doc: Some(doc), excluded: None };
        match eval(e, &row).expect("evaluates") {
            Value::Bool(b) => Some(b),
            Value::Null => None,
            other => panic!("not a boolean: {other:?}"),
        }
    }

    // Checks the comparison rule: numbers across int/float, mismatched kinds not equal,
    // NULL propagating, and missing fields reading as NULL.
    #[test]
    fn comparison_rule() {
        let doc = json!({"age": 30, "score": 2.5, "name": "Ann", "tags": [1]});
        let cmp = |op, f: &str, l| Expr::Binary { op, left: field(f), right: lit(l) };
        assert_eq!(holds(&cmp(BinaryOp::Eq, "age", Literal::Float(30.0)), &doc), Some(true));
        assert_eq!(holds(&cmp(BinaryOp::Lt, "score", Literal::Int(3)), &doc), Some(true));
        assert_eq!(holds(&cmp(BinaryOp::Eq, "age", Literal::Str("30".into())), &doc), Some(false));
        assert_eq!(holds(&cmp(BinaryOp::Ne, "age", Literal::Str("30".into())), &doc), Some(true));
        assert_eq!(holds(&cmp(BinaryOp::Lt, "age", Literal::Str("zz".into())), &doc), Some(false));
        assert_eq!(holds(&cmp(BinaryOp::Eq, "tags", Literal::Int(1)), &doc), Some(false));
        assert_eq!(holds(&cmp(BinaryOp::Eq, "missing", Literal::Int(1)), &doc), None);
        assert_eq!(holds(&cmp(BinaryOp::Gt, "name", Literal::Str("Al".into())), &doc), Some(true));
        let is_null = Expr::IsNull { expr: field("missing"), negated: false };
        assert_eq!(holds(&is_null, &doc), Some(true));
    }

    // Checks that id() equality and IN ignore case, as placement and storage do (ids differing
    // only in case are one document), while ordering keeps byte order.
    #[test]
    fn id_equality_ignores_case() {
        let doc = json!({});
        let id_cmp = |op, l: &str| Expr::Binary {
            op,
            left: Box::new(Expr::Id),
            right: lit(Literal::Str(l.into())),
        };
        assert_eq!(holds(&id_cmp(BinaryOp::Eq, "D/1"), &doc), Some(true));
        assert_eq!(holds(&id_cmp(BinaryOp::Ne, "D/1"), &doc), Some(false));
        assert_eq!(holds(&id_cmp(BinaryOp::Eq, "d/2"), &doc), Some(false));
        assert_eq!(
            holds(&id_cmp(BinaryOp::Lt, "D/1"), &doc),
            Some(false),
            "'d/1' > 'D/1' bytewise"
        );
        let in_list = Expr::InList {
            expr: Box::new(Expr::Id),
            list: vec![
                Expr::Literal(Literal::Str("x".into())),
                Expr::Literal(Literal::Str("D/1".into())),
            ],
            negated: false,
        };
        assert_eq!(holds(&in_list, &doc), Some(true));
    }

    // Checks three-valued AND/OR/NOT and IN with NULL candidates.
    #[test]
    fn three_valued_logic() {
        let doc = json!({"t": true, "f": false});
        let and = Expr::Binary { op: BinaryOp::And, left: field("missing"), right: field("f") };
        assert_eq!(holds(&and, &doc), Some(false));
        let or = Expr::Binary { op: BinaryOp::Or, left: field("missing"), right: field("f") };
        assert_eq!(holds(&or, &doc), None);
        let not = Expr::Unary { op: UnaryOp::Not, expr: field("missing") };
        assert_eq!(holds(&not, &doc), None);
        let in_list = Expr::InList {
            expr: lit(Literal::Int(1)),
            list: vec![Expr::Literal(Literal::Null), Expr::Literal(Literal::Int(2))],
            negated: false,
        };
        assert_eq!(holds(&in_list, &doc), None);
    }

    // Checks LIKE wildcards, escapes and multi-byte characters.
    #[test]
    fn like_patterns() {
        assert!(like("customers/1", "customers/%"));
        assert!(!like("orders/1", "customers/%"));
        assert!(like("abc", "a_c"));
        assert!(like("åbc", "_bc"));
        assert!(like("a%b", "a\\%b"));
        assert!(!like("axb", "a\\%b"));
        assert!(like("", "%"));
        assert!(like("abcabd", "%ab_"));
        assert!(!like("abc", "ab"));
        assert!(like("mississippi", "%iss%ppi"));
    }

    // Checks casts follow PostgreSQL's input rules and raise on bad input.
    #[test]
    fn casts() {
        type V<'a> = Value<'a, &'a serde_json::Value>;
        let ok = |v: V<'static>, to| cast(v, to).expect("casts").to_natural_datum().expect("datum");
        assert_eq!(ok(Value::Str(" 12 "), SqlType::Int8), Datum::Int8(12));
        assert_eq!(ok(Value::Float(2.5), SqlType::Int8), Datum::Int8(3));
        assert_eq!(ok(Value::Int(2), SqlType::Text), Datum::Text("2".into()));
        assert_eq!(ok(Value::Str("yes"), SqlType::Bool), Datum::Bool(true));
        assert_eq!(ok(Value::Str("[1,2]"), SqlType::Json), Datum::Json(json!([1, 2])));
        assert!(matches!(cast(V::Str("x1"), SqlType::Int8), Err(ExecError::InvalidCast { .. })));
        assert!(matches!(cast(V::Float(1e300), SqlType::Int8), Err(ExecError::Overflow { .. })));
    }

    // Checks integer arithmetic is checked and non-numbers give NULL.
    #[test]
    fn arithmetic_rules() {
        let doc = json!({"n": 7, "s": "x"});
        let row = Row { id: "a", doc: Some(&doc), excluded: None };
        let bin = |op, l, r| Expr::Binary { op, left: l, right: r };
        let e = bin(BinaryOp::Div, field("n"), lit(Literal::Int(2)));
        assert!(matches!(eval(&e, &row), Ok(Value::Int(3))));
        let e = bin(BinaryOp::Div, field("n"), lit(Literal::Int(0)));
        assert!(matches!(eval(&e, &row), Err(ExecError::DivisionByZero)));
        let e = bin(BinaryOp::Add, lit(Literal::Int(i64::MAX)), field("n"));
        assert!(matches!(eval(&e, &row), Err(ExecError::Overflow { .. })));
        let e = bin(BinaryOp::Add, field("s"), lit(Literal::Int(1)));
        assert!(matches!(eval(&e, &row), Ok(Value::Null)));
        let e = bin(BinaryOp::Add, field("n"), lit(Literal::Untyped("2".into())));
        assert!(matches!(eval(&e, &row), Ok(Value::Int(9))));
        let e = bin(BinaryOp::Add, field("n"), lit(Literal::Untyped("x".into())));
        assert!(matches!(eval(&e, &row), Ok(Value::Null)));
        let e = bin(BinaryOp::Mul, field("n"), lit(Literal::Float(0.5)));
        assert!(matches!(eval(&e, &row), Ok(Value::Float(f)) if f == 3.5));
    }
}
