//! Per-fragment execution over a narrow [`FragmentSource`], producing owned, small results
//! that cross executors as messages: a [`Partial`] for SELECT, a [`WritePartial`] (write
//! intents for storage, with the version each decision read) for INSERT, UPDATE and DELETE.
//!
//! A filter of the form `id() = 'x'` or `id() IN (…)` (alone or inside a top-level `AND`)
//! is answered with [`FragmentSource::get`] instead of a scan; the whole filter is still
//! checked on the document fetched. Both paths agree on ids that differ only in case: `get`
//! looks ids up case-insensitively and `id()` equality ignores case (see [`crate::expr`]).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use router::doc::DocValue;
use router::{ShardId, ShardRange};

use crate::error::ExecError;
use crate::expr::{
    BinaryOp, Expr, FieldPath, Literal, Row, Value, cast, doc_to_json, eval, matches,
};
use crate::limits::{
    AGGREGATED_BYTES_MAX, DISTINCT_VALUES_MAX, GROUPS_MAX, RESULT_BYTES_MAX, RESULT_ROWS_MAX,
    STREAM_PAGE_BYTES, STREAM_PAGE_ROWS, STREAM_PAGE_SCANNED, WRITE_BYTES_MAX, WRITE_DOCS_MAX,
};
use crate::memory::{datum_bytes, json_bytes, row_bytes};
use crate::plan::{
    Aggregate, AggregateFunc, Assignment, CollectionName, Count, Delete, Insert, InsertBody,
    OnConflict, OrderKey, OrderTarget, Output, OutputColumn, Select, SelectShape, Statement,
    Update,
};
use crate::types::{Datum, OrdDatum, SqlType, datum_cmp};

/// A document's version as storage tracks it, for optimistic concurrency: a write intent
/// carries the version its decision read, and storage refuses it if the document changed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct DocVersion(u64);

impl DocVersion {
    /// A version from storage's number.
    pub const fn new(value: u64) -> DocVersion {
        DocVersion(value)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// One stored document as a fragment hands it to the executor.
#[derive(Clone, Copy, Debug)]
pub struct SourceDoc<'a, D> {
    /// The id as first written (original case).
    pub id: &'a str,
    /// Its shard.
    pub shard: ShardId,
    /// Its current version.
    pub version: DocVersion,
    /// The document.
    pub doc: D,
}

/// The read side of one fragment, as the executor needs it. `storage` implements this (in
/// `node`, which may depend on both) for a fragment; tests implement it over a `BTreeMap`.
pub trait FragmentSource {
    /// The borrowed document view.
    type Doc<'a>: DocValue<'a>
    where
        Self: 'a;

    /// The live document with this id in the collection, ids compared case-insensitively.
    fn get<'a>(
        &'a self,
        collection: &CollectionName,
        id: &str,
    ) -> Option<SourceDoc<'a, Self::Doc<'a>>>;

    /// Visits every live document of the collection whose shard lies in one of `ranges`,
    /// until `visit` returns `Break`.
    fn scan<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    );
}

/// A source that can resume a scan: what [`execute_select_page`] reads.
pub trait PagedSource: FragmentSource {
    /// Like [`FragmentSource::scan`] over `ranges` (sorted by start, disjoint), visiting in
    /// (shard, lower-cased id) order only the documents after `after` when given.
    fn scan_after<'a>(
        &'a self,
        collection: &CollectionName,
        ranges: &[ShardRange],
        after: Option<&ScanPos>,
        visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
    );
}

/// Where a page of a scan ended: the last document it read, as the scan orders documents
/// (by shard, then lower-cased id). The next page starts after it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ScanPos {
    /// The document's shard.
    pub shard: ShardId,
    /// Its lower-cased id (`router::doc_key`).
    pub key: String,
}

/// Where a scan resuming after `after` takes up `range` (a [`PagedSource`] visits its ranges
/// sorted by start): `None` when the range lies wholly before the position (read by earlier
/// pages), else the position to resume after inside it (`Some(None)`: from its start).
pub fn resume_point(after: Option<&ScanPos>, range: ShardRange) -> Option<Option<&ScanPos>> {
    match after {
        Some(p) if p.shard.get() >= range.end() => None,
        Some(p) if p.shard.get() >= range.start() => Some(Some(p)),
        _ => Some(None),
    }
}

/// One fragment's share of a SELECT: owned, small (bounded by LIMIT + OFFSET when the query
/// orders and limits), sent to the session's executor for [`crate::merge`].
#[derive(Clone, PartialEq, Debug)]
pub struct Partial {
    /// Documents read (matching or not).
    pub rows_scanned: u64,
    /// Rows or aggregate states.
    pub body: PartialBody,
}

/// The content of a [`Partial`].
#[derive(Clone, PartialEq, Debug)]
pub enum PartialBody {
    /// Plain rows (already cut to the fragment's top LIMIT + OFFSET when ordered).
    Rows(Vec<PartialRow>),
    /// Partial aggregate states per group.
    Groups(Vec<GroupPartial>),
}

/// One row of a plain SELECT, with its sort keys and the document id that breaks ties.
#[derive(Clone, PartialEq, Debug)]
pub struct PartialRow {
    /// The document id.
    pub id: String,
    /// Output values, one per column.
    pub values: Vec<Datum>,
    /// Sort keys, one per ORDER BY key.
    pub keys: Vec<Datum>,
}

/// One group's partial aggregate states.
#[derive(Clone, PartialEq, Debug)]
pub struct GroupPartial {
    /// The GROUP BY values.
    pub key: Vec<Datum>,
    /// One state per aggregate.
    pub states: Vec<AggState>,
}

/// The mergeable state of one aggregate.
#[derive(Clone, PartialEq, Debug)]
pub enum AggState {
    /// `count`
    Count(i64),
    /// `count`, `sum` or `avg` of `DISTINCT e`: the distinct values seen (canonical numbers);
    /// a query's sets together hold at most [`DISTINCT_VALUES_MAX`] ([`Budget`]).
    Distinct(BTreeSet<OrdDatum>),
    /// `sum` of `int8`
    SumInt(Option<i64>),
    /// `sum` of anything else (numbers only)
    SumFloat(Option<f64>),
    /// `min`
    Min(Option<Datum>),
    /// `max`
    Max(Option<Datum>),
    /// `avg` (numbers only)
    Avg {
        /// Sum of the numbers.
        sum: f64,
        /// How many.
        count: i64,
    },
    /// `jsonb_agg`, `jsonb_object_agg`, `string_agg`: every value kept, in arrival order (the
    /// merge sorts them by the call's ORDER BY); a query's lists together hold at most
    /// [`AGGREGATED_BYTES_MAX`] ([`Budget`]).
    Collect(Vec<Collected>),
}

/// What adding a document made a state hold newly: values of a `count(DISTINCT …)` set, bytes
/// of a collecting aggregate (charged to the query's two [`Budget`]s).
#[derive(Clone, Copy, Default, Debug)]
struct Held {
    values: usize,
    bytes: usize,
}

/// One value a collecting aggregate keeps.
#[derive(Clone, PartialEq, Debug)]
pub struct Collected {
    /// The call's ORDER BY keys for it.
    pub keys: Vec<Datum>,
    /// `jsonb_agg`, `jsonb_object_agg`: the JSON value; `string_agg`: the text.
    pub value: Datum,
    /// `jsonb_object_agg`: the key (text); `string_agg`: the delimiter before it (text, or
    /// NULL for none); `jsonb_agg`: NULL.
    pub extra: Datum,
}

impl Collected {
    /// The bytes it holds in memory, for [`AGGREGATED_BYTES_MAX`].
    fn bytes(&self) -> usize {
        self.keys.iter().chain([&self.value, &self.extra]).map(datum_bytes).sum()
    }
}

