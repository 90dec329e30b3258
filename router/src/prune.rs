//! Query pruning: a predicate over documents -> the fragments that can hold a match.
//!
//! The router owns the predicate description ([`Predicate`]); `query` lowers SQL into it
//! (`IN (...)` as [`Predicate::Or`] of equalities; NOT, ranges and everything else as
//! [`Predicate::Any`]). [`route`] returns a [`RoutePlan`] in the spirit of Vitess: an
//! [`Opcode`], the fragments, the shard ranges and the [`RouteRule`] that decided, whose
//! `Display` is the sentence EXPLAIN shows.
//!
//! **Invariant (soundness):** pruning never drops a fragment that could hold a matching
//! document. Every rule below only narrows the shard set by a fact every matching document
//! must satisfy:
//! - `id() = 'x'`: a document with that id (in any case) lives on `shard_of(x)`, which
//!   depends only on the lower-cased id. An `x` that no stored id can equal (malformed `$@`
//!   suffix, trailing `$`, empty) matches nothing. The length limit is not applied to `x`:
//!   lower-casing can shorten text, so a long literal may still equal a stored id.
//! - Content equalities (only with `Mutable = false`, where every write was validated): a
//!   predicate fixing every configured field routes to the block of the content shard. The
//!   literal's text is built as a stored value's text is ([`crate::content::value_text`]),
//!   and hashing lower-cases it, so any value equal to the literal, compared as a string,
//!   an integer, a float with the same value or a boolean, has the same text. Integers and
//!   floats at or beyond 2^53 in magnitude, and `NULL`, are not used for pruning: there, two
//!   numbers may compare equal through `f64` while their texts differ.
//! - `AND` intersects the children's shard sets; `OR` unites them.
//!
//! Content pruning trusts validation. Switching `Mutable` from true to false checks no old
//! document (SHARDING.md §3), so a document written while it was true may sit outside its
//! block and be missed; [`crate::verify`] is the check that lists such documents, to run
//! before the switch.
//!
//! A plan whose `fragments` is empty can match no document; its opcode is `Single` (at most
//! one fragment). A caller must treat `fragments` as the list to visit, never index it.

use std::borrow::Cow;
use std::fmt;

use crate::content::{
    ContentKey, FIELD_SEPARATOR, ShardingConfig, float_text, numeric_shard, parse_ticks,
};
use crate::id::{Placement, hash, place_unchecked};
use crate::ids::{FragmentId, ShardId, ShardRange};
use crate::limits::{ID_BYTES_MAX, PREDICATE_DEPTH_MAX, ROUTE_RANGES_MAX};
use crate::map::ShardMap;

/// A literal in a predicate.
#[derive(Clone, PartialEq, Debug)]
pub enum Literal {
    /// `NULL`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Int(n) => write!(f, "{n}"),
            Literal::Float(x) => write!(f, "{x}"),
            Literal::Str(s) => write!(f, "'{}'", s.replace('\'', "''")),
        }
    }
}

/// What a statement's filter says about the documents it can match.
#[derive(Clone, PartialEq, Debug)]
pub enum Predicate {
    /// `id() = 'x'`
    IdEq(String),
    /// `a.b = literal` (path steps are case-sensitive JSON field names).
    FieldEq {
        /// The field path.
        path: Vec<String>,
        /// The literal it equals.
        value: Literal,
    },
    /// All of these hold.
    And(Vec<Predicate>),
    /// At least one of these holds.
    Or(Vec<Predicate>),
    /// Anything else: may match any document.
    Any,
}

/// How many fragments a plan visits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Opcode {
    /// At most one fragment (none when the predicate can match nothing).
    Single,
    /// Several fragments chosen by the predicate.
    Multi,
    /// Every fragment: nothing in the predicate narrows the search.
    Scatter,
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Opcode::Single => "Single",
            Opcode::Multi => "Multi",
            Opcode::Scatter => "Scatter",
        })
    }
}

