//! Column types ([`SqlType`]) and owned values ([`Datum`]) with their PostgreSQL text and
//! binary encodings, and parameter decoding.
//!
//! **Typing rule.** Every output column has a type known at plan time, so a driver gets it
//! from `Describe` before any row exists:
//! - `id()` and `id` are `text`; `doc` (from `*`) and a bare field (`name`, `address.city`)
//!   are `json`, whatever the documents hold;
//! - a cast (`age::int8`, `name::text`) has the cast's type; a literal has its own type;
//! - comparisons and logic are `bool`; arithmetic is `int8` when both sides are `int8`,
//!   otherwise `float8`;
//! - `count(*)` is `int8`; `sum(x)` is `int8` when `x` is `int8`, otherwise `float8`; `avg` is
//!   `float8`; `min`/`max` have their argument's type.
//!
//! Ordering between datums (ORDER BY, MIN/MAX, GROUP BY keys) is total: numbers (`int8` and
//! `float8` compared by value) < text (byte order, i.e. the C collation) < bool (false <
//! true) < JSON arrays and objects (by their JSON text); NULL sorts last ascending and first
//! descending unless `NULLS FIRST/LAST` says otherwise.

use std::cmp::Ordering;
use std::fmt;

use crate::error::PlanError;

/// The type of a column or parameter. `node` maps each to a PostgreSQL type OID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum SqlType {
    /// `bool` (OID 16)
    Bool,
    /// `int8` (OID 20)
    Int8,
    /// `float8` (OID 701)
    Float8,
    /// `text` (OID 25)
    Text,
    /// `json` (OID 114)
    Json,
}

impl SqlType {
    /// The PostgreSQL type name.
    pub fn pg_name(self) -> &'static str {
        match self {
            SqlType::Bool => "bool",
            SqlType::Int8 => "int8",
            SqlType::Float8 => "float8",
            SqlType::Text => "text",
            SqlType::Json => "json",
        }
    }
}

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.pg_name())
    }
}

/// How a parameter value or a result value is encoded on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    /// PostgreSQL text format.
    Text,
    /// PostgreSQL binary format.
    Binary,
}

/// An owned value: a result cell, a bound parameter, a group key, an aggregate state.
#[derive(Clone, PartialEq, Debug)]
pub enum Datum {
    /// SQL NULL (also a missing field and a JSON `null`).
    Null,
    /// `bool`
    Bool(bool),
    /// `int8`
    Int8(i64),
    /// `float8`
    Float8(f64),
    /// `text`
    Text(String),
    /// `json`
    Json(serde_json::Value),
}

impl Datum {
    /// The type of this datum (`None` for NULL, which has every type).
    pub fn sql_type(&self) -> Option<SqlType> {
        match self {
            Datum::Null => None,
            Datum::Bool(_) => Some(SqlType::Bool),
            Datum::Int8(_) => Some(SqlType::Int8),
            Datum::Float8(_) => Some(SqlType::Float8),
            Datum::Text(_) => Some(SqlType::Text),
            Datum::Json(_) => Some(SqlType::Json),
        }
    }

    /// Whether this is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// The PostgreSQL text encoding, or `None` for NULL: `t`/`f` for bool, decimal for
    /// integers, shortest round-trip for floats (`Infinity`, `-Infinity`, `NaN`), the
    /// string itself for text, JSON text for json.
    pub fn encode_text(&self) -> Option<String> {
        match self {
            Datum::Null => None,
            Datum::Bool(b) => Some(if *b { "t" } else { "f" }.to_owned()),
            Datum::Int8(i) => Some(i.to_string()),
            Datum::Float8(f) => Some(float_text(*f)),
            Datum::Text(s) => Some(s.clone()),
            Datum::Json(v) => Some(v.to_string()),
        }
    }

    /// The PostgreSQL binary encoding, or `None` for NULL: one byte for bool, 8 bytes
    /// big-endian for int8 and float8, UTF-8 for text and json (json's binary form is its text).
    pub fn encode_binary(&self) -> Option<Vec<u8>> {
        match self {
            Datum::Null => None,
            Datum::Bool(b) => Some(vec![u8::from(*b)]),
            Datum::Int8(i) => Some(i.to_be_bytes().to_vec()),
            Datum::Float8(f) => Some(f.to_bits().to_be_bytes().to_vec()),
            Datum::Text(s) => Some(s.as_bytes().to_vec()),
            Datum::Json(v) => Some(v.to_string().into_bytes()),
        }
    }