/// The value one document gives a collecting aggregate, `None` when it adds nothing
/// (`string_agg` of NULL).
fn collected<'v, D: DocValue<'v>>(
    agg: &'v Aggregate,
    row: &Row<'v, D>,
) -> Result<Option<Collected>, ExecError> {
    let arg = match &agg.arg {
        Some(a) => eval(a, row)?,
        None => Value::Null,
    };
    let text = |v: Value<'v, D>| -> Result<Datum, ExecError> {
        Ok(match cast(v, SqlType::Text)? {
            Value::Null => Datum::Null,
            other => other.to_datum(SqlType::Text)?,
        })
    };
    let (value, extra) = match agg.func {
        AggregateFunc::JsonAgg => (Datum::Json(arg.to_json()?), Datum::Null),
        AggregateFunc::JsonObjectAgg => {
            if matches!(arg, Value::Null) {
                return Err(ExecError::InvalidArgument {
                    function: "jsonb_object_agg",
                    reason: "a key must not be NULL",
                });
            }
            let value = match &agg.arg2 {
                Some(v) => eval(v, row)?.to_json()?,
                None => serde_json::Value::Null,
            };
            (Datum::Json(value), text(arg)?)
        }
        _ => {
            if matches!(arg, Value::Null) {
                return Ok(None);
            }
            let delimiter = match &agg.arg2 {
                Some(d) => text(eval(d, row)?)?,
                None => Datum::Null,
            };
            (text(arg)?, delimiter)
        }
    };
    let keys = agg
        .order_by
        .iter()
        .map(|k| match &k.target {
            OrderTarget::Expr(e) => eval(e, row)?.to_natural_datum(),
            OrderTarget::Output(_) => Ok(Datum::Null),
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    Ok(Some(Collected { keys, value, extra }))
}

/// The result of a collecting aggregate from its values (from every fragment): sorted by the
/// call's ORDER BY (stable: ties keep arrival order), then joined. NULL over no values.
fn finish_collected(mut items: Vec<Collected>, agg: &Aggregate) -> Result<Datum, ExecError> {
    if items.is_empty() {
        return Ok(Datum::Null);
    }
    if !agg.order_by.is_empty() {
        items.sort_by(|a, b| cmp_parts(&agg.order_by, &a.keys, "", &b.keys, ""));
    }
    Ok(match agg.func {
        AggregateFunc::JsonAgg => Datum::Json(serde_json::Value::Array(
            items
                .into_iter()
                .map(|c| match c.value {
                    Datum::Json(v) => v,
                    _ => serde_json::Value::Null,
                })
                .collect(),
        )),
        AggregateFunc::JsonObjectAgg => {
            let mut map = serde_json::Map::new();
            for c in items {
                if let (Datum::Text(key), Datum::Json(v)) = (c.extra, c.value) {
                    map.insert(key, v);
                }
            }
            Datum::Json(serde_json::Value::Object(map))
        }
        _ => {
            let mut out = String::new();
            for (i, c) in items.into_iter().enumerate() {
                if i > 0
                    && let Datum::Text(d) = &c.extra
                {
                    out.push_str(d);
                }
                if let Datum::Text(t) = c.value {
                    out.push_str(&t);
                }
            }
            Datum::Text(out)
        }
    })
}

impl AggState {
    fn new(a: &Aggregate) -> AggState {
        match a.func {
            AggregateFunc::Count => AggState::Count(0),
            AggregateFunc::CountDistinct
            | AggregateFunc::SumDistinct
            | AggregateFunc::AvgDistinct => AggState::Distinct(BTreeSet::new()),
            AggregateFunc::Sum if a.ty == SqlType::Int8 => AggState::SumInt(None),
            AggregateFunc::Sum => AggState::SumFloat(None),
            AggregateFunc::Min => AggState::Min(None),
            AggregateFunc::Max => AggState::Max(None),
            AggregateFunc::Avg => AggState::Avg { sum: 0.0, count: 0 },
            AggregateFunc::JsonAgg | AggregateFunc::JsonObjectAgg | AggregateFunc::StringAgg => {
                AggState::Collect(Vec::new())
            }
        }
    }

    /// Adds one value (`None` for `count(*)`'s row). Returns how many values the state newly
    /// holds (one for a value new to a `count(DISTINCT …)` set, else none).
    fn add<'v, D: DocValue<'v>>(&mut self, v: Option<&Value<'v, D>>) -> Result<usize, ExecError> {
        let overflow = ExecError::Overflow { what: "sum" };
        match (self, v) {
            (AggState::Count(n), None) => *n = n.saturating_add(1),
            (_, Some(Value::Null)) => {}
            (AggState::Count(n), Some(_)) => *n = n.saturating_add(1),
            (AggState::Distinct(seen), Some(v)) => {
                return Ok(usize::from(seen.insert(OrdDatum(canonical(v.to_natural_datum()?)))));
            }
            (AggState::SumInt(s), Some(Value::Int(i))) => {
                *s = Some(s.unwrap_or(0).checked_add(*i).ok_or(overflow)?)
            }
            (AggState::SumFloat(s), Some(v)) => {
                if let Some(f) = number(v) {
                    *s = Some(s.unwrap_or(0.0) + f);
                }
            }
            (AggState::Avg { sum, count }, Some(v)) => {
                if let Some(f) = number(v) {
                    *sum += f;
                    *count = count.saturating_add(1);
                }
            }
            (AggState::Min(m), Some(v)) => {
                keep(m, canonical(v.to_natural_datum()?), Ordering::Less)
            }
            (AggState::Max(m), Some(v)) => {
                keep(m, canonical(v.to_natural_datum()?), Ordering::Greater)
            }
            // A non-integer reaching an int8 sum cannot happen (its argument is a cast to
            // int8); ignoring it matches how sums treat values that are not numbers.
            (AggState::SumInt(_), Some(_)) => {}
            // Only count(*) passes no value; other aggregates always have an argument.
            (_, None) => {}
            // Collecting states take whole documents (`add_row`), never a value.
            (AggState::Collect(_), Some(_)) => {}
        }
        Ok(0)
    }

    /// Adds one document's contribution (its `FILTER` already passed): what the state newly
    /// holds, for the query's [`Budget`]s.
    fn add_row<'v, D: DocValue<'v>>(
        &mut self,
        agg: &'v Aggregate,
        row: &Row<'v, D>,
    ) -> Result<Held, ExecError> {
        if let AggState::Collect(items) = self {
            let Some(item) = collected(agg, row)? else { return Ok(Held::default()) };
            let bytes = item.bytes();
            items.push(item);
            return Ok(Held { values: 0, bytes });
        }
        let values = match &agg.arg {
            None => self.add::<D>(None)?,
            Some(arg) => self.add(Some(&eval(arg, row)?))?,
        };
        Ok(Held { values, bytes: 0 })
    }

    /// Values a `count(DISTINCT …)` state holds (none for the others).
    fn held(&self) -> usize {
        match self {
            AggState::Distinct(seen) => seen.len(),
            _ => 0,
        }
    }

    /// Folds another fragment's state for the same aggregate into this one. Returns how many
    /// values this state newly holds (as [`AggState::add`]).
    fn combine(&mut self, other: AggState) -> Result<usize, ExecError> {
        match (self, other) {
            (AggState::Count(a), AggState::Count(b)) => *a = a.saturating_add(b),
            (AggState::Distinct(a), AggState::Distinct(b)) => {
                let before = a.len();
                a.extend(b);
                return Ok(a.len() - before);
            }
            (AggState::SumInt(a), AggState::SumInt(b)) => {
                if let Some(b) = b {
                    *a = Some(
                        a.unwrap_or(0).checked_add(b).ok_or(ExecError::Overflow { what: "sum" })?,
                    );
                }
            }
            (AggState::SumFloat(a), AggState::SumFloat(b)) => {
                if let Some(b) = b {
                    *a = Some(a.unwrap_or(0.0) + b);
                }
            }
            (AggState::Min(a), AggState::Min(b)) => {
                if let Some(b) = b {
                    keep(a, b, Ordering::Less);
                }
            }
            (AggState::Max(a), AggState::Max(b)) => {
                if let Some(b) = b {
                    keep(a, b, Ordering::Greater);
                }
            }
            (AggState::Avg { sum, count }, AggState::Avg { sum: s, count: c }) => {
                *sum += s;
                *count = count.saturating_add(c);
            }
            (AggState::Collect(a), AggState::Collect(b)) => a.extend(b),
            _ => return Err(ExecError::PartialMismatch { what: "aggregate state kinds differ" }),
        }
        Ok(0)
    }

    /// The aggregate's result from its state (the merged state of every fragment).
    fn finish(self, agg: &Aggregate) -> Result<Datum, ExecError> {
        match self {
            AggState::Count(n) => Ok(Datum::Int8(n)),
            AggState::Distinct(seen) => finish_distinct(seen, agg),
            AggState::SumInt(s) => Ok(s.map_or(Datum::Null, Datum::Int8)),
            AggState::SumFloat(s) => Ok(s.map_or(Datum::Null, Datum::Float8)),
            AggState::Min(m) | AggState::Max(m) => m.map_or(Ok(Datum::Null), |d| coerce(d, agg.ty)),
            #[allow(clippy::cast_precision_loss)] // an average is a float by definition
            AggState::Avg { sum, count } => {
                Ok(if count == 0 { Datum::Null } else { Datum::Float8(sum / count as f64) })
            }
            AggState::Collect(items) => finish_collected(items, agg),
        }
    }

    /// Bytes a collecting state holds (none for the others).
    fn collected_bytes(&self) -> usize {
        match self {
            AggState::Collect(items) => items.iter().map(Collected::bytes).sum(),
            _ => 0,
        }
    }
}

/// The result of a DISTINCT aggregate from its set of values: how many, or the sum or mean
/// of the numbers among them (NULL when there are none), as the plain aggregate types it.
fn finish_distinct(seen: BTreeSet<OrdDatum>, agg: &Aggregate) -> Result<Datum, ExecError> {
    let (func, ty) = (agg.func, agg.ty);
    if func == AggregateFunc::CountDistinct {
        return Ok(Datum::Int8(i64::try_from(seen.len()).unwrap_or(i64::MAX)));
    }
    let mut state = match (func, ty) {
        (AggregateFunc::SumDistinct, SqlType::Int8) => AggState::SumInt(None),
        (AggregateFunc::SumDistinct, _) => AggState::SumFloat(None),
        _ => AggState::Avg { sum: 0.0, count: 0 },
    };
    for OrdDatum(d) in seen {
        let partial = match (&state, d) {
            (AggState::SumInt(_), Datum::Int8(i)) => AggState::SumInt(Some(i)),
            (AggState::SumInt(_), _) => continue,
            (AggState::SumFloat(_), Datum::Int8(i)) => AggState::SumFloat(Some(i as f64)),
            (AggState::SumFloat(_), Datum::Float8(f)) => AggState::SumFloat(Some(f)),
            (AggState::Avg { .. }, Datum::Int8(i)) => AggState::Avg { sum: i as f64, count: 1 },
            (AggState::Avg { .. }, Datum::Float8(f)) => AggState::Avg { sum: f, count: 1 },
            _ => continue,
        };
        state.combine(partial)?;
    }
    state.finish(agg)
}

/// What one query's aggregate states hold over every group (per fragment and at the merge),
/// kept within a named limit: the distinct values of `count(DISTINCT …)` and its kin
/// ([`DISTINCT_VALUES_MAX`]), or the bytes of the collecting aggregates
/// ([`AGGREGATED_BYTES_MAX`]).
struct Budget {
    held: usize,
    limit: usize,
    what: &'static str,
}

impl Budget {
    fn distinct() -> Budget {
        Budget {
            held: 0,
            limit: DISTINCT_VALUES_MAX,
            what: "distinct values held by count(DISTINCT …) in one query",
        }
    }

    fn collected() -> Budget {
        Budget {
            held: 0,
            limit: AGGREGATED_BYTES_MAX,
            what: "bytes held by jsonb_agg / jsonb_object_agg / string_agg in one query",
        }
    }

    fn result() -> Budget {
        Budget {
            held: 0,
            limit: RESULT_BYTES_MAX,
            what: "bytes of rows gathered for one result (add a LIMIT, or leave out ORDER BY, \
                   LIMIT and OFFSET outside a transaction block to stream the rows)",
        }
    }

    fn spend(&mut self, amount: usize) -> Result<(), ExecError> {
        self.held = self.held.saturating_add(amount);
        if self.held > self.limit {
            return Err(ExecError::LimitExceeded { what: self.what, limit: self.limit });
        }
        Ok(())
    }
}

fn number<D>(v: &Value<'_, D>) -> Option<f64> {
    match v {
        #[allow(clippy::cast_precision_loss)] // sums and averages of json numbers are float8
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

/// One spelling per number for values that compare equal, so a group key or a MIN/MAX does
/// not depend on which fragment's document was seen first: an integral float within 2^53
/// becomes the integer (`1.0` and `1` are one group, shown as `1`).
fn canonical(d: Datum) -> Datum {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer below is exact in f64
    match d {
        Datum::Float8(f) if f.fract() == 0.0 && f.abs() < EXACT => {
            // |f| < 2^53 and integral, so the conversion is exact.
            #[allow(clippy::cast_possible_truncation)]
            Datum::Int8(f as i64)
        }
        other => other,
    }
}

/// Keeps `candidate` in `slot` when it orders `want` relative to the current value.
fn keep(slot: &mut Option<Datum>, candidate: Datum, want: Ordering) {
    if candidate.is_null() {
        return;
    }
    match slot {
        Some(current) if datum_cmp(&candidate, current) != want => {}
        _ => *slot = Some(candidate),
    }
}

/// A datum converted for an output column of type `ty` (json columns take any value; other
/// types cast).
pub fn coerce(d: Datum, ty: SqlType) -> Result<Datum, ExecError> {
    match (ty, d) {
        (_, Datum::Null) => Ok(Datum::Null),
        (SqlType::Json, Datum::Json(v)) => Ok(Datum::Json(v)),
        (SqlType::Text, Datum::Text(s)) => Ok(Datum::Text(s)),
        (SqlType::Int8, Datum::Int8(i)) => Ok(Datum::Int8(i)),
        (SqlType::Float8, Datum::Float8(f)) => Ok(Datum::Float8(f)),
        (SqlType::Bool, Datum::Bool(b)) => Ok(Datum::Bool(b)),
        (ty, d) => {
            let v: Value<'_, &serde_json::Value> = match &d {
                Datum::Null => Value::Null,
                Datum::Bool(b) => Value::Bool(*b),
                Datum::Int8(i) => Value::Int(*i),
                Datum::Float8(f) => Value::Float(*f),
                Datum::Text(s) => Value::Str(s),
                Datum::Json(j) => Value::from_doc(j),
            };
            v.to_datum(ty)
        }
    }
}

/// The ids a filter pins the query to, when it is `id() = 'x'`, `id() IN ('x', …)` or an
/// `AND` with one of those among its operands.
fn point_ids(filter: &Expr) -> Option<Vec<&str>> {
    match filter {
        Expr::Binary { op: BinaryOp::Eq, left, right } => match (left.as_ref(), right.as_ref()) {
            (Expr::Id, Expr::Literal(Literal::Str(s) | Literal::Untyped(s)))
            | (Expr::Literal(Literal::Str(s) | Literal::Untyped(s)), Expr::Id) => {
                Some(vec![s.as_str()])
            }
            _ => None,
        },
        Expr::InList { expr, list, negated: false } if matches!(expr.as_ref(), Expr::Id) => list
            .iter()
            .map(|e| match e {
                Expr::Literal(Literal::Str(s) | Literal::Untyped(s)) => Some(s.as_str()),
                _ => None,
            })
            .collect(),
        Expr::Binary { op: BinaryOp::And, left, right } => {
            point_ids(left).or_else(|| point_ids(right))
        }
        _ => None,
    }
}

/// Hands `d` to `each` when it passes `filter` (every document passes no filter).
fn if_matching<'v, D: DocValue<'v>, B>(
    filter: Option<&'v Expr>,
    d: SourceDoc<'v, D>,
    each: impl FnOnce(SourceDoc<'v, D>) -> Result<ControlFlow<B>, ExecError>,
) -> Result<ControlFlow<B>, ExecError> {
    let row = Row { id: d.id, doc: Some(d.doc), excluded: None };
    match filter {
        Some(f) if !matches(f, &row)? => Ok(ControlFlow::Continue(())),
        _ => each(d),
    }
}

/// Calls `each` with every document of the collection in `ranges` that matches `filter`,
/// stopping at `Break` or an error. Returns how many documents were read.
fn for_each_match<'s, S: FragmentSource>(
    source: &'s S,
    collection: &CollectionName,
    filter: Option<&'s Expr>,
    ranges: &[ShardRange],
    each: &mut dyn FnMut(SourceDoc<'s, S::Doc<'s>>) -> Result<ControlFlow<()>, ExecError>,
) -> Result<u64, ExecError> {
    let mut scanned = 0u64;
    let mut failed = None;
    let mut visit = |d: SourceDoc<'s, S::Doc<'s>>| -> ControlFlow<()> {
        scanned += 1;
        match if_matching(filter, d, &mut *each) {
            Ok(flow) => flow,
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        }
    };
    match filter.and_then(point_ids) {
        Some(ids) => {
            cov_mark::hit!(point_lookup);
            let mut seen = BTreeSet::new();
            for id in ids {
                let Some(d) = source.get(collection, id) else { continue };
                if !ranges.iter().any(|r| r.contains(d.shard)) || !seen.insert(d.id) {
                    continue;
                }
                if visit(d).is_break() {
                    break;
                }
            }
        }
        None => source.scan(collection, ranges, &mut visit),
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(scanned),
    }
}

/// What a slice's visitor says after one matching document ([`scan_slice`]).
enum SliceStep {
    /// Go on (the slice ends once it read its documents).
    Next,
    /// End the slice after this document (a streamed page is full).
    EndSlice,
    /// The share needs no more documents.
    Done,
}

/// Reads one slice of a share: at most `docs` documents (at least 1) of `ranges` after
/// `after`, in (shard, lower-cased id) order, passing each matching one to `each`. Returns
/// the documents read and where the next slice resumes (`Ok(None)`: the share is done), the
/// first error of `each` in place of the latter.
fn scan_slice<'a, S: PagedSource>(
    source: &'a S,
    collection: &CollectionName,
    filter: Option<&'a Expr>,
    ranges: &[ShardRange],
    after: Option<&ScanPos>,
    docs: usize,
    each: &mut dyn FnMut(SourceDoc<'a, S::Doc<'a>>) -> Result<SliceStep, ExecError>,
) -> (u64, Result<Option<ScanPos>, ExecError>) {
    let mut ranges = ranges.to_vec();
    ranges.sort_by_key(|r| r.start());
    let (mut seen, mut next, mut failed) = (0usize, None, None);
    source.scan_after(collection, &ranges, after, &mut |d| {
        seen += 1;
        let (shard, id) = (d.shard, d.id);
        let step = if_matching(filter, d, |d| {
            each(d).map(|step| match step {
                SliceStep::Next => ControlFlow::Continue(()),
                SliceStep::EndSlice => ControlFlow::Break(true),
                SliceStep::Done => ControlFlow::Break(false),
            })
        });
        // `Break(more)`: the slice ends here, and the share goes on after this document.
        let more = match step {
            // A document skipped by the filter counts towards the slice too.
            Ok(ControlFlow::Continue(())) if seen < docs => return ControlFlow::Continue(()),
            Ok(ControlFlow::Continue(())) => true,
            Ok(ControlFlow::Break(more)) => more,
            Err(e) => {
                failed = Some(e);
                false
            }
        };
        if more {
            next = Some(ScanPos { shard, key: router::doc_key(id).into_string() });
        }
        ControlFlow::Break(())
    });
    (seen as u64, failed.map_or(Ok(next), Err))
}

fn count_value(c: Option<Count>) -> Result<Option<u64>, ExecError> {
    match c {
        None => Ok(None),
        Some(Count::Value(n)) => Ok(Some(n)),
        Some(Count::Param(i)) => Err(ExecError::UnboundParameter { index: i + 1 }),
    }
}

/// How many rows a fragment must return: LIMIT + OFFSET, or everything.
fn fragment_budget(select: &Select) -> Result<Option<usize>, ExecError> {
    let limit = count_value(select.limit)?;
    let offset = count_value(select.offset)?.unwrap_or(0);
    Ok(limit.map(|l| usize::try_from(l.saturating_add(offset)).unwrap_or(usize::MAX)))
}

/// Orders two rows by the ORDER BY keys, then by document id.
pub(crate) fn cmp_rows(order_by: &[OrderKey], a: &PartialRow, b: &PartialRow) -> Ordering {
    cmp_parts(order_by, &a.keys, &a.id, &b.keys, &b.id)
}

/// [`cmp_rows`] on the parts of two rows.
fn cmp_parts(
    order_by: &[OrderKey],
    a_keys: &[Datum],
    a_id: &str,
    b_keys: &[Datum],
    b_id: &str,
) -> Ordering {
    for (i, key) in order_by.iter().enumerate() {
        let o = cmp_key(key, a_keys.get(i), b_keys.get(i));
        if o != Ordering::Equal {
            return o;
        }
    }
    a_id.cmp(b_id)
}

/// Orders two values of one key, honouring DESC and NULLS FIRST/LAST.
pub(crate) fn cmp_key(key: &OrderKey, a: Option<&Datum>, b: Option<&Datum>) -> Ordering {
    let null = Datum::Null;
    let (a, b) = (a.unwrap_or(&null), b.unwrap_or(&null));
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) => {
            if key.nulls_first {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        }
        (false, true) => {
            if key.nulls_first {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (false, false) => {
            let o = datum_cmp(a, b);
            if key.descending { o.reverse() } else { o }
        }
    }
}

/// Sorts and cuts `rows` to the best `k`.
fn truncate_top(rows: &mut Vec<PartialRow>, order_by: &[OrderKey], k: usize) {
    rows.sort_by(|a, b| cmp_rows(order_by, a, b));
    rows.truncate(k);
}

fn output_row<'v, D: DocValue<'v>>(
    outputs: &'v [Output],
    row: &Row<'v, D>,
) -> Result<Vec<Datum>, ExecError> {
    outputs.iter().map(|o| eval(&o.expr, row)?.to_datum(o.column.ty)).collect()
}

/// Runs one page of a plain SELECT (rows, no ORDER BY, LIMIT or OFFSET: what streams) on one
/// fragment's documents in `ranges`, starting after `after`: at most [`STREAM_PAGE_ROWS`]
/// rows, [`STREAM_PAGE_BYTES`] of them, [`STREAM_PAGE_SCANNED`] documents read. Returns the
/// page and where the next starts (`None`: the ranges are done). Pages read one after
/// another see each document once (the scan's order is fixed), each at its own instant: a
/// document written between pages is seen if the scan has not passed its place yet. A
/// filter on ids (`id() = …`, `id() IN (…)`) reads those documents in one page.
pub fn execute_select_page<'s, S: PagedSource>(
    select: &'s Select,
    source: &'s S,
    ranges: &[ShardRange],
    after: Option<&ScanPos>,
) -> Result<(Partial, Option<ScanPos>), ExecError> {
    if select.collection.is_none() || !matches!(select.shape, SelectShape::Rows { .. }) {
        return Err(ExecError::WrongStatement { what: "a SELECT of plain rows with FROM" });
    }
    if !select.order_by.is_empty() || select.limit.is_some() || select.offset.is_some() {
        return Err(ExecError::WrongStatement { what: "a SELECT without ORDER BY, LIMIT, OFFSET" });
    }
    let mut scan = SelectScan::new(select)?;
    scan.page = true;
    scan.after = after.cloned();
    scan.read_slice(source, ranges)?;
    let next = scan.after.take();
    Ok((scan.finish(), next))
}

/// Runs a SELECT against one fragment's documents in `ranges`, in one go.
pub fn execute_select<'s, S: FragmentSource>(
    select: &'s Select,
    source: &'s S,
    ranges: &[ShardRange],
) -> Result<Partial, ExecError> {
    let mut scan = SelectScan::new(select)?;
    scan.read_all(source, ranges)?;
    Ok(scan.finish())
}