/// Why a plan visits what it visits. `Display` gives the sentence for EXPLAIN.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum RouteRule {
    /// `id() = 'x'` fixes one shard.
    IdEq {
        /// The id literal.
        id: String,
        /// Its shard.
        shard: ShardId,
    },
    /// `id() = 'x'` where no stored id can equal `x`.
    IdNowhere {
        /// The id literal.
        id: String,
        /// Why no stored id can equal it.
        reason: String,
    },
    /// Equalities fixing every configured sharding field fix a content block.
    ContentEq {
        /// The equalities, as SQL (`Customer = 'c/1'`).
        condition: String,
        /// The block of shards.
        block: ShardRange,
    },
    /// `OR` / `IN` of routable predicates: the union of their shards.
    Union(Vec<RouteRule>),
    /// `AND` of several routable predicates: the intersection of their shards.
    Intersection(Vec<RouteRule>),
    /// Nothing routable.
    Scatter,
    /// Content equalities exist but the configuration is `Mutable = true`, so documents may
    /// sit outside their content block.
    ScatterMutable {
        /// The configured fields.
        fields: String,
    },
    /// The predicate is nested deeper than [`PREDICATE_DEPTH_MAX`] or routes to more than
    /// [`ROUTE_RANGES_MAX`] separate ranges; scattering is the sound answer.
    ScatterLimit,
}

/// Most sub-rules an EXPLAIN sentence lists before summarising the rest.
const RULES_SHOWN_MAX: usize = 8;

impl fmt::Display for RouteRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteRule::IdEq { id, shard } => {
                write!(f, "id() = {} fixes shard {shard}", Literal::Str(id.clone()))
            }
            RouteRule::IdNowhere { id, reason } => {
                write!(f, "id() = {} matches no document: {reason}", Literal::Str(id.clone()))
            }
            RouteRule::ContentEq { condition, block } => {
                write!(f, "{condition} fixes content block {block}")
            }
            RouteRule::Union(rules) if rules.is_empty() => f.write_str("empty OR: matches nothing"),
            RouteRule::Union(rules) => write_list(f, "union of", rules),
            RouteRule::Intersection(rules) => write_list(f, "intersection of", rules),
            RouteRule::Scatter => f.write_str("no routable predicate: scatter"),
            RouteRule::ScatterMutable { fields } => write!(
                f,
                "equality on content field(s) {fields} not used because sharding is Mutable = true: scatter"
            ),
            RouteRule::ScatterLimit => {
                f.write_str("predicate too deep or too fragmented to route: scatter")
            }
        }
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, what: &str, rules: &[RouteRule]) -> fmt::Result {
    write!(f, "{what} (")?;
    for (i, rule) in rules.iter().take(RULES_SHOWN_MAX).enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        write!(f, "{rule}")?;
    }
    if rules.len() > RULES_SHOWN_MAX {
        write!(f, "; and {} more", rules.len() - RULES_SHOWN_MAX)?;
    }
    f.write_str(")")
}

/// Where a statement goes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RoutePlan {
    /// How many fragments.
    pub opcode: Opcode,
    /// The fragments to visit, in shard order, without repeats. Empty: nothing can match.
    pub fragments: Vec<FragmentId>,
    /// The shards a match can live on: sorted, disjoint, non-adjacent ranges.
    pub shards: Vec<ShardRange>,
    /// Why.
    pub rule: RouteRule,
}

impl RoutePlan {
    /// Whether the predicate can match no document at all.
    pub fn matches_nothing(&self) -> bool {
        self.fragments.is_empty()
    }
}

/// Routes `predicate` over the collection with content configuration `sharding` (`None`
/// when the collection has none) to the fragments of `map`. Never drops a fragment that
/// could hold a matching document (see the module docs).
pub fn route(
    predicate: &Predicate,
    sharding: Option<&ShardingConfig>,
    map: &ShardMap,
) -> RoutePlan {
    let routed = route_node(predicate, sharding, 0);
    match routed.set {
        Set::All => RoutePlan {
            opcode: Opcode::Scatter,
            fragments: map.fragments().iter().map(|f| f.id()).collect(),
            shards: vec![ShardRange::ALL],
            rule: routed.rule,
        },
        Set::Ranges(ranges) => {
            let mut fragments: Vec<FragmentId> = Vec::new();
            for range in &ranges {
                for fragment in map.fragments_overlapping(*range) {
                    // Ranges are sorted and fragments are in shard order, so a fragment
                    // shared by consecutive ranges shows up consecutively.
                    if fragments.last() != Some(&fragment.id()) {
                        fragments.push(fragment.id());
                    }
                }
            }
            let opcode = if fragments.len() <= 1 { Opcode::Single } else { Opcode::Multi };
            RoutePlan { opcode, fragments, shards: ranges, rule: routed.rule }
        }
    }
}

/// The shards a match can live on.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Set {
    All,
    /// Sorted, disjoint, non-adjacent.
    Ranges(Vec<ShardRange>),
}

struct Routed {
    set: Set,
    rule: RouteRule,
}