    /// Decodes parameter `$index` (1-based) of type `ty` from its wire bytes. `None` bytes is
    /// NULL. Binary integers may be 2, 4 or 8 bytes (int2/int4/int8), binary floats 4 or 8;
    /// binary json may carry jsonb's leading version byte 1.
    pub fn decode_param(
        index: usize,
        ty: SqlType,
        format: Format,
        bytes: Option<&[u8]>,
    ) -> Result<Datum, PlanError> {
        let Some(bytes) = bytes else {
            return Ok(Datum::Null);
        };
        let bad = |reason: String| PlanError::BadParameter { index, reason };
        match format {
            Format::Text => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| bad("text parameter is not valid UTF-8".to_owned()))?;
                Datum::parse_text(ty, text).map_err(bad)
            }
            Format::Binary => match ty {
                SqlType::Bool => match bytes {
                    [b] => Ok(Datum::Bool(*b != 0)),
                    _ => Err(bad(format!("binary bool has {} bytes, not 1", bytes.len()))),
                },
                SqlType::Int8 => {
                    if let Ok(b) = <[u8; 8]>::try_from(bytes) {
                        Ok(Datum::Int8(i64::from_be_bytes(b)))
                    } else if let Ok(b) = <[u8; 4]>::try_from(bytes) {
                        Ok(Datum::Int8(i64::from(i32::from_be_bytes(b))))
                    } else if let Ok(b) = <[u8; 2]>::try_from(bytes) {
                        Ok(Datum::Int8(i64::from(i16::from_be_bytes(b))))
                    } else {
                        Err(bad(format!("binary integer has {} bytes", bytes.len())))
                    }
                }
                SqlType::Float8 => {
                    if let Ok(b) = <[u8; 8]>::try_from(bytes) {
                        Ok(Datum::Float8(f64::from_bits(u64::from_be_bytes(b))))
                    } else if let Ok(b) = <[u8; 4]>::try_from(bytes) {
                        Ok(Datum::Float8(f64::from(f32::from_bits(u32::from_be_bytes(b)))))
                    } else {
                        Err(bad(format!("binary float has {} bytes", bytes.len())))
                    }
                }
                SqlType::Text => std::str::from_utf8(bytes)
                    .map(|s| Datum::Text(s.to_owned()))
                    .map_err(|_| bad("text parameter is not valid UTF-8".to_owned())),
                SqlType::Json => {
                    let body = match bytes {
                        [1, rest @ ..] => rest,
                        _ => bytes,
                    };
                    serde_json::from_slice(body)
                        .map(Datum::Json)
                        .map_err(|e| bad(format!("invalid json: {e}")))
                }
            },
        }
    }

    /// Reads a value of type `ty` from PostgreSQL text format.
    pub fn parse_text(ty: SqlType, text: &str) -> Result<Datum, String> {
        match ty {
            SqlType::Text => Ok(Datum::Text(text.to_owned())),
            SqlType::Int8 => text
                .trim()
                .parse::<i64>()
                .map(Datum::Int8)
                .map_err(|_| format!("invalid input for int8: {text:?}")),
            SqlType::Float8 => parse_float(text)
                .map(Datum::Float8)
                .ok_or_else(|| format!("invalid input for float8: {text:?}")),
            SqlType::Bool => parse_bool(text)
                .map(Datum::Bool)
                .ok_or_else(|| format!("invalid input for bool: {text:?}")),
            SqlType::Json => serde_json::from_str(text)
                .map(Datum::Json)
                .map_err(|e| format!("invalid input for json: {e}")),
        }
    }
}

/// PostgreSQL's spellings of booleans (case-insensitive, surrounding blanks ignored).
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
        "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// A float in PostgreSQL text format, including `Infinity`, `-Infinity` and `NaN`.
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    let t = text.trim();
    match t.to_ascii_lowercase().as_str() {
        "infinity" | "+infinity" | "inf" | "+inf" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => t.parse::<f64>().ok().filter(|f| f.is_finite()),
    }
}