/// One fragment's share of a SELECT, read in one go ([`SelectScan::read_all`]) or in slices
/// of at most [`STREAM_PAGE_SCANNED`] documents ([`SelectScan::read_slice`]), between which
/// the caller lets other work of its executor run: the rows or groups found so far carry over
/// from slice to slice, so the share is the same either way. Each slice sees the fragment at
/// its own instant; a document is read once (the scan's order is fixed). A streamed page
/// ([`execute_select_page`]) is one slice of a scan whose slices also end at a page's rows
/// or bytes.
pub struct SelectScan<'s> {
    select: &'s Select,
    collection: &'s CollectionName,
    /// LIMIT + OFFSET, when given: the rows the share must return.
    budget: Option<usize>,
    /// Bytes of the rows held ([`RESULT_BYTES_MAX`]).
    held: Budget,
    scanned: u64,
    /// Where the last slice ended (`None` before the first).
    after: Option<ScanPos>,
    /// A slice is a streamed page: it also ends at [`STREAM_PAGE_ROWS`] rows or
    /// [`STREAM_PAGE_BYTES`] of them (plain rows only).
    page: bool,
    /// Documents one slice reads at most ([`STREAM_PAGE_SCANNED`] unless
    /// [`SelectScan::with_slice_docs`] chose fewer).
    slice_docs: usize,
    state: ScanState<'s>,
}