impl Routed {
    fn scatter(rule: RouteRule) -> Routed {
        Routed { set: Set::All, rule }
    }
}

fn route_node(predicate: &Predicate, sharding: Option<&ShardingConfig>, depth: usize) -> Routed {
    if depth > PREDICATE_DEPTH_MAX {
        return Routed::scatter(RouteRule::ScatterLimit);
    }
    match predicate {
        Predicate::Any => Routed::scatter(RouteRule::Scatter),
        Predicate::IdEq(id) => route_id(id),
        Predicate::FieldEq { .. } => route_and(std::slice::from_ref(predicate), sharding, depth),
        Predicate::And(children) => route_and(children, sharding, depth),
        Predicate::Or(children) => {
            let mut ranges = Vec::new();
            let mut rules = Vec::with_capacity(children.len());
            for child in children {
                let routed = route_node(child, sharding, depth + 1);
                match routed.set {
                    Set::All => return routed,
                    Set::Ranges(r) => ranges.extend(r),
                }
                rules.push(routed.rule);
                if ranges.len() > ROUTE_RANGES_MAX {
                    return Routed::scatter(RouteRule::ScatterLimit);
                }
            }
            let rule = if rules.len() == 1 {
                rules.pop().unwrap_or(RouteRule::Union(Vec::new()))
            } else {
                RouteRule::Union(rules)
            };
            Routed { set: Set::Ranges(normalise(ranges)), rule }
        }
    }
}

fn route_id(id: &str) -> Routed {
    let nowhere = |reason: String| Routed {
        set: Set::Ranges(Vec::new()),
        rule: RouteRule::IdNowhere { id: id.to_owned(), reason },
    };
    if id.is_empty() {
        return nowhere("document ids are never empty".to_owned());
    }
    if id.len() > ID_BYTES_MAX {
        // Still routed: lower-casing can shorten text, so this may equal a stored id.
        cov_mark::hit!(id_literal_over_limit);
    }
    match place_unchecked(id) {
        Ok(Placement::Hashed(shard) | Placement::Explicit(shard)) => Routed {
            set: Set::Ranges(vec![ShardRange::single(shard)]),
            rule: RouteRule::IdEq { id: id.to_owned(), shard },
        },
        Ok(Placement::Content) => {
            nowhere("stored ids never end with `$` (it is rewritten to `$@<shard>`)".to_owned())
        }
        Err(e) => nowhere(format!("no stored id can have this form: {e}")),
    }
}

/// Flattens nested `AND`s (counting depth) into `out`.
fn flatten_and<'p>(children: &'p [Predicate], depth: usize, out: &mut Vec<&'p Predicate>) -> bool {
    if depth > PREDICATE_DEPTH_MAX {
        return false;
    }
    for child in children {
        match child {
            Predicate::And(inner) => {
                if !flatten_and(inner, depth + 1, out) {
                    return false;
                }
            }
            other => out.push(other),
        }
    }
    true
}

fn route_and(children: &[Predicate], sharding: Option<&ShardingConfig>, depth: usize) -> Routed {
    let mut conjuncts = Vec::new();
    if !flatten_and(children, depth, &mut conjuncts) {
        return Routed::scatter(RouteRule::ScatterLimit);
    }
    let mut set = Set::All;
    let mut rules = Vec::new();
    let mut mutable_fields = None;
    let mut limited = false;
    if let Some(config) = sharding.filter(|c| c.is_content_based()) {
        let content = content_block(config, &conjuncts);
        match content {
            Content::Block(block, condition) => {
                set = Set::Ranges(vec![block]);
                rules.push(RouteRule::ContentEq { condition, block });
            }
            Content::Mutable => mutable_fields = Some(config.key().to_string()),
            Content::NotFixed => {}
        }
    }
    for conjunct in conjuncts {
        if matches!(conjunct, Predicate::FieldEq { .. } | Predicate::Any) {
            continue;
        }
        let routed = route_node(conjunct, sharding, depth + 1);
        if let Set::Ranges(r) = routed.set {
            set = match set {
                Set::All => Set::Ranges(r),
                Set::Ranges(mine) => Set::Ranges(intersect(&mine, &r)),
            };
            rules.push(routed.rule);
        } else if routed.rule == RouteRule::ScatterLimit {
            limited = true;
        }
    }
    let rule = match rules.len() {
        0 if limited => RouteRule::ScatterLimit,
        0 => match mutable_fields {
            Some(fields) => RouteRule::ScatterMutable { fields },
            None => RouteRule::Scatter,
        },
        1 => rules.pop().unwrap_or(RouteRule::Scatter),
        _ => RouteRule::Intersection(rules),
    };
    Routed { set, rule }
}