/// A float as PostgreSQL prints it with the default `extra_float_digits = 1`: the shortest
/// text that reads back as the same value, exponent form outside `1e-4 ..= 1e16`.
pub(crate) fn float_text(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust prints `1e21` / `1.5e-7`; PostgreSQL prints `1e+21` / `1.5e-07`.
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) => {
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                let pad = if digits.len() < 2 { "0" } else { "" };
                format!("{mantissa}e{sign}{pad}{digits}")
            }
            None => s,
        }
    } else {
        format!("{f}")
    }
}

/// The rank of a datum's kind in the total order (numbers, text, bool, json containers).
fn kind_rank(d: &Datum) -> u8 {
    match d {
        Datum::Int8(_) | Datum::Float8(_) => 0,
        Datum::Text(_) => 1,
        Datum::Bool(_) => 2,
        Datum::Json(_) => 3,
        Datum::Null => 4,
    }
}

/// Compares an integer with a float exactly (no rounding of large integers). NaN sorts
/// above every number, as in PostgreSQL.
pub(crate) fn cmp_int_float(i: i64, f: f64) -> Ordering {
    if f.is_nan() {
        return Ordering::Less;
    }
    // 2^63 as f64; every finite float below it and at or above -2^63 truncates into i64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let t = f.trunc();
    // In range by the two checks above, so the cast is exact.
    #[allow(clippy::cast_possible_truncation)]
    let ti = t as i64;
    match i.cmp(&ti) {
        Ordering::Equal => {
            if f > t {
                Ordering::Less
            } else if f < t {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        other => other,
    }
}

/// Total order on floats: NaN above everything, otherwise numeric (so -0.0 == 0.0).
pub(crate) fn cmp_float(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// A JSON scalar seen as the datum of its own kind; containers and non-JSON datums unchanged.
fn natural(d: &Datum) -> std::borrow::Cow<'_, Datum> {
    use std::borrow::Cow;
    match d {
        Datum::Json(v) => match v {
            serde_json::Value::Null => Cow::Owned(Datum::Null),
            serde_json::Value::Bool(b) => Cow::Owned(Datum::Bool(*b)),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Cow::Owned(Datum::Int8(i)),
                None => Cow::Owned(Datum::Float8(n.as_f64().unwrap_or(f64::NAN))),
            },
            serde_json::Value::String(s) => Cow::Owned(Datum::Text(s.clone())),
            _ => Cow::Borrowed(d),
        },
        _ => Cow::Borrowed(d),
    }
}

/// The total order described in the module docs, with NULL greatest. JSON scalars compare as
/// their own kind (a json `3` equals an int8 `3`).
pub fn datum_cmp(a: &Datum, b: &Datum) -> Ordering {
    let a = natural(a);
    let b = natural(b);
    let (a, b) = (a.as_ref(), b.as_ref());
    match kind_rank(a).cmp(&kind_rank(b)) {
        Ordering::Equal => {}
        other => return other,
    }
    match (a, b) {
        (Datum::Int8(x), Datum::Int8(y)) => x.cmp(y),
        (Datum::Int8(x), Datum::Float8(y)) => cmp_int_float(*x, *y),
        (Datum::Float8(x), Datum::Int8(y)) => cmp_int_float(*y, *x).reverse(),
        (Datum::Float8(x), Datum::Float8(y)) => cmp_float(*x, *y),
        (Datum::Text(x), Datum::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Datum::Bool(x), Datum::Bool(y)) => x.cmp(y),
        (Datum::Json(x), Datum::Json(y)) => x.to_string().cmp(&y.to_string()),
        _ => Ordering::Equal,
    }
}

/// A datum with the total order of [`datum_cmp`], usable as a map key (group keys).
#[derive(Clone, Debug)]
pub struct OrdDatum(pub Datum);

impl PartialEq for OrdDatum {
    fn eq(&self, other: &Self) -> bool {
        datum_cmp(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for OrdDatum {}
impl PartialOrd for OrdDatum {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdDatum {
    fn cmp(&self, other: &Self) -> Ordering {
        datum_cmp(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Checks text encodings follow PostgreSQL's spellings for each type.
    #[test]
    fn text_encoding() {
        assert_eq!(Datum::Bool(true).encode_text().as_deref(), Some("t"));
        assert_eq!(Datum::Int8(-5).encode_text().as_deref(), Some("-5"));
        assert_eq!(Datum::Float8(1.5).encode_text().as_deref(), Some("1.5"));
        assert_eq!(Datum::Float8(3.0).encode_text().as_deref(), Some("3"));
        assert_eq!(Datum::Float8(1e21).encode_text().as_deref(), Some("1e+21"));
        assert_eq!(Datum::Float8(1.5e-7).encode_text().as_deref(), Some("1.5e-07"));
        assert_eq!(Datum::Float8(f64::NEG_INFINITY).encode_text().as_deref(), Some("-Infinity"));
        assert_eq!(
            Datum::Json(serde_json::json!({"a": [1, "x"]})).encode_text().as_deref(),
            Some(r#"{"a":[1,"x"]}"#)
        );
        assert_eq!(Datum::Null.encode_text(), None);
    }

    // Checks binary encode and decode round-trip for every type and reject bad lengths.
    #[test]
    fn binary_round_trip() {
        let cases = [
            (SqlType::Bool, Datum::Bool(true)),
            (SqlType::Int8, Datum::Int8(i64::MIN)),
            (SqlType::Float8, Datum::Float8(-2.25)),
            (SqlType::Text, Datum::Text("héllo".to_owned())),
            (SqlType::Json, Datum::Json(serde_json::json!({"k": null}))),
        ];
        for (ty, d) in cases {
            let bytes = d.encode_binary().expect("not null");
            let back = Datum::decode_param(1, ty, Format::Binary, Some(&bytes)).expect("decodes");
            assert_eq!(back, d);
        }
        let int4 = 7i32.to_be_bytes();
        assert_eq!(
            Datum::decode_param(1, SqlType::Int8, Format::Binary, Some(&int4)),
            Ok(Datum::Int8(7))
        );
        assert!(Datum::decode_param(2, SqlType::Int8, Format::Binary, Some(&[1, 2, 3])).is_err());
        assert!(Datum::decode_param(1, SqlType::Bool, Format::Binary, Some(&[])).is_err());
        assert_eq!(Datum::decode_param(1, SqlType::Int8, Format::Binary, None), Ok(Datum::Null));
    }

    // Checks text parameter decoding per type, including PostgreSQL's bool and float spellings.
    #[test]
    fn text_params() {
        let d = |ty, s: &str| Datum::decode_param(1, ty, Format::Text, Some(s.as_bytes()));
        assert_eq!(d(SqlType::Int8, " 42 "), Ok(Datum::Int8(42)));
        assert_eq!(d(SqlType::Bool, "on"), Ok(Datum::Bool(true)));
        assert_eq!(d(SqlType::Float8, "-Infinity"), Ok(Datum::Float8(f64::NEG_INFINITY)));
        assert!(matches!(d(SqlType::Int8, "4x"), Err(PlanError::BadParameter { index: 1, .. })));
        assert!(d(SqlType::Json, "{").is_err());
        assert!(Datum::decode_param(1, SqlType::Text, Format::Text, Some(&[0xff, 0xfe])).is_err());
    }

    // Checks the total order: numbers by value across int/float, then text, bool, json, NULL.
    #[test]
    fn total_order() {
        use Ordering::*;
        assert_eq!(datum_cmp(&Datum::Int8(2), &Datum::Float8(2.5)), Less);
        assert_eq!(datum_cmp(&Datum::Int8(3), &Datum::Float8(3.0)), Equal);
        assert_eq!(datum_cmp(&Datum::Int8(i64::MAX), &Datum::Float8(9.3e18)), Less);
        assert_eq!(datum_cmp(&Datum::Float8(-0.5), &Datum::Int8(0)), Less);
        assert_eq!(datum_cmp(&Datum::Int8(100), &Datum::Text("1".into())), Less);
        assert_eq!(datum_cmp(&Datum::Text("b".into()), &Datum::Bool(false)), Less);
        assert_eq!(datum_cmp(&Datum::Json(serde_json::json!(3)), &Datum::Int8(3)), Equal);
        assert_eq!(datum_cmp(&Datum::Json(serde_json::json!([1])), &Datum::Null), Less);
        assert_eq!(cmp_int_float(5, f64::NAN), Less);
    }
}