/// What a scan holds, by its SELECT's shape (with the plan's parts it evaluates).
enum ScanState<'s> {
    Rows {
        outputs: &'s [Output],
        rows: Vec<PartialRow>,
        /// The k-th best row so far, once k rows are known (ORDER BY … LIMIT only).
        threshold: Option<PartialRow>,
    },
    Groups {
        group_by: &'s [Expr],
        aggregates: &'s [Aggregate],
        groups: BTreeMap<Vec<OrdDatum>, Vec<AggState>>,
        distinct: Budget,
        kept: Budget,
    },
}

impl<'s> SelectScan<'s> {
    /// A scan of `select`'s share, nothing read yet.
    pub fn new(select: &'s Select) -> Result<SelectScan<'s>, ExecError> {
        SelectScan::new_in(select, Budget::result())
    }

    fn new_in(select: &'s Select, held: Budget) -> Result<SelectScan<'s>, ExecError> {
        let Some(collection) = &select.collection else {
            return Err(ExecError::WrongStatement {
                what: "a SELECT with FROM (use execute_constant)",
            });
        };
        let state = match &select.shape {
            SelectShape::Rows { outputs } => {
                ScanState::Rows { outputs, rows: Vec::new(), threshold: None }
            }
            SelectShape::Aggregate { group_by, aggregates, .. } => ScanState::Groups {
                group_by,
                aggregates,
                groups: BTreeMap::new(),
                distinct: Budget::distinct(),
                kept: Budget::collected(),
            },
        };
        let budget = fragment_budget(select)?;
        Ok(SelectScan {
            select,
            collection,
            budget,
            held,
            scanned: 0,
            after: None,
            page: false,
            slice_docs: STREAM_PAGE_SCANNED,
            state,
        })
    }

    /// Ends each slice after at most `docs` documents read (at least 1, at most
    /// [`STREAM_PAGE_SCANNED`]): for a source that costs more per document than storage's
    /// own reader, such as a transaction's overlay, which records every version it reads.
    pub fn with_slice_docs(mut self, docs: usize) -> SelectScan<'s> {
        self.slice_docs = docs.clamp(1, STREAM_PAGE_SCANNED);
        self
    }

    /// Reads every document of `ranges` (after the last slice, if any).
    pub fn read_all<'a, S: FragmentSource>(
        &mut self,
        source: &'a S,
        ranges: &[ShardRange],
    ) -> Result<(), ExecError>
    where
        's: 'a,
    {
        let select = self.select;
        let scanned =
            for_each_match(source, self.collection, select.filter.as_ref(), ranges, &mut |d| {
                self.add(d)
            })?;
        self.scanned += scanned;
        Ok(())
    }