enum Content {
    Block(ShardRange, String),
    Mutable,
    NotFixed,
}

/// The content block fixed by equalities among `conjuncts` on every configured field, if
/// they fix one and the configuration allows pruning.
fn content_block(config: &ShardingConfig, conjuncts: &[&Predicate]) -> Content {
    let paths = match config.key() {
        ContentKey::Fields(paths) => paths.iter().collect::<Vec<_>>(),
        ContentKey::Numeric(path) | ContentKey::Ticks(path) => vec![path],
        ContentKey::Id => return Content::NotFixed,
    };
    // For each configured field, the first equality on it whose literal can route.
    let mut values = Vec::with_capacity(paths.len());
    let mut any_equality = false;
    for path in &paths {
        let found = conjuncts.iter().find_map(|c| match c {
            Predicate::FieldEq { path: p, value } if p.as_slice() == path.steps() => {
                any_equality = true;
                routable(config.key(), value).map(|content| (value, content))
            }
            _ => None,
        });
        values.push(found);
    }
    if config.mutable() {
        return if any_equality { Content::Mutable } else { Content::NotFixed };
    }
    let mut condition = String::new();
    let mut texts = Vec::with_capacity(values.len());
    for (path, found) in paths.iter().zip(values) {
        let Some((literal, content)) = found else {
            return Content::NotFixed;
        };
        if !condition.is_empty() {
            condition.push_str(" AND ");
        }
        condition.push_str(&format!("{} = {literal}", path.as_str()));
        texts.push(content);
    }
    let shard = match (config.key(), texts.as_slice()) {
        (ContentKey::Fields(_), [LiteralContent::Text(t)]) => hash(t),
        (ContentKey::Fields(_), _) => {
            let mut joined = String::new();
            for (i, t) in texts.iter().enumerate() {
                if i > 0 {
                    joined.push(FIELD_SEPARATOR);
                }
                if let LiteralContent::Text(t) = t {
                    joined.push_str(t);
                }
            }
            hash(&joined)
        }
        (_, [LiteralContent::Shard(s)]) => *s,
        _ => return Content::NotFixed,
    };
    Content::Block(config.block_of(shard), condition)
}

enum LiteralContent<'l> {
    /// A plain field's text, before hashing.
    Text(Cow<'l, str>),
    /// A function's content shard.
    Shard(ShardId),
}

/// 2^53: beyond it, distinct integers can share an `f64`.
const EXACT_INT_LIMIT: u64 = 1 << 53;

/// What a literal contributes to the content shard, when it can be used soundly.
fn routable<'l>(key: &ContentKey, literal: &'l Literal) -> Option<LiteralContent<'l>> {
    let exact_int = |n: i64| n.unsigned_abs() < EXACT_INT_LIMIT;
    // 2^53 as f64, exactly.
    #[allow(clippy::cast_precision_loss)]
    let exact_float = |x: f64| x.is_finite() && x.abs() < EXACT_INT_LIMIT as f64;
    match key {
        ContentKey::Fields(_) => match literal {
            Literal::Str(s) => Some(LiteralContent::Text(Cow::Borrowed(s))),
            Literal::Int(n) if exact_int(*n) => Some(LiteralContent::Text(n.to_string().into())),
            Literal::Float(x) if exact_float(*x) => {
                Some(LiteralContent::Text(float_text(*x).into()))
            }
            Literal::Bool(b) => Some(LiteralContent::Text(b.to_string().into())),
            _ => None,
        },
        ContentKey::Numeric(_) => match literal {
            Literal::Int(n) if exact_int(*n) => Some(LiteralContent::Shard(numeric_shard(*n))),
            Literal::Float(x) if exact_float(*x) && x.fract() == 0.0 => {
                // |x| < 2^53 and integral: the conversion is exact.
                #[allow(clippy::cast_possible_truncation)]
                let n = *x as i64;
                Some(LiteralContent::Shard(numeric_shard(n)))
            }
            _ => None,
        },
        ContentKey::Ticks(_) => match literal {
            Literal::Str(s) => {
                parse_ticks(s).ok().map(|t| LiteralContent::Shard(ShardId::from_u64_mod(t)))
            }
            _ => None,
        },
        ContentKey::Id => None,
    }
}