    /// Reads the next slice: at most [`STREAM_PAGE_SCANNED`] documents (or the
    /// [`SelectScan::with_slice_docs`] given) after where the last ended. Returns whether
    /// documents remain (an id filter reads its documents at once).
    pub fn read_slice<'a, S: PagedSource>(
        &mut self,
        source: &'a S,
        ranges: &[ShardRange],
    ) -> Result<bool, ExecError>
    where
        's: 'a,
    {
        let select = self.select;
        if select.filter.as_ref().and_then(point_ids).is_some() {
            self.read_all(source, ranges)?;
            return Ok(false);
        }
        let after = self.after.take();
        let (collection, slice_docs) = (self.collection, self.slice_docs);
        let (seen, next) = scan_slice(
            source,
            collection,
            select.filter.as_ref(),
            ranges,
            after.as_ref(),
            slice_docs,
            &mut |d| {
                Ok(match self.add(d)? {
                    ControlFlow::Continue(()) if self.page_full() => SliceStep::EndSlice,
                    ControlFlow::Continue(()) => SliceStep::Next,
                    // The share needs nothing more (LIMIT reached): done.
                    ControlFlow::Break(()) => SliceStep::Done,
                })
            },
        );
        self.scanned += seen;
        self.after = next?;
        Ok(self.after.is_some())
    }

    /// Whether a streamed page holds as many rows or bytes as one page may.
    fn page_full(&self) -> bool {
        let ScanState::Rows { rows, .. } = &self.state else { return false };
        self.page && (rows.len() >= STREAM_PAGE_ROWS || self.held.held >= STREAM_PAGE_BYTES)
    }

    /// Adds one matching document; `Break` once the share needs no more.
    fn add<'v, D: DocValue<'v>>(
        &mut self,
        d: SourceDoc<'v, D>,
    ) -> Result<ControlFlow<()>, ExecError>
    where
        's: 'v,
    {
        let select = self.select;
        let row = Row { id: d.id, doc: Some(d.doc), excluded: None };
        match &mut self.state {
            ScanState::Rows { outputs, rows, threshold } => {
                let budget = self.budget;
                if budget == Some(0) {
                    return Ok(ControlFlow::Break(()));
                }
                let keys = select
                    .order_by
                    .iter()
                    .map(|k| match &k.target {
                        OrderTarget::Output(i) => match outputs.get(*i) {
                            Some(o) => eval(&o.expr, &row)?.to_datum(o.column.ty),
                            None => Ok(Datum::Null),
                        },
                        OrderTarget::Expr(e) => eval(e, &row)?.to_natural_datum(),
                    })
                    .collect::<Result<Vec<_>, ExecError>>()?;
                // Once the best k are known, a row that does not beat the k-th never enters
                // the result: skip it before building its output values.
                if let Some(t) = threshold
                    && cmp_parts(&select.order_by, &keys, d.id, &t.keys, &t.id) != Ordering::Less
                {
                    cov_mark::hit!(top_k_skip);
                    return Ok(ControlFlow::Continue(()));
                }
                let values = output_row(outputs, &row)?;
                self.held.spend(row_bytes(d.id, &values, &keys))?;
                rows.push(PartialRow { id: d.id.to_owned(), values, keys });
                let ordered = !select.order_by.is_empty();
                match (ordered, budget) {
                    (false, Some(k)) if rows.len() >= k => return Ok(ControlFlow::Break(())),
                    // Keep memory at O(k): cut back to the best k whenever 2k accumulate.
                    (true, Some(k)) if rows.len() >= k.saturating_mul(2).max(16) => {
                        truncate_top(rows, &select.order_by, k);
                        *threshold = rows.last().filter(|_| rows.len() == k).cloned();
                        self.held.held =
                            rows.iter().map(|r| row_bytes(&r.id, &r.values, &r.keys)).sum();
                    }
                    _ => {}
                }
                if rows.len() > RESULT_ROWS_MAX {
                    return Err(ExecError::LimitExceeded {
                        what: "rows in one result",
                        limit: RESULT_ROWS_MAX,
                    });
                }
                Ok(ControlFlow::Continue(()))
            }
            ScanState::Groups { group_by, aggregates, groups, distinct, kept } => {
                let key = group_by
                    .iter()
                    .map(|g| eval(g, &row)?.to_natural_datum().map(|d| OrdDatum(canonical(d))))
                    .collect::<Result<Vec<_>, ExecError>>()?;
                if !groups.contains_key(&key) && groups.len() >= GROUPS_MAX {
                    return Err(ExecError::LimitExceeded { what: "groups", limit: GROUPS_MAX });
                }
                let states = groups
                    .entry(key)
                    .or_insert_with(|| aggregates.iter().map(AggState::new).collect());
                for (state, agg) in states.iter_mut().zip(aggregates.iter()) {
                    if let Some(filter) = &agg.filter
                        && !matches(filter, &row)?
                    {
                        continue;
                    }
                    let held = state.add_row(agg, &row)?;
                    distinct.spend(held.values)?;
                    kept.spend(held.bytes)?;
                }
                Ok(ControlFlow::Continue(()))
            }
        }
    }

    /// The share read so far (all of it once no slice remains).
    pub fn finish(self) -> Partial {
        let body = match self.state {
            ScanState::Rows { mut rows, .. } => {
                if !self.select.order_by.is_empty() {
                    truncate_top(
                        &mut rows,
                        &self.select.order_by,
                        self.budget.unwrap_or(usize::MAX),
                    );
                }
                PartialBody::Rows(rows)
            }
            ScanState::Groups { groups, .. } => PartialBody::Groups(
                groups
                    .into_iter()
                    .map(|(key, states)| GroupPartial {
                        key: key.into_iter().map(|k| k.0).collect(),
                        states,
                    })
                    .collect(),
            ),
        };
        Partial { rows_scanned: self.scanned, body }
    }
}

/// A merged, typed result.
#[derive(Clone, PartialEq, Debug)]
pub struct ResultSet {
    /// Column names and types.
    pub columns: Vec<OutputColumn>,
    /// Rows, each with one datum per column.
    pub rows: Vec<Vec<Datum>>,
    /// Documents read over all fragments.
    pub rows_scanned: u64,
}

/// Merges the partial results of one SELECT from any number of fragments (in any order) into
/// the result a single fragment holding every document would give.
pub fn merge(select: &Select, partials: Vec<Partial>) -> Result<ResultSet, ExecError> {
    merge_in(select, partials, Budget::result())
}

/// [`merge`] with the rows' byte budget given.
fn merge_in(
    select: &Select,
    partials: Vec<Partial>,
    mut held: Budget,
) -> Result<ResultSet, ExecError> {
    let columns = select.columns();
    let limit = count_value(select.limit)?;
    let offset = count_value(select.offset)?.unwrap_or(0);
    let rows_scanned = partials.iter().map(|p| p.rows_scanned).sum();
    let skip = usize::try_from(offset).unwrap_or(usize::MAX);
    let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let rows = match &select.shape {
        SelectShape::Rows { .. } => {
            let mut rows = Vec::new();
            for p in partials {
                match p.body {
                    PartialBody::Rows(r) => {
                        held.spend(r.iter().map(|r| row_bytes(&r.id, &r.values, &r.keys)).sum())?;
                        rows.extend(r);
                    }
                    PartialBody::Groups(_) => {
                        return Err(ExecError::PartialMismatch {
                            what: "groups for a plain SELECT",
                        });
                    }
                }
                if rows.len() > RESULT_ROWS_MAX {
                    return Err(ExecError::LimitExceeded {
                        what: "rows in one result",
                        limit: RESULT_ROWS_MAX,
                    });
                }
            }
            if !select.order_by.is_empty() {
                rows.sort_by(|a, b| cmp_rows(&select.order_by, a, b));
            }
            rows.into_iter().skip(skip).take(take).map(|r| r.values).collect()
        }
        SelectShape::Aggregate { group_by, aggregates, outputs, having } => {
            let mut groups: BTreeMap<Vec<OrdDatum>, Vec<AggState>> = BTreeMap::new();
            let mut distinct = Budget::distinct();
            let mut kept = Budget::collected();
            for p in partials {
                let PartialBody::Groups(gs) = p.body else {
                    return Err(ExecError::PartialMismatch {
                        what: "rows for an aggregate SELECT",
                    });
                };
                for g in gs {
                    if g.states.len() != aggregates.len() || g.key.len() != group_by.len() {
                        return Err(ExecError::PartialMismatch { what: "group shape" });
                    }
                    let key: Vec<OrdDatum> = g.key.into_iter().map(OrdDatum).collect();
                    kept.spend(g.states.iter().map(AggState::collected_bytes).sum())?;
                    if let Some(states) = groups.get_mut(&key) {
                        for (s, o) in states.iter_mut().zip(g.states) {
                            distinct.spend(s.combine(o)?)?;
                        }
                    } else {
                        if groups.len() >= GROUPS_MAX {
                            return Err(ExecError::LimitExceeded {
                                what: "groups",
                                limit: GROUPS_MAX,
                            });
                        }
                        distinct.spend(g.states.iter().map(AggState::held).sum())?;
                        groups.insert(key, g.states);
                    }
                }
            }
            // Without GROUP BY there is exactly one group, even over no documents.
            if group_by.is_empty() && groups.is_empty() {
                groups.insert(Vec::new(), aggregates.iter().map(AggState::new).collect());
            }
            let mut rows: Vec<(Vec<Datum>, Vec<Datum>)> = Vec::with_capacity(groups.len());
            for (key, states) in groups {
                let mut results = Vec::with_capacity(states.len());
                for (s, a) in states.into_iter().zip(aggregates) {
                    results.push(s.finish(a)?);
                }
                let group = GroupValues { key: &key, results: &results };
                if let Some(h) = having
                    && !group.matches(h)?
                {
                    continue;
                }
                let values = outputs
                    .iter()
                    .map(|o| group.datum(&o.expr, o.column.ty))
                    .collect::<Result<Vec<_>, _>>()?;
                // One sort key per ORDER BY key: an output column's value, or evaluated.
                let keys = select
                    .order_by
                    .iter()
                    .map(|k| match &k.target {
                        OrderTarget::Output(i) => {
                            Ok(values.get(*i).cloned().unwrap_or(Datum::Null))
                        }
                        OrderTarget::Expr(e) => group.natural(e),
                    })
                    .collect::<Result<Vec<_>, ExecError>>()?;
                rows.push((values, keys));
            }
            if !select.order_by.is_empty() {
                // Stable, and groups have no id to break ties: they keep group-key order.
                rows.sort_by(|(_, a), (_, b)| cmp_parts(&select.order_by, a, "", b, ""));
            }
            rows.into_iter().skip(skip).take(take).map(|(values, _)| values).collect()
        }
    };
    Ok(ResultSet { columns, rows, rows_scanned })
}

/// One merged group: its GROUP BY keys and its aggregates' results, the values an aggregate
/// query's outputs, HAVING and ORDER BY read ([`Expr::GroupKey`], [`Expr::AggregateResult`]).
struct GroupValues<'g> {
    key: &'g [OrdDatum],
    results: &'g [Datum],
}

impl GroupValues<'_> {
    fn value(&self, e: &Expr) -> Option<Datum> {
        match e {
            Expr::GroupKey { index, .. } => {
                Some(self.key.get(*index).map_or(Datum::Null, |k| k.0.clone()))
            }
            Expr::AggregateResult { index, .. } => {
                Some(self.results.get(*index).cloned().unwrap_or(Datum::Null))
            }
            _ => None,
        }
    }

    /// `e` with this group's values put in as literals.
    fn bound(&self, e: &Expr) -> Expr {
        e.clone().map(&mut |x| match self.value(&x) {
            Some(d) => Expr::Literal(Literal::from_datum(d)),
            None => x,
        })
    }

    /// An output column of type `ty`.
    fn datum(&self, e: &Expr, ty: SqlType) -> Result<Datum, ExecError> {
        if let Some(d) = self.value(e) {
            return coerce(d, ty);
        }
        eval(&self.bound(e), &NO_ROW)?.to_datum(ty)
    }

    /// A sort key.
    fn natural(&self, e: &Expr) -> Result<Datum, ExecError> {
        eval(&self.bound(e), &NO_ROW)?.to_natural_datum()
    }

    /// Whether HAVING keeps the group.
    fn matches(&self, e: &Expr) -> Result<bool, ExecError> {
        matches(&self.bound(e), &NO_ROW)
    }
}

/// The row of an expression that reads no document.
const NO_ROW: Row<'static, &'static serde_json::Value> = Row { id: "", doc: None, excluded: None };

/// Evaluates a SELECT without FROM (`SELECT 1`, `SELECT 'x'::text AS a`): one row.
pub fn execute_constant(select: &Select) -> Result<ResultSet, ExecError> {
    let SelectShape::Rows { outputs } = &select.shape else {
        return Err(ExecError::WrongStatement { what: "a SELECT without FROM" });
    };
    if select.collection.is_some() {
        return Err(ExecError::WrongStatement { what: "a SELECT without FROM" });
    }
    Ok(ResultSet {
        columns: select.columns(),
        rows: vec![output_row(outputs, &NO_ROW)?],
        rows_scanned: 0,
    })
}

/// A write for storage to apply, carrying the version the decision read.
#[derive(Clone, PartialEq, Debug)]
pub enum WriteIntent {
    /// Store `doc` under `id` (insert when `version_read` is `None`, else replace that version).
    Put {
        /// The document id.
        id: String,
        /// Its shard.
        shard: ShardId,
        /// The version replaced, or `None` for a new document.
        version_read: Option<DocVersion>,
        /// The new document (a JSON object).
        doc: serde_json::Value,
    },
    /// Delete the document `id` at `version_read`.
    Delete {
        /// The document id.
        id: String,
        /// Its shard.
        shard: ShardId,
        /// The version deleted.
        version_read: DocVersion,
    },
}

/// One fragment's share of an INSERT, UPDATE or DELETE.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct WritePartial {
    /// The writes, in statement order.
    pub intents: Vec<WriteIntent>,
    /// `RETURNING` rows, one per intent when the statement has RETURNING.
    pub returning: Vec<Vec<Datum>>,
    /// Documents read.
    pub rows_scanned: u64,
    /// [`json_bytes`] of the intents' new documents ([`WRITE_BYTES_MAX`]).
    pub doc_bytes: usize,
}

impl WritePartial {
    /// The row count for the command tag (`INSERT 0 n`, `UPDATE n`, `DELETE n`).
    pub fn affected(&self) -> usize {
        self.intents.len()
    }

    /// Adds one write intent of an UPDATE or DELETE scan (see [`WritePartial::add`]).
    fn push_intent(&mut self, intent: WriteIntent) -> Result<ControlFlow<()>, ExecError> {
        self.add(intent)?;
        Ok(ControlFlow::Continue(()))
    }

    /// Adds one write intent, refusing to grow past what one transaction may write
    /// ([`WRITE_DOCS_MAX`] documents, [`WRITE_BYTES_MAX`] bytes of new documents): an UPDATE or
    /// DELETE scan stops at the first intent past either.
    fn add(&mut self, intent: WriteIntent) -> Result<(), ExecError> {
        if self.intents.len() >= WRITE_DOCS_MAX {
            return Err(ExecError::WriteTooLarge { what: "documents", limit: WRITE_DOCS_MAX });
        }
        if let WriteIntent::Put { doc, .. } = &intent {
            self.doc_bytes = self.doc_bytes.saturating_add(json_bytes(doc));
            if self.doc_bytes > WRITE_BYTES_MAX {
                return Err(ExecError::WriteTooLarge {
                    what: "bytes of new documents",
                    limit: WRITE_BYTES_MAX,
                });
            }
        }
        self.intents.push(intent);
        Ok(())
    }
}

/// Sets `path` in `doc` to `value`, creating missing objects on the way.
fn set_path(
    doc: &mut serde_json::Value,
    path: &FieldPath,
    value: serde_json::Value,
) -> Result<(), ExecError> {
    let conflict =
        |step: &str| ExecError::PathConflict { path: path.to_string(), step: step.to_owned() };
    let Some((last, parents)) = path.steps().split_last() else {
        return Err(ExecError::InvalidDocument {
            reason: "cannot replace the whole document with SET".to_owned(),
        });
    };
    let mut at = doc;
    for step in parents {
        let serde_json::Value::Object(map) = at else { return Err(conflict(step)) };
        at = map
            .entry(step.clone())
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    }
    let serde_json::Value::Object(map) = at else { return Err(conflict(last)) };
    map.insert(last.clone(), value);
    Ok(())
}

/// Removes the field at `path` from `doc`, if it is there (a missing or non-object parent
/// means there is nothing to remove).
fn remove_path(doc: &mut serde_json::Value, path: &FieldPath) -> Result<(), ExecError> {
    let Some((last, parents)) = path.steps().split_last() else {
        return Err(ExecError::InvalidDocument {
            reason: "cannot remove the whole document with SET".to_owned(),
        });
    };
    let mut at = doc;
    for step in parents {
        match at.get_mut(step.as_str()) {
            Some(next) => at = next,
            None => return Ok(()),
        }
    }
    if let serde_json::Value::Object(map) = at {
        // Keeps the other members in their stored order.
        map.shift_remove(last.as_str());
    }
    Ok(())
}

/// The new document after `assignments`, each computed from the document as it was (a
/// `DEFAULT` one removes its field).
fn apply_assignments<'v, D: DocValue<'v>>(
    assignments: &'v [Assignment],
    row: &Row<'v, D>,
    old: D,
) -> Result<serde_json::Value, ExecError> {
    let values = assignments
        .iter()
        .map(|a| a.expr.as_ref().map(|e| eval(e, row)?.to_json()).transpose())
        .collect::<Result<Vec<_>, ExecError>>()?;
    let mut doc = doc_to_json(old, 0)?;
    for (a, v) in assignments.iter().zip(values) {
        match v {
            Some(v) => set_path(&mut doc, &a.path, v)?,
            None => remove_path(&mut doc, &a.path)?,
        }
    }
    Ok(doc)
}

fn returning_row(
    outputs: &[Output],
    id: &str,
    doc: &serde_json::Value,
) -> Result<Vec<Datum>, ExecError> {
    let row = Row { id, doc: Some(doc), excluded: None };
    output_row(outputs, &row)
}

/// Runs an UPDATE against one fragment's documents in `ranges`.
pub fn execute_update<'s, S: FragmentSource>(
    update: &'s Update,
    source: &'s S,
    ranges: &[ShardRange],
) -> Result<WritePartial, ExecError> {
    let mut out = WritePartial::default();
    out.rows_scanned =
        for_each_match(source, &update.collection, update.filter.as_ref(), ranges, &mut |d| {
            update_one(update, &mut out, d)
        })?;
    Ok(out)
}

/// Runs a DELETE against one fragment's documents in `ranges`.
pub fn execute_delete<'s, S: FragmentSource>(
    delete: &'s Delete,
    source: &'s S,
    ranges: &[ShardRange],
) -> Result<WritePartial, ExecError> {
    let mut out = WritePartial::default();
    out.rows_scanned =
        for_each_match(source, &delete.collection, delete.filter.as_ref(), ranges, &mut |d| {
            delete_one(delete, &mut out, d)
        })?;
    Ok(out)
}

/// Adds the write an UPDATE makes of one matching document (and its RETURNING row).
fn update_one<'v, D: DocValue<'v>>(
    update: &'v Update,
    out: &mut WritePartial,
    d: SourceDoc<'v, D>,
) -> Result<ControlFlow<()>, ExecError> {
    let row = Row { id: d.id, doc: Some(d.doc), excluded: None };
    let doc = apply_assignments(&update.assignments, &row, d.doc)?;
    if !update.returning.is_empty() {
        out.returning.push(returning_row(&update.returning, d.id, &doc)?);
    }
    out.push_intent(WriteIntent::Put {
        id: d.id.to_owned(),
        shard: d.shard,
        version_read: Some(d.version),
        doc,
    })
}

/// Adds the delete of one matching document (and its RETURNING row); `Break` once the
/// fragment's share is deleted (`Delete::per_fragment_max`).
fn delete_one<'v, D: DocValue<'v>>(
    delete: &'v Delete,
    out: &mut WritePartial,
    d: SourceDoc<'v, D>,
) -> Result<ControlFlow<()>, ExecError> {
    if !delete.returning.is_empty() {
        let row = Row { id: d.id, doc: Some(d.doc), excluded: None };
        out.returning.push(output_row(&delete.returning, &row)?);
    }
    let flow = out.push_intent(WriteIntent::Delete {
        id: d.id.to_owned(),
        shard: d.shard,
        version_read: d.version,
    })?;
    Ok(match delete.per_fragment_max {
        Some(max) if out.intents.len() >= max => ControlFlow::Break(()),
        _ => flow,
    })
}

/// One fragment's share of an UPDATE or DELETE read in slices of at most `slice_docs`
/// documents ([`WriteScan::read_slice`]), between which the caller lets other work of its
/// executor run, as [`SelectScan`] does for a SELECT: the writes and RETURNING rows found so
/// far carry over, so the share is [`execute_update`]'s or [`execute_delete`]'s either way.
/// Each slice sees the fragment at its own instant: read this way only a source whose reads
/// are validated afterwards (a transaction block's, which records every version read and
/// range counted), or one whose writes the caller holds off meanwhile (node's autocommit
/// UPDATE / DELETE under `storage::Fragment::pause_writes`).
pub struct WriteScan<'s> {
    statement: WriteStatement<'s>,
    after: Option<ScanPos>,
    slice_docs: usize,
    out: WritePartial,
}