/// Sorts and merges overlapping or adjacent ranges.
fn normalise(mut ranges: Vec<ShardRange>) -> Vec<ShardRange> {
    ranges.sort_unstable();
    let mut out: Vec<ShardRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start() <= last.end() => {
                if r.end() > last.end() {
                    *last = ShardRange::new(last.start(), r.end()).unwrap_or(*last);
                }
            }
            _ => out.push(r),
        }
    }
    out
}

/// The intersection of two normalised range lists.
fn intersect(a: &[ShardRange], b: &[ShardRange]) -> Vec<ShardRange> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        let start = x.start().max(y.start());
        let end = x.end().min(y.end());
        if let Some(r) = ShardRange::new(start, end) {
            out.push(r);
        }
        if x.end() <= y.end() {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::Owner;

    fn map(n: u32) -> ShardMap {
        ShardMap::even(n, &[Owner::new(0, 0)]).expect("valid layout")
    }

    fn config(json: &str) -> ShardingConfig {
        ShardingConfig::parse(json).expect("test configuration is valid")
    }

    fn id(x: &str) -> Predicate {
        Predicate::IdEq(x.to_owned())
    }

    fn field(name: &str, value: Literal) -> Predicate {
        Predicate::FieldEq { path: name.split('.').map(str::to_owned).collect(), value }
    }

    fn s(x: &str) -> Literal {
        Literal::Str(x.to_owned())
    }

    // Checks the EXPLAIN sentences named in the brief and the single-shard id route.
    #[test]
    fn id_and_content_sentences() {
        let m = map(16);
        let plan = route(&id("orders/1-A"), None, &m);
        assert_eq!(plan.opcode, Opcode::Single);
        assert_eq!(plan.shards, [ShardRange::single(ShardId::new(151_326).expect("valid"))]);
        assert_eq!(plan.fragments, [m.fragment_of(ShardId::new(151_326).expect("valid"))]);
        assert_eq!(plan.rule.to_string(), "id() = 'orders/1-A' fixes shard 151326");
        let c = config(r#"{"Fields":["Customer"],"Range":1000}"#);
        let plan = route(&field("Customer", s("customers/1-A")), Some(&c), &m);
        assert_eq!(plan.opcode, Opcode::Single);
        assert_eq!(
            plan.rule.to_string(),
            "Customer = 'customers/1-A' fixes content block [982000, 983000)"
        );
        let plan = route(&Predicate::Any, Some(&c), &m);
        assert_eq!(plan.opcode, Opcode::Scatter);
        assert_eq!(plan.fragments.len(), 16);
        assert_eq!(plan.rule.to_string(), "no routable predicate: scatter");
        let plan = route(&id("orders/1-A$@982173"), None, &m);
        assert_eq!(plan.shards, [ShardRange::single(ShardId::new(982_173).expect("valid"))]);
    }

    // Checks ids no stored document can have route nowhere with a Single, empty plan.
    #[test]
    fn impossible_ids_route_nowhere() {
        let m = map(4);
        for bad in ["", "x$@", "x$@12a", "x$@1048576", "orders/1-A$"] {
            let plan = route(&id(bad), None, &m);
            assert_eq!(plan.opcode, Opcode::Single, "{bad}");
            assert!(plan.matches_nothing(), "{bad}");
            assert!(plan.rule.to_string().contains("matches no document"), "{bad}");
        }
    }

    // Checks an id literal over the length limit still routes: lower-casing can shorten an id
    // (KELVIN SIGN, 3 bytes, lower-cases to `k`), so it may equal a stored id.
    #[test]
    fn over_limit_id_literal_routes() {
        cov_mark::check!(id_literal_over_limit);
        let long = "\u{212a}".repeat(200);
        let plan = route(&id(&long), None, &map(4));
        assert_eq!(plan.shards, [ShardRange::single(hash(&"k".repeat(200)))]);
    }

    // Checks IN lists unite, AND intersects, and Any inside OR scatters.
    #[test]
    fn and_or_combinations() {
        let m = map(16);
        let in_list = Predicate::Or(vec![id("orders/1-A"), id("customers/1-A"), id("users/1")]);
        let plan = route(&in_list, None, &m);
        assert_eq!(plan.opcode, Opcode::Multi);
        assert_eq!(plan.shards.len(), 3);
        assert!(plan.rule.to_string().starts_with("union of (id() = 'orders/1-A' fixes"));
        let both = Predicate::And(vec![in_list.clone(), id("users/1")]);
        let plan = route(&both, None, &m);
        assert_eq!(plan.shards, [ShardRange::single(hash("users/1"))]);
        assert!(matches!(plan.rule, RouteRule::Intersection(_)));
        let contradiction = Predicate::And(vec![id("orders/1-A"), id("users/1")]);
        assert!(route(&contradiction, None, &m).matches_nothing());
        let with_any = Predicate::Or(vec![id("orders/1-A"), Predicate::Any]);
        assert_eq!(route(&with_any, None, &m).opcode, Opcode::Scatter);
        assert!(route(&Predicate::Or(vec![]), None, &m).matches_nothing());
        assert_eq!(route(&Predicate::And(vec![]), None, &m).opcode, Opcode::Scatter);
    }

    // Checks content pruning needs every configured field, in any order, inside an AND, and
    // is never used with Mutable = true or id().
    #[test]
    fn content_rules() {
        let m = map(8);
        let two = config(r#"{"Fields":["A.B","C"]}"#);
        let p =
            Predicate::And(vec![field("C", Literal::Int(7)), Predicate::Any, field("A.B", s("x"))]);
        let plan = route(&p, Some(&two), &m);
        assert_eq!(plan.shards, [ShardRange::single(hash("x\u{1f}7"))]);
        assert_eq!(
            plan.rule.to_string(),
            format!("A.B = 'x' AND C = 7 fixes content block {}", plan.shards[0])
        );
        assert_eq!(route(&field("C", Literal::Int(7)), Some(&two), &m).opcode, Opcode::Scatter);
        let mutable = config(r#"{"Fields":["Customer"],"Mutable":true}"#);
        let plan = route(&field("Customer", s("c")), Some(&mutable), &m);
        assert_eq!(plan.opcode, Opcode::Scatter);
        assert!(plan.rule.to_string().contains("Mutable = true"));
        let by_id = config(r#"{"Fields":["id()"]}"#);
        assert_eq!(route(&field("Customer", s("c")), Some(&by_id), &m).opcode, Opcode::Scatter);
        let numeric = config(r#"{"Fields":["numeric(N)"],"Range":10}"#);
        let plan = route(&field("N", Literal::Int(-1)), Some(&numeric), &m);
        assert_eq!(plan.shards, [ShardRange::new(1_048_570, 1_048_576).expect("valid")]);
        let plan = route(&field("N", Literal::Float(3.0)), Some(&numeric), &m);
        assert_eq!(plan.shards, [ShardRange::new(0, 10).expect("valid")]);
        assert_eq!(route(&field("N", s("3")), Some(&numeric), &m).opcode, Opcode::Scatter);
        let ticks = config(r#"{"Fields":["ticks(T)"]}"#);
        let plan = route(&field("T", s("2000-01-01T00:00:00Z")), Some(&ticks), &m);
        assert_eq!(
            plan.shards,
            [ShardRange::single(ShardId::from_u64_mod(630_822_816_000_000_000))]
        );
        let one = config(r#"{"Fields":["F"]}"#);
        for unsound in [Literal::Null, Literal::Int(1 << 53), Literal::Float(1e300)] {
            assert_eq!(
                route(&field("F", unsound.clone()), Some(&one), &m).opcode,
                Opcode::Scatter,
                "{unsound}"
            );
        }
        assert_eq!(
            route(&field("F", Literal::Float(3.0)), Some(&one), &m).shards,
            route(&field("F", Literal::Int(3)), Some(&one), &m).shards
        );
    }

    // Checks hostile nesting scatters instead of recursing without bound.
    #[test]
    fn deep_nesting_scatters() {
        let mut p = id("orders/1-A");
        for i in 0..(PREDICATE_DEPTH_MAX * 4) {
            p = if i % 2 == 0 { Predicate::Or(vec![p]) } else { Predicate::And(vec![p]) };
        }
        let plan = route(&p, None, &map(2));
        assert_eq!(plan.opcode, Opcode::Scatter);
        assert_eq!(plan.rule, RouteRule::ScatterLimit);
    }

    // Checks range normalisation and intersection on touching and nested ranges.
    #[test]
    fn range_set_algebra() {
        let r = |a, b| ShardRange::new(a, b).expect("valid");
        assert_eq!(normalise(vec![r(5, 7), r(0, 2), r(2, 3), r(6, 9)]), [r(0, 3), r(5, 9)]);
        assert_eq!(
            intersect(&[r(0, 3), r(5, 9)], &[r(2, 6), r(8, 20)]),
            [r(2, 3), r(5, 6), r(8, 9)]
        );
        assert_eq!(intersect(&[r(0, 3)], &[r(3, 4)]), []);
    }
}