enum WriteStatement<'s> {
    Update(&'s Update),
    Delete(&'s Delete),
}

impl<'s> WriteScan<'s> {
    /// A scan of an UPDATE's or DELETE's share reading at most `slice_docs` documents (at
    /// least 1) per slice, nothing read yet.
    pub fn new(statement: &'s Statement, slice_docs: usize) -> Result<WriteScan<'s>, ExecError> {
        match statement {
            Statement::Update(u) => Ok(WriteScan::update(u, slice_docs)),
            Statement::Delete(d) => Ok(WriteScan::delete(d, slice_docs)),
            _ => {
                Err(ExecError::WrongStatement { what: "a sliced scan of a non-UPDATE, non-DELETE" })
            }
        }
    }

    /// A scan of an UPDATE's share ([`WriteScan::new`]).
    pub fn update(update: &'s Update, slice_docs: usize) -> WriteScan<'s> {
        WriteScan::of(WriteStatement::Update(update), slice_docs)
    }

    /// A scan of a DELETE's share ([`WriteScan::new`]).
    pub fn delete(delete: &'s Delete, slice_docs: usize) -> WriteScan<'s> {
        WriteScan::of(WriteStatement::Delete(delete), slice_docs)
    }

    fn of(statement: WriteStatement<'s>, slice_docs: usize) -> WriteScan<'s> {
        WriteScan {
            statement,
            after: None,
            slice_docs: slice_docs.max(1),
            out: WritePartial::default(),
        }
    }

    /// Reads the next slice after where the last ended; returns whether documents remain (an
    /// id filter reads its documents at once).
    pub fn read_slice<'a, S: PagedSource>(
        &mut self,
        source: &'a S,
        ranges: &[ShardRange],
    ) -> Result<bool, ExecError>
    where
        's: 'a,
    {
        let collection = self.collection();
        let filter = match self.statement {
            WriteStatement::Update(u) => u.filter.as_ref(),
            WriteStatement::Delete(d) => d.filter.as_ref(),
        };
        let out = &mut self.out;
        let mut each = |d: SourceDoc<'a, S::Doc<'a>>| match self.statement {
            WriteStatement::Update(u) => update_one(u, out, d),
            WriteStatement::Delete(del) => delete_one(del, out, d),
        };
        if filter.and_then(point_ids).is_some() {
            let scanned = for_each_match(source, collection, filter, ranges, &mut each)?;
            self.out.rows_scanned += scanned;
            return Ok(false);
        }
        let after = self.after.take();
        let (seen, next) = scan_slice(
            source,
            collection,
            filter,
            ranges,
            after.as_ref(),
            self.slice_docs,
            &mut |d| {
                Ok(match each(d)? {
                    ControlFlow::Continue(()) => SliceStep::Next,
                    ControlFlow::Break(()) => SliceStep::Done,
                })
            },
        );
        self.out.rows_scanned += seen;
        self.after = next?;
        Ok(self.after.is_some())
    }

    /// The collection the statement writes.
    pub fn collection(&self) -> &'s CollectionName {
        match self.statement {
            WriteStatement::Update(u) => &u.collection,
            WriteStatement::Delete(d) => &d.collection,
        }
    }

    /// The same scan from the start, nothing read: to read the share again at another instant.
    pub fn restart(self) -> WriteScan<'s> {
        WriteScan::of(self.statement, self.slice_docs)
    }

    /// The share read so far (all of it once `read_slice` said nothing remains).
    pub fn finish(self) -> WritePartial {
        self.out
    }
}

/// A document an INSERT wants to write, before placement.
#[derive(Clone, PartialEq, Debug)]
pub struct NewDocument {
    /// The id as written (may end with `$` for content-based placement).
    pub id: String,
    /// The document (a JSON object).
    pub doc: serde_json::Value,
}

/// A new document after node placed it: final id (a trailing `$` resolved per SHARDING.md)
/// and shard.
#[derive(Clone, PartialEq, Debug)]
pub struct PlacedDocument {
    /// The final id.
    pub id: String,
    /// Its shard.
    pub shard: ShardId,
    /// The document.
    pub doc: serde_json::Value,
}

impl Insert {
    /// Evaluates the bound VALUES rows into documents, in order.
    pub fn documents(&self) -> Result<Vec<NewDocument>, ExecError> {
        self.rows
            .iter()
            .map(|r| {
                let id = match eval(&r.id, &NO_ROW)? {
                    Value::Str(s) | Value::Untyped(s) => s.to_owned(),
                    Value::Text(s) => s,
                    Value::Null => {
                        return Err(ExecError::InvalidDocument {
                            reason: "the id is NULL".to_owned(),
                        });
                    }
                    _ => {
                        return Err(ExecError::InvalidDocument {
                            reason: "the id must be text".to_owned(),
                        });
                    }
                };
                if id.is_empty() {
                    return Err(ExecError::InvalidDocument {
                        reason: "the id is empty".to_owned(),
                    });
                }
                let doc = match &r.body {
                    InsertBody::Document(e) => match eval(e, &NO_ROW)? {
                        v @ (Value::Str(_) | Value::Untyped(_) | Value::Text(_)) => {
                            crate::expr::cast(v, SqlType::Json)?.to_json()?
                        }
                        v => v.to_json()?,
                    },
                    InsertBody::Fields(fields) => {
                        let mut map = serde_json::Map::new();
                        for (name, e) in fields {
                            map.insert(name.clone(), eval(e, &NO_ROW)?.to_json()?);
                        }
                        serde_json::Value::Object(map)
                    }
                };
                if !doc.is_object() {
                    return Err(ExecError::InvalidDocument {
                        reason: "a document must be a JSON object".to_owned(),
                    });
                }
                Ok(NewDocument { id, doc })
            })
            .collect()
    }
}

/// Runs an INSERT for the placed documents that belong to one fragment: checks each id
/// against the fragment (and against earlier rows of the same statement) and applies
/// `ON CONFLICT`.
pub fn execute_insert<'s, S: FragmentSource>(
    insert: &'s Insert,
    source: &'s S,
    docs: &'s [PlacedDocument],
) -> Result<WritePartial, ExecError> {
    let mut out = WritePartial::default();
    let mut seen = BTreeSet::new();
    for new in docs {
        if !seen.insert(new.id.to_lowercase()) {
            // A second row with the same id in one statement conflicts with the first.
            if insert.on_conflict == OnConflict::DoNothing {
                continue;
            }
            return Err(ExecError::DuplicateId { id: new.id.clone() });
        }
        out.rows_scanned += 1;
        let intent = match (source.get(&insert.collection, &new.id), &insert.on_conflict) {
            (None, _) => Some(WriteIntent::Put {
                id: new.id.clone(),
                shard: new.shard,
                version_read: None,
                doc: new.doc.clone(),
            }),
            (Some(_), OnConflict::Error) => {
                return Err(ExecError::DuplicateId { id: new.id.clone() });
            }
            (Some(_), OnConflict::DoNothing) => None,
            (Some(old), OnConflict::DoUpdate { assignments, filter }) => {
                let row = Row { id: old.id, doc: Some(old.doc), excluded: Some(&new.doc) };
                let go = match filter {
                    None => true,
                    Some(f) => matches(f, &row)?,
                };
                if go {
                    Some(WriteIntent::Put {
                        id: old.id.to_owned(),
                        shard: old.shard,
                        version_read: Some(old.version),
                        doc: apply_assignments(assignments, &row, old.doc)?,
                    })
                } else {
                    None
                }
            }
        };
        if let Some(intent) = intent {
            if let WriteIntent::Put { id, doc, .. } = &intent
                && !insert.returning.is_empty()
            {
                out.returning.push(returning_row(&insert.returning, id, doc)?);
            }
            out.add(intent)?;
        }
    }
    Ok(out)
}

/// One fragment's answer to `SELECT * FROM verify_sharding('c')`: the documents that break
/// the collection's content configuration.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct VerifyPartial {
    /// `(id, reason)` per violating document, in scan order.
    pub violations: Vec<(String, String)>,
    /// Documents read.
    pub rows_scanned: u64,
}

/// Checks every document of the collection in `ranges` with `router::verify` against
/// `config`: as if `Mutable = false`, whatever the configuration says, since this is the
/// check operators run before switching `Mutable` from true to false (a switch that checks
/// no old document).
pub fn execute_verify_sharding<S: FragmentSource>(
    collection: &CollectionName,
    config: &router::ShardingConfig,
    source: &S,
    ranges: &[ShardRange],
) -> Result<VerifyPartial, ExecError> {
    let mut out = VerifyPartial::default();
    let mut overflow = false;
    source.scan(collection, ranges, &mut |d| {
        out.rows_scanned += 1;
        if let Err(e) = router::verify(config, d.id, d.doc) {
            if out.violations.len() >= RESULT_ROWS_MAX {
                overflow = true;
                return ControlFlow::Break(());
            }
            out.violations.push((d.id.to_owned(), e.to_string()));
        }
        ControlFlow::Continue(())
    });
    if overflow {
        return Err(ExecError::LimitExceeded {
            what: "rows in one result",
            limit: RESULT_ROWS_MAX,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    // Checks the collecting aggregates' memory bound: past AGGREGATED_BYTES_MAX bytes held in
    // one query (per fragment and at the merge) the query fails with a limit error naming it.
    #[test]
    fn collect_budget_is_bounded() {
        let mut budget = Budget::collected();
        let item = Collected {
            keys: vec![Datum::Int8(1)],
            value: Datum::Text("x".repeat(1 << 20)),
            extra: Datum::Null,
        };
        assert!(item.bytes() > 1 << 20);
        for _ in 0..63 {
            budget.spend(item.bytes()).expect("within the limit");
        }
        let e = budget.spend(item.bytes());
        assert!(
            matches!(e, Err(ExecError::LimitExceeded { limit: AGGREGATED_BYTES_MAX, .. })),
            "{e:?}"
        );
    }
    use super::*;
    use serde_json::json;

    /// Documents of one shard, in a Vec: enough for the executor's own bounds.
    struct Docs(Vec<(String, serde_json::Value)>);

    impl FragmentSource for Docs {
        type Doc<'a> = &'a serde_json::Value;

        fn get<'a>(&'a self, _: &CollectionName, _: &str) -> Option<SourceDoc<'a, Self::Doc<'a>>> {
            None
        }

        fn scan<'a>(
            &'a self,
            _: &CollectionName,
            _: &[ShardRange],
            visit: &mut dyn FnMut(SourceDoc<'a, Self::Doc<'a>>) -> ControlFlow<()>,
        ) {
            for (id, doc) in &self.0 {
                let d = SourceDoc { id, shard: ShardId::MIN, version: DocVersion::new(1), doc };
                if visit(d).is_break() {
                    return;
                }
            }
        }
    }

    // Checks a gathered result's rows are bounded in bytes by the budget given: per
    // fragment (what ORDER BY … LIMIT cuts away no longer counts) and at the merge, with a
    // limit error that says how to stream instead.
    #[test]
    fn gathered_rows_are_bounded_in_bytes() {
        let docs = Docs(
            (0..100).map(|i| (format!("d/{i}"), json!({"s": "x".repeat(1000), "n": i}))).collect(),
        );
        let budget = |limit| Budget { held: 0, limit, what: Budget::result().what };
        let plan = |sql: &str| match crate::parse(sql).unwrap().remove(0) {
            crate::plan::Statement::Select(s) => s,
            other => panic!("{other:?}"),
        };
        let select_in = |select, docs: &Docs, held| {
            let mut scan = SelectScan::new_in(select, held)?;
            scan.read_all(docs, &[ShardRange::ALL])?;
            Ok::<Partial, ExecError>(scan.finish())
        };
        // 100 rows of about 1 KB: over 50 KB, within 200 KB.
        let ordered = plan("SELECT s FROM c ORDER BY n");
        let e = select_in(&ordered, &docs, budget(50_000)).unwrap_err();
        assert!(matches!(e, ExecError::LimitExceeded { .. }), "{e}");
        assert!(e.to_string().contains("to stream the rows"), "{e}");
        let p = select_in(&ordered, &docs, budget(200_000)).unwrap();
        let plain = plan("SELECT s FROM c");
        assert!(select_in(&plain, &docs, budget(50_000)).is_err());
        // The best 10 of 100: never more than 20 rows held.
        let top = plan("SELECT s FROM c ORDER BY n LIMIT 10");
        select_in(&top, &docs, budget(50_000)).expect("top 10 fit");
        // Two fragments' 100 rows each pass 150 KB together.
        merge_in(&ordered, vec![p.clone()], budget(150_000)).expect("one fits");
        let e = merge_in(&ordered, vec![p.clone(), p], budget(150_000)).unwrap_err();
        assert!(matches!(e, ExecError::LimitExceeded { .. }), "{e}");
    }

    // Checks NULL placement follows NULLS FIRST/LAST independently of DESC.
    #[test]
    fn key_order_with_nulls() {
        let key = |descending, nulls_first| OrderKey {
            target: OrderTarget::Output(0),
            descending,
            nulls_first,
        };
        let one = Datum::Int8(1);
        let two = Datum::Int8(2);
        assert_eq!(cmp_key(&key(false, false), Some(&one), Some(&two)), Ordering::Less);
        assert_eq!(cmp_key(&key(true, true), Some(&one), Some(&two)), Ordering::Greater);
        assert_eq!(cmp_key(&key(false, false), Some(&Datum::Null), Some(&one)), Ordering::Greater);
        assert_eq!(cmp_key(&key(true, true), Some(&Datum::Null), Some(&one)), Ordering::Less);
        assert_eq!(cmp_key(&key(true, false), None, Some(&one)), Ordering::Greater);
    }

    // Checks SET paths create missing objects and refuse to walk through a scalar.
    #[test]
    fn set_paths() {
        let mut doc = json!({"a": 1});
        let path = |p: &[&str]| FieldPath::new(p.iter().map(|s| (*s).to_owned()).collect());
        set_path(&mut doc, &path(&["b", "c"]), json!(2)).expect("creates b");
        assert_eq!(doc, json!({"a": 1, "b": {"c": 2}}));
        assert!(matches!(
            set_path(&mut doc, &path(&["a", "x"]), json!(3)),
            Err(ExecError::PathConflict { .. })
        ));
        assert!(set_path(&mut doc, &path(&[]), json!(3)).is_err());
    }

    /// An aggregate call of `func` typed `ty`, over `v`.
    fn call(func: AggregateFunc, ty: SqlType) -> Aggregate {
        let arg = Some(Expr::Field(FieldPath::new(vec!["v".to_owned()])));
        Aggregate { func, arg, arg2: None, order_by: Vec::new(), ty, filter: None }
    }

    // Checks the distinct values of a query's count(DISTINCT …) states are counted once
    // each, as added and as merged, and stop at DISTINCT_VALUES_MAX with a named limit.
    #[test]
    fn distinct_values_are_limited() {
        let value = |i: usize| Value::<&serde_json::Value>::Int(i as i64);
        let mut a = AggState::Distinct(BTreeSet::new());
        let mut budget = Budget::distinct();
        for i in 0..DISTINCT_VALUES_MAX {
            budget.spend(a.add(Some(&value(i))).expect("adds")).expect("under the limit");
        }
        assert_eq!(a.add(Some(&value(0))), Ok(0), "a value already counted");
        assert_eq!(a.add(Some(&Value::<&serde_json::Value>::Float(1.0))), Ok(0), "1.0 is 1");
        let e = budget.spend(a.add(Some(&value(DISTINCT_VALUES_MAX))).expect("adds"));
        assert!(matches!(e, Err(ExecError::LimitExceeded { limit: DISTINCT_VALUES_MAX, .. })));
        let mut b = AggState::Distinct([OrdDatum(Datum::Int8(0))].into());
        let twice = AggState::Distinct([0, 1, 2].map(|i| OrdDatum(Datum::Int8(i))).into());
        assert_eq!(b.combine(twice), Ok(2));
        assert_eq!(b.held(), 3);
        let sum = b.clone().finish(&call(AggregateFunc::SumDistinct, SqlType::Int8));
        let avg = b.clone().finish(&call(AggregateFunc::AvgDistinct, SqlType::Float8));
        assert_eq!(
            b.finish(&call(AggregateFunc::CountDistinct, SqlType::Int8)),
            Ok(Datum::Int8(3))
        );
        assert_eq!((sum, avg), (Ok(Datum::Int8(3)), Ok(Datum::Float8(1.0))));
        // Over mixed values: numbers only, as a float sum; none at all is NULL.
        let mixed = [Datum::Int8(2), Datum::Float8(0.5), Datum::Text("x".into())];
        let mixed = AggState::Distinct(mixed.map(OrdDatum).into());
        let sum = mixed.clone().finish(&call(AggregateFunc::SumDistinct, SqlType::Float8));
        assert_eq!(sum, Ok(Datum::Float8(2.5)));
        let none = AggState::Distinct([OrdDatum(Datum::Text("x".into()))].into());
        assert_eq!(
            none.finish(&call(AggregateFunc::AvgDistinct, SqlType::Float8)),
            Ok(Datum::Null)
        );
        let big = [i64::MAX, 1].map(|i| OrdDatum(Datum::Int8(i)));
        let overflow =
            AggState::Distinct(big.into()).finish(&call(AggregateFunc::SumDistinct, SqlType::Int8));
        assert!(matches!(overflow, Err(ExecError::Overflow { .. })));
    }

    // Checks equal numbers get one spelling, and only where that is exact.
    #[test]
    fn canonical_numbers() {
        assert_eq!(canonical(Datum::Float8(3.0)), Datum::Int8(3));
        assert_eq!(canonical(Datum::Float8(-0.0)), Datum::Int8(0));
        assert_eq!(canonical(Datum::Float8(2.5)), Datum::Float8(2.5));
        assert_eq!(canonical(Datum::Float8(1e300)), Datum::Float8(1e300));
        assert_eq!(canonical(Datum::Text("1".into())), Datum::Text("1".into()));
    }

    // Checks partial aggregate states combine like one state over all values, and that
    // combining states of different aggregates is reported, not ignored.
    #[test]
    fn aggregate_states_combine() {
        let mut a = AggState::SumInt(Some(i64::MAX));
        assert!(matches!(a.combine(AggState::SumInt(Some(1))), Err(ExecError::Overflow { .. })));
        let mut m = AggState::Min(Some(Datum::Int8(5)));
        m.combine(AggState::Min(Some(Datum::Float8(4.5)))).expect("combines");
        assert_eq!(m, AggState::Min(Some(Datum::Float8(4.5))));
        let mut avg = AggState::Avg { sum: 3.0, count: 2 };
        avg.combine(AggState::Avg { sum: 6.0, count: 1 }).expect("combines");
        assert_eq!(avg.finish(&call(AggregateFunc::Avg, SqlType::Float8)), Ok(Datum::Float8(3.0)));
        let mut c = AggState::Count(1);
        assert!(matches!(c.combine(AggState::Min(None)), Err(ExecError::PartialMismatch { .. })));
    }
}
